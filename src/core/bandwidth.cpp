#include "core/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/timer.h"

namespace attnlab {
namespace {

volatile float g_sink;  // keeps the sums alive

// Sums x[0, n) with 8 independent accumulators per lane group: the compiler vectorizes the inner
// loop to full-width loads (AVX-512, AVX2 or SSE, whatever the build targets), and 8 chains hide the
// add latency, so the loop is limited by loads, not by the adds.
float sum_floats(const float* x, size_t n) {
  constexpr int kAcc = 8, kLane = 16;
  float acc[kAcc][kLane] = {};
  size_t i = 0;
  for (; i + kAcc * kLane <= n; i += kAcc * kLane)
    for (int a = 0; a < kAcc; ++a)
#pragma omp simd
      for (int l = 0; l < kLane; ++l) acc[a][l] += x[i + a * kLane + l];
  float s = 0;
  for (; i < n; ++i) s += x[i];
  for (int a = 0; a < kAcc; ++a)
    for (int l = 0; l < kLane; ++l) s += acc[a][l];
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
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < (long)n; ++i) buf[i] = 1e-3f * float(i & 1023);
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
