#include "core/arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace attnlab {

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  // Round to 2 MiB so the kernel can back the buffer with huge pages (docs/performance.md pitfall 2: 4-6 GB/s first
  // touch instead of 0.35 GB/s).
  const size_t align = bytes >= (size_t(4) << 20) ? (size_t(2) << 20) : 64;
  size_t rounded = (bytes + align - 1) / align * align;
  ptr_ = std::aligned_alloc(align, rounded);
  if (!ptr_) fail("out of memory allocating ", bytes, " bytes");
  if (align > 64) madvise(ptr_, rounded, MADV_HUGEPAGE);
  std::memset(ptr_, 0, bytes);  // touch once, here, not in the training loop
}

Buffer::~Buffer() { std::free(ptr_); }

Buffer::Buffer(Buffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void Arena::overflow() const {
  fail("internal: arena overflow (", used_, " > ", buf_.bytes(), " bytes): the memory plan and its use disagree");
}

}  // namespace attnlab
