// attnlab data: small file helpers shared by the tokenizer, shards and prepare().
#include "data/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/memory.h"

namespace attnlab::data_files {

namespace {
// What is read from a pipe or device before giving up (a regular file is checked by its size).
constexpr size_t kMaxStreamBytes = size_t(1) << 30;
}  // namespace

std::string read_text_file(const std::string& path, const char* role) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(role, " ", path, ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(role, " ", path, ": cannot open (", std::strerror(errno), ")");
  // The whole text is held in memory: a file larger than the machine's memory, or a device or pipe
  // that never ends (/dev/zero), is refused with its size instead of ending in std::bad_alloc.
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const double memory = physical_memory_bytes();
  if (regular) {
    const double size = double(std::filesystem::file_size(path, ec));
    if (!ec && memory > 0 && size > memory / 2)
      fail(role, " ", path, ": ", memory_text(size), " is more than half of this machine's ", memory_text(memory),
           " of memory, and prepare holds the whole text in memory; split it or use a sample");
  }
  const size_t limit = regular ? SIZE_MAX : kMaxStreamBytes;
  std::string text;
  std::vector<char> chunk(size_t(1) << 20);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    const size_t got = size_t(in.gcount());
    // Text never holds a NUL byte; a binary file (or /dev/zero) is refused at its first one.
    if (const void* nul = std::memchr(chunk.data(), 0, got))
      fail(role, " ", path, ": holds a NUL byte at offset ", text.size() + size_t(static_cast<const char*>(nul) - chunk.data()),
           ": not a text file");
    text.append(chunk.data(), got);
    if (text.size() > limit)
      fail(role, " ", path, ": not a regular file, and more than ", memory_text(double(limit)),
           " came out of it (a device such as /dev/zero, or an endless pipe?); save the text to a file first");
  }
  if (in.bad()) fail(role, " ", path, ": read error");
  if (text.empty()) fail(role, " ", path, ": is empty; give a file with text in it");
  return text;
}

void write_file_atomically(const std::string& path, std::initializer_list<std::string_view> parts, const char* role) {
  const TempFile tf = create_temp_beside(path);  // our own temporary: never shared with another writer
  const std::string& tmp = tf.path;
  const int fd = tf.fd;
  if (fd < 0) fail(role, " ", path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
  auto give_up = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(role, " ", path, ": ", what, " (", std::strerror(err), ")");
  };
  for (std::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      const ssize_t w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) give_up("write failed", w < 0 ? errno : ENOSPC);
      done += size_t(w);
    }
  }
  if (::fsync(fd) != 0) give_up("cannot flush to disk", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(role, " ", path, ": cannot close (", std::strerror(err), ")");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(role, " ", path, ": cannot rename ", tmp, " into place (", std::strerror(err), ")");
  }
  // The rename itself is durable only once the directory entry is on disk.
  sync_directory(parent_directory(path));
}

}  // namespace attnlab::data_files
