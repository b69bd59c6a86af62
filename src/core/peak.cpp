#include "core/peak.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/timer.h"

namespace attnlab {
namespace {

// One thread's share of a trial: `iters` rounds of `chains` independent FMAs on vectors of `lanes`
// floats. acc = acc·m + c with m just below 1 converges to c/(1 − m): no overflow, no denormal.
// The chains cover the FMA latency times the FMA units (4 cycles × 2 units on the CPUs we have).
// The loop is the widest this CPU runs, whatever the build's -march (each x86 version is compiled
// for its own instruction set and chosen at run time), so the peak is the machine's.
struct FmaLoop {
  const char* isa;
  int lanes, chains;
  float (*run)(long iters);
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_loop_avx512(long iters) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-3f);
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it, bug 105593)
  _mm512_store_ps(out, acc[0]);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  constexpr int kChains = 12;  // 12 accumulators + 2 constants of the 16 registers
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-3f);
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  alignas(32) float out[8];
  _mm256_store_ps(out, acc[0]);
  return out[0] + out[7];
}
// bf16: VDPBF16PS multiplies 32 pairs of bf16 values and adds each two products into one of 16
// float lanes: 64 FLOPs per instruction, counted as lanes = 32 below. acc grows by 2·a·b per
// instruction (2e-6): far from overflow for any trial length.
__attribute__((target("avx512f,avx512bf16"))) float dot_loop_avx512bf16(long iters) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (long it = 0; it < iters; ++it)
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, acc[0]);
  return out[0] + out[15];
}
#endif

float fma_loop_portable(long iters) {
  constexpr int kChains = 16;
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = float(i);
  const float m = 0.999999f, c = 1e-3f;
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * m + c;
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += acc[i];
  return s;
}

FmaLoop widest_fma_loop() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {"AVX-512 FMA", 16, 24, fma_loop_avx512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {"AVX2 FMA", 8, 12, fma_loop_avx2};
#endif
  return {"portable (scalar a*b+c as compiled)", 1, 16, fma_loop_portable};
}

// The bf16 products' loop: AVX512-BF16's dot product where the CPU has it; elsewhere gemm(bf16)
// widens to float, and the float FMA loop is the peak. (AMX tiles, where a CPU has them, are not
// measured: there the bf16 figure is the AVX512-BF16 one and MFU reads high.)
FmaLoop widest_bf16_loop() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return {"AVX512-BF16 dot product", 32, 24, dot_loop_avx512bf16};
#endif
  return widest_fma_loop();
}

volatile float g_sink;  // keeps the loops' results alive

// One trial: every thread runs fma_loop(iters) at once and times its own loop; rate[t] = its best
// GFLOP/s so far. Per-thread times, best over many short trials: on a shared machine some trial
// of each thread runs without being descheduled, while all threads still run concurrently (two
// threads on one SMT core share its FMA units and read half each, as they should).
void trial(const FmaLoop& loop, int threads, long iters, double* rate) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
#pragma omp barrier
    Timer timer;
    const float r = loop.run(iters);
    const double seconds = timer.seconds();
    if (r == 12345.f) g_sink = r;
    rate[t] = std::max(rate[t], 2.0 * loop.lanes * loop.chains * double(iters) / seconds / 1e9);
  }
}

double measure(const FmaLoop& loop, int threads) {
  std::vector<double> rate(threads, 0.0);
  long iters = 1 << 10;
  for (;;) {  // about 2 ms per trial
    Timer t;
    trial(loop, threads, iters, rate.data());
    if (t.seconds() > 0.002 || iters > (1L << 40)) break;
    iters *= 2;
  }
  std::fill(rate.begin(), rate.end(), 0.0);
  for (int i = 0; i < 40; ++i) trial(loop, threads, iters, rate.data());
  double total = 0;
  for (double r : rate) total += r;
  return total;
}

}  // namespace

PeakFlops peak_flops(int threads, bool bf16) {
  threads = std::max(1, threads);
  static const FmaLoop loops[2] = {widest_fma_loop(), widest_bf16_loop()};
  const FmaLoop& loop = loops[bf16];
  if (const char* e = std::getenv(bf16 ? "ATTNLAB_PEAK_GFLOPS_BF16" : "ATTNLAB_PEAK_GFLOPS")) {
    const double v = std::atof(e);
    if (v > 0) return {v, threads, bf16 ? "ATTNLAB_PEAK_GFLOPS_BF16" : "ATTNLAB_PEAK_GFLOPS", loop.isa};
  }
  static std::mutex mu;
  static PeakFlops cached[2];
  std::lock_guard<std::mutex> lock(mu);
  if (cached[bf16].threads != threads) cached[bf16] = {measure(loop, threads), threads, "measured", loop.isa};
  return cached[bf16];
}

}  // namespace attnlab
