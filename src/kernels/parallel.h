// When a kernel uses threads.
#pragma once
#include <cstddef>

namespace attnlab::kernels {

// Below this many elements an elementwise or per-row kernel runs on the calling thread alone: an
// OpenMP fork/join costs microseconds (tens with OMP_WAIT_POLICY=PASSIVE), more than the work.
// Decoding calls such kernels on one row per sequence, dozens of times per token.
inline constexpr size_t kParallelMinElements = 16384;

}  // namespace attnlab::kernels
