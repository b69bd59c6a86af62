#include "core/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/timer.h"

namespace attnlab {
namespace {

volatile float g_sink;  // keeps the sums alive

// Sums x[0, n) as 8 interleaved streams (x split in 8 equal parts read side by side): one core
// reads faster with several sequential streams in flight than with one (on the Zen 3 of
// 2026-12-02, bench/decode_read_bench.cpp: 1 stream 9–12 GB/s, 8 streams 20–21).
// The bound must use the fastest pattern, or the kernels measured against it look better than they
// are (the multi-row decode kernels read several rows of W at once). Eight sums hide the add
// latency; the compiler vectorizes the loop to full-width loads.
float sum_floats(const float* x, size_t n) {
  const size_t m = n / 8;
  const float *x0 = x, *x1 = x + m, *x2 = x + 2 * m, *x3 = x + 3 * m, *x4 = x + 4 * m, *x5 = x + 5 * m,
              *x6 = x + 6 * m, *x7 = x + 7 * m;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
  for (size_t i = 0; i < m; ++i) {
    s0 += x0[i], s1 += x1[i], s2 += x2[i], s3 += x3[i];
    s4 += x4[i], s5 += x5[i], s6 += x6[i], s7 += x7[i];
  }
  float s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
  for (size_t i = 8 * m; i < n; ++i) s += x[i];
  return s;
}

}  // namespace

ReadBandwidth read_bandwidth(size_t bytes, int threads) {
  threads = std::max(1, threads);
  bytes = std::clamp<size_t>(bytes, size_t(64) << 10, size_t(4) << 30);
  if (const char* e = std::getenv("ATTNLAB_READ_GBPS")) {
    const double v = std::atof(e);
    if (v > 0) return {v, bytes, threads, "ATTNLAB_READ_GBPS"};
  }
  const size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
  // First touch by the threads that will read each part (their NUMA node, where there is one).
  // Distinct values on every page (the earlier fill repeated every 4 KiB): a host that merges
  // equal pages could serve such a buffer from one page, faster than real weights are read.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < (long)n; ++i) buf[i] = float(uint32_t(i) * 2654435761u % 1000003u) * 1e-6f;
  auto pass = [&](int reps) {
    Timer t;
#pragma omp parallel num_threads(threads)
    {
      const int id = omp_get_thread_num(), nt = omp_get_num_threads();
      const size_t lo = n * id / nt, hi = n * (id + 1) / nt;
      float s = 0;
      for (int r = 0; r < reps; ++r) {
        s += sum_floats(buf.data() + lo, hi - lo);
        // The buffer may have changed as far as the compiler knows: every pass reads it again
        // (without this, the pure sum is computed once and multiplied by reps).
        asm volatile("" : : "r"(buf.data()) : "memory");
      }
      if (s == 12345.f) g_sink = s;
    }
    return t.seconds();
  };
  pass(1);  // warm: caches, TLB, page tables
  int reps = 1;
  while (pass(reps) < 0.01 && reps < (1 << 20)) reps *= 2;
  double best = 1e30;
  for (int i = 0; i < 15; ++i) best = std::min(best, pass(reps));
  return {double(n * sizeof(float)) * reps / best / 1e9, n * sizeof(float), threads, "measured"};
}

}  // namespace attnlab
