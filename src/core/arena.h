// attnlab core: large aligned buffers, allocated once and touched once.
// docs/performance.md pitfall 2: first touch of fresh memory is very slow on this VM and glibc returns big
// blocks to the OS on free, so every long-lived buffer (parameters, gradients, Adam moments,
// activations, scratch) comes from here and is reused for the life of the run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace attnlab {

// A 64-byte-aligned, zero-filled, huge-page-advised buffer. Move-only.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Bump allocator over one Buffer: plan sizes with reserve() (first pass, counting), then
// allocate() the same sequence after commit(). Used for activation memory planned once.
class Arena {
 public:
  // Rounds every request up to 64 bytes so each slice is cache-line aligned.
  static size_t round_up(size_t bytes) { return (bytes + 63) & ~size_t(63); }
  template <class T> T* take(size_t count) {
    size_t need = round_up(count * sizeof(T));
    if (!buf_.data()) { planned_ += need; return nullptr; }
    T* p = reinterpret_cast<T*>(static_cast<char*>(buf_.data()) + used_);
    used_ += need;
    if (used_ > buf_.bytes()) overflow();
    return p;
  }
  // After a counting pass (take() on an uncommitted arena returns nullptr), allocate the total.
  void commit() { buf_ = Buffer(planned_); used_ = 0; }
  void rewind() { used_ = 0; }
  size_t planned() const { return planned_; }
  size_t used() const { return used_; }
  bool committed() const { return buf_.data() != nullptr; }

 private:
  [[noreturn]] void overflow() const;
  Buffer buf_;
  size_t planned_ = 0, used_ = 0;
};

}  // namespace attnlab
