#include "core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace attnlab {

namespace {
std::atomic<unsigned long> g_temp_counter{0};

// "<anything>.tmp.<pid>.<n>" → pid, or 0 when the name is not one of ours.
long temp_owner(const std::string& name) {
  const size_t last_dot = name.rfind('.');
  if (last_dot == std::string::npos || last_dot == 0) return 0;
  const size_t pid_dot = name.rfind('.', last_dot - 1);
  if (pid_dot == std::string::npos || pid_dot < 4 || name.compare(pid_dot - 4, 4, ".tmp") != 0) return 0;
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  const std::string pid = name.substr(pid_dot + 1, last_dot - pid_dot - 1), n = name.substr(last_dot + 1);
  if (!digits(pid) || !digits(n)) return 0;
  return std::atol(pid.c_str());
}
}  // namespace

TempFile create_temp_beside(const std::string& target) {
  TempFile t;
  const std::string base = target + ".tmp." + std::to_string(long(::getpid())) + ".";
  for (int attempt = 0; attempt < 1000; ++attempt) {
    t.path = base + std::to_string(g_temp_counter.fetch_add(1));
    t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t.fd >= 0 || errno != EEXIST) return t;  // EEXIST: a dead process of our pid left one; try the next n
  }
  return t;
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool sync_directory(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return false;
  const bool ok = ::fsync(dfd) == 0;
  const int err = errno;
  ::close(dfd);
  errno = err;
  return ok;
}

size_t remove_stale_temps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const long pid = temp_owner(name);
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(d);
  size_t removed = 0;
  for (const auto& name : stale) removed += ::unlink((dir + "/" + name).c_str()) == 0;
  return removed;
}

DirLock DirLock::acquire(const std::string& dir, const std::string& what, const std::string& command) {
  return DirLock::lock(dir, what, command, false);
}

DirLock DirLock::acquire_shared(const std::string& dir, const std::string& what, const std::string& command) {
  return DirLock::lock(dir, what, command, true);
}

DirLock DirLock::lock(const std::string& dir, const std::string& what, const std::string& command, bool shared) {
  DirLock lock;
  lock.path_ = dir + "/" + kLockFileName;
  lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) {
    const int err = errno;
    fail(what, " ", dir, ": cannot create the lock file ", lock.path_, " (", std::strerror(err), ")");
  }
  if (::flock(lock.fd_, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) fail(what, " ", dir, ": cannot lock ", lock.path_, " (", std::strerror(err), ")");
    char buf[256] = {};
    const ssize_t got = ::pread(lock.fd_, buf, sizeof buf - 1, 0);
    std::string holder = got > 0 ? std::string(buf, size_t(got)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    fail(what, " ", dir, " is in use by another process (", holder.empty() ? std::string("pid unknown") : holder,
         ", holding ", lock.path_, "); wait for it to finish or choose another directory");
  }
  const std::string me = "pid " + std::to_string(long(::getpid())) + ", " + command + "\n";
  lock.shared_ = shared;
  if (shared) {  // appended: the record lists the shared holders (and is not cleared when one leaves)
    if (::lseek(lock.fd_, 0, SEEK_END) >= 0) {
      const ssize_t w = ::write(lock.fd_, me.data(), me.size());
      (void)w;
    }
  } else if (::ftruncate(lock.fd_, 0) == 0) {
    const ssize_t w = ::pwrite(lock.fd_, me.data(), me.size(), 0);
    (void)w;  // the record is informational; the flock is the lock
  }
  return lock;
}

DirLock::DirLock(DirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)), shared_(o.shared_), path_(std::move(o.path_)) {}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    shared_ = o.shared_;
    path_ = std::move(o.path_);
  }
  return *this;
}

DirLock::~DirLock() {
  if (fd_ >= 0) {
    // Leave the file (deleting a flock'ed file races with a process about to lock it); clear the
    // holder record so a reader does not mistake it for a live one.
    if (!shared_ && ::ftruncate(fd_, 0) != 0) {
    }
    ::close(fd_);
  }
}

}  // namespace attnlab
