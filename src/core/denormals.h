// attnlab core: flush-to-zero (FTZ) and denormals-are-zero (DAZ) for the duration of a library call
// (docs/mechanisms.md §0, "Precision"). Under ALiBi or GOAT's recency prior at long T, far keys get
// probabilities near e^-87 whose products land in the denormal range, where each operation costs
// ~100 cycles. The CLI sets both bits once in main(); a library cannot: the caller's thread and the
// OpenMP workers may be anyone's. So each compute entry point of the public API (src/api/) holds a
// ScopedFlushDenormals: it saves MXCSR on the calling thread and on every thread of an OpenMP team,
// sets FTZ|DAZ there, and restores each thread's saved value at the end. Results are then the ones
// the CLI gets (it runs with the same bits set throughout).
// Thread-safety: one per thread at a time; nesting is fine (the inner one restores what it found).
// The workers are reached through one `omp parallel` region of the default team size at each end;
// with libgomp the same pool threads answer both (a worker outside that team keeps its own bits).
#pragma once
#include <vector>

namespace attnlab {

class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals();
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  unsigned caller_ = 0;
  std::vector<unsigned> workers_;  // per OpenMP thread number
};

}  // namespace attnlab
