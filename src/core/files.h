// attnlab core: the pieces of safe file replacement shared by every writer (checkpoints, shards,
// tokenizer files, .npy, the metrics log) and the lock that keeps two processes out of one
// directory.
//
// Temporary files are named "<path>.tmp.<pid>.<n>" (n counts per process) and created with
// O_EXCL, so two writers of one path never share a temporary: each renames its own complete file
// into place, and the last rename wins. A temporary left behind by a writer that was killed
// carries that writer's pid, so remove_stale_temps() can tell it from one still being written.
#pragma once
#include <cstddef>
#include <string>

namespace attnlab {

struct TempFile {
  std::string path;  // "<target>.tmp.<pid>.<n>"
  int fd = -1;       // open for writing (O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode 0644)
};

// Creates a fresh temporary beside `target`. On failure returns fd = -1 with errno set (the path
// of the last attempt is in .path, for the message).
TempFile create_temp_beside(const std::string& target);

// The directory part of a path ("." for a bare name, "/" for "/x").
std::string parent_directory(const std::string& path);

// fsync of a directory, so that a rename into it is durable. Returns false with errno set.
bool sync_directory(const std::string& dir);

// Removes the temporaries in `dir` (not recursively) whose writer process is gone: names of the
// form "<anything>.tmp.<pid>.<n>" where no process <pid> exists. Returns how many it removed.
size_t remove_stale_temps(const std::string& dir);

// An exclusive advisory lock (flock) on "<dir>/.attnlab.lock", which also records the holder's pid
// and command. A second process that asks for the same directory gets an Error naming the holder;
// the lock is released when the object is destroyed or the process exits (even by kill -9, so a
// stale lock file never blocks anyone). The directory must exist.
class DirLock {
 public:
  DirLock() = default;
  // what: "train.out_dir", "prepare --out": names the directory's role in the error message.
  // command: recorded for the next process's error message ("attnlab train").
  static DirLock acquire(const std::string& dir, const std::string& what, const std::string& command);
  // A shared hold of the same lock: any number of shared holders at once (the cells of a compare
  // array, each training runs of its own), none beside an exclusive holder.
  static DirLock acquire_shared(const std::string& dir, const std::string& what, const std::string& command);
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();
  const std::string& path() const { return path_; }

 private:
  static DirLock lock(const std::string& dir, const std::string& what, const std::string& command, bool shared);
  int fd_ = -1;
  bool shared_ = false;
  std::string path_;
};

inline constexpr const char* kLockFileName = ".attnlab.lock";

}  // namespace attnlab
