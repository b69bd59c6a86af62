// Shared by the libFuzzer targets (fuzz/*.cpp, built with -DATTNLAB_FUZZ=ON and clang): the
// readers under test take a path, so each input is written to a per-process scratch file first.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab::fuzz {

// Writes data to /tmp/attnlab_fuzz_<tag>_<pid> (rewritten for every input) and returns the path.
inline std::string scratch_file(const char* tag, const uint8_t* data, size_t size) {
  const std::string path = std::string("/tmp/attnlab_fuzz_") + tag + "_" + std::to_string(long(::getpid()));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) __builtin_trap();
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) __builtin_trap();
    done += size_t(w);
  }
  ::close(fd);
  return path;
}

}  // namespace attnlab::fuzz
