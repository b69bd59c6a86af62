// When a kernel uses threads.
#pragma once
#include <cstddef>

namespace attnlab::kernels {

// Below this many elements an elementwise or per-row kernel runs on the calling thread alone: an
// OpenMP fork/join costs microseconds (tens with OMP_WAIT_POLICY=PASSIVE), more than the work.
// Decoding calls such kernels on one row per sequence, dozens of times per token.
// On a combined `parallel for simd`, write the condition as `if (parallel : cond)`: a plain `if`
// applies to the simd part too (OpenMP 5.0), so below the threshold the loop ran unvectorized
// (GELU on a decoding row: 3.9 µs instead of 0.28 for 1024 values, GCC 12).
inline constexpr size_t kParallelMinElements = 16384;

}  // namespace attnlab::kernels
