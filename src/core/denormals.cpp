// ScopedFlushDenormals (core/denormals.h).
#include "core/denormals.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif
#include <omp.h>

namespace attnlab {
namespace {
#if defined(__SSE__)
constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)
unsigned read_mode() { return _mm_getcsr(); }
void write_mode(unsigned csr) { _mm_setcsr(csr); }
#else
constexpr unsigned kFlushBits = 0;
unsigned read_mode() { return 0; }
void write_mode(unsigned) {}
#endif
}  // namespace

ScopedFlushDenormals::ScopedFlushDenormals() : caller_(read_mode()), workers_((size_t)omp_get_max_threads(), 0u) {
  write_mode(caller_ | kFlushBits);
  // (Workers beyond the vector cannot exist: the team is at most omp_get_max_threads().)
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    if ((size_t)t < workers_.size()) {
      workers_[t] = read_mode();
      write_mode(workers_[t] | kFlushBits);
    }
  }
}

ScopedFlushDenormals::~ScopedFlushDenormals() {
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
    if ((size_t)t < workers_.size() && t != 0) write_mode(workers_[t]);
  }
  write_mode(caller_);
}

}  // namespace attnlab
