// attnlab data: small file helpers shared by the tokenizer, shards and prepare().
#include "data/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/files.h"

namespace attnlab::data_files {

std::string read_text_file(const std::string& path, const char* role) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(role, " ", path, ": is a directory, expected a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(role, " ", path, ": cannot open (", std::strerror(errno), ")");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
