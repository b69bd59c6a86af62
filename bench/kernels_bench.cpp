// Timing of the basic kernels (src/kernels/{embedding,norm,linear,mlp,rope,adamw}.h) at training
// shapes: B·T = 4096 rows, C = 256..1024, 2 OpenMP threads. Prints a markdown table: median time of
// `reps` runs after warm-up, and the throughput that bounds each kernel — GB/s of compulsory memory
// traffic for the elementwise/row kernels (compare with the `copy` row, a plain parallel copy) and
// GFLOP/s for the GEMM-based linear layer (compare with docs/performance.md's ≈ 360–385 GFLOP/s best fp32 GEMM).
// A few naive references are timed too, so the speed-up of the fast kernels is visible.
//
//   build/<dir>/kernels_bench [reps=15] [C list=256,512,768,1024] [cpu]
// With `cpu`, times are process CPU seconds instead of wall seconds: run it so with OMP_NUM_THREADS=1
// on a busy machine, where wall times measure the other processes more than the kernel.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/adamw.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/mlp.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

using namespace attnlab;
using namespace attnlab::kernels;

namespace {

int g_reps = 15;
bool g_cpu_time = false;

double now_seconds() {
  if (g_cpu_time) return double(std::clock()) / CLOCKS_PER_SEC;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

// Median and best seconds of `reps` runs of f after two warm-up runs (the warm-up also first-touches
// the outputs). The machine is shared, so the best run is printed too: it is the better estimate of
// the kernel's own speed when other processes take the second core now and then.
struct Timing {
  double median, best;
};

Timing time_runs(const std::function<void()>& f, int reps = -1) {
  if (reps < 0) reps = g_reps;
  f();
  f();
  std::vector<double> t(reps);
  for (auto& s : t) {
    const double t0 = now_seconds();
    f();
    s = now_seconds() - t0;
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

void row_gbs(const char* name, const char* shape, Timing t, double bytes) {
  std::printf("| %-28s | %-10s | %9.3f | %9.3f | %7.1f GB/s | %7.1f GB/s |\n", name, shape, t.median * 1e3, t.best * 1e3,
              bytes / t.median * 1e-9, bytes / t.best * 1e-9);
}
void row_gflops(const char* name, const char* shape, Timing t, double flops) {
  std::printf("| %-28s | %-10s | %9.3f | %9.3f | %7.1f GFLOP/s | %7.1f GFLOP/s |\n", name, shape, t.median * 1e3,
              t.best * 1e3, flops / t.median * 1e-9, flops / t.best * 1e-9);
}

void bench_width(int C) {
  const int B = 16, T = 256, N = B * T, V = 8192, Tmax = 1024;
  char shape[32];
  std::snprintf(shape, sizeof shape, "C=%d", C);
  const size_t NC = (size_t)N * C;
  const double f4 = sizeof(float);

  // Reference bandwidth: a parallel copy of N·C floats (read + write).
  {
    auto a = randn(NC, 1);
    std::vector<float> b(NC);
    const Timing s = time_runs([&] {
#pragma omp parallel for simd schedule(static)
      for (size_t i = 0; i < NC; ++i) b[i] = a[i];
    });
    row_gbs("copy (reference)", shape, s, 2 * NC * f4);
  }

  // Embedding.
  {
    std::vector<int32_t> tok(N);
    Rng rng(2);
    for (auto& t : tok) t = int32_t(rng.below(V));
    auto wte = randn((size_t)V * C, 3, 0.02), wpe = randn((size_t)Tmax * C, 4, 0.02);
    auto dout = randn(NC, 5);
    std::vector<float> out(NC), dwte((size_t)V * C, 0.0f), dwpe((size_t)Tmax * C, 0.0f);
    Timing s = time_runs([&] { embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0); });
    row_gbs("embedding_forward (+pos)", shape, s, 3 * NC * f4);
    s = time_runs([&] { embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, 0); });
    row_gbs("embedding_backward (+pos)", shape, s, 3 * NC * f4);
  }

  // Norms: compulsory traffic forward = read x + write y; backward = read dy, x + read/write dx.
  {
    auto x = randn(NC, 6), dout = randn(NC, 7), w = randn(C, 8), b = randn(C, 9);
    std::vector<float> out(NC), mean(N), rstd(N), dx(NC, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    Timing s = time_runs([&] { layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C); });
    row_gbs("layernorm_forward", shape, s, 2 * NC * f4);
    if (C == 768) {
      s = time_runs([&] { layernorm_forward_naive(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C); }, 3);
      row_gbs("  layernorm_forward_naive", shape, s, 2 * NC * f4);
    }
    s = time_runs([&] {
      layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    });
    row_gbs("layernorm_backward", shape, s, 4 * NC * f4);
    if (C == 768) {
      s = time_runs([&] {
        layernorm_backward_naive(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
      }, 3);
      row_gbs("  layernorm_backward_naive", shape, s, 4 * NC * f4);
    }
    s = time_runs([&] { rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C); });
    row_gbs("rmsnorm_forward", shape, s, 2 * NC * f4);
    s = time_runs([&] { rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C); });
    row_gbs("rmsnorm_backward", shape, s, 4 * NC * f4);
  }

  // Linear: the attention output projection (C→C) and the MLP up-projection (C→4C).
  for (int mult : {1, 4}) {
    const int OC = mult * C;
    auto x = randn(NC, 10), W = randn((size_t)C * OC, 11, 0.02), bias = randn(OC, 12);
    auto dout = randn((size_t)N * OC, 13);
    std::vector<float> out((size_t)N * OC), dx(NC), dW((size_t)C * OC, 0.0f), db(OC, 0.0f);
    const double flops = 2.0 * N * C * OC;
    Timing s = time_runs([&] { linear_forward(out.data(), x.data(), W.data(), bias.data(), N, C, OC); });
    row_gflops(mult == 1 ? "linear_forward C->C" : "linear_forward C->4C", shape, s, flops);
    s = time_runs([&] { linear_forward(out.data(), x.data(), W.data(), (const float*)nullptr, N, C, OC); });
    row_gflops(mult == 1 ? "  (no bias) C->C" : "  (no bias) C->4C", shape, s, flops);
    s = time_runs([&] { linear_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, C, OC); });
    row_gflops(mult == 1 ? "linear_backward C->C" : "linear_backward C->4C", shape, s, 2 * flops);
  }

  // MLP elementwise, on the hidden activations (N, 4C) for GELU and (N, d_ff) for SwiGLU.
  {
    const size_t n = NC * 4;
    auto h = randn(n, 14), dout = randn(n, 15);
    std::vector<float> out(n), dx(n);
    Timing s = time_runs([&] { gelu_forward(out.data(), h.data(), n); });
    row_gbs("gelu_forward (N,4C)", shape, s, 2 * n * f4);
    if (C == 768) {
      s = time_runs([&] { gelu_forward_naive(out.data(), h.data(), n); }, 3);
      row_gbs("  gelu_forward_naive", shape, s, 2 * n * f4);
    }
    s = time_runs([&] { gelu_backward(dx.data(), dout.data(), h.data(), n); });
    row_gbs("gelu_backward (N,4C)", shape, s, 3 * n * f4);
    if (C == 768) {
      s = time_runs([&] { gelu_backward_naive(dx.data(), dout.data(), h.data(), n); }, 3);
      row_gbs("  gelu_backward_naive", shape, s, 3 * n * f4);
    }
    const int Hd = swiglu_hidden(C);
    const size_t nh = (size_t)N * Hd;
    auto gu = randn(2 * nh, 16), dy = randn(nh, 17);
    std::vector<float> a(nh), dgu(2 * nh);
    s = time_runs([&] { swiglu_forward(a.data(), gu.data(), N, Hd); });
    row_gbs("swiglu_forward (N,d_ff)", shape, s, 3 * nh * f4);
    s = time_runs([&] { swiglu_backward(dgu.data(), dy.data(), gu.data(), N, Hd); });
    row_gbs("swiglu_backward (N,d_ff)", shape, s, 5 * nh * f4);
  }

  // RoPE on the q and k parts of a packed qkv buffer, D_h = 64.
  {
    const int Dh = 64, H = C / Dh, stride = 3 * C;
    auto tab = make_rope_table<float>(T, Dh, 10000.0);
    auto qkv = randn((size_t)N * stride, 18);
    Timing s = time_runs([&] {
      rope_forward(qkv.data(), tab, B, T, H, Dh, stride, 0);
      rope_forward(qkv.data() + C, tab, B, T, H, Dh, stride, 0);
    });
    row_gbs("rope_forward (q and k)", shape, s, 2 * 2 * NC * f4);
    s = time_runs([&] {
      rope_backward(qkv.data(), tab, B, T, H, Dh, stride, 0);
      rope_backward(qkv.data() + C, tab, B, T, H, Dh, stride, 0);
    });
    row_gbs("rope_backward (q and k)", shape, s, 2 * 2 * NC * f4);
  }
}

void bench_optimizer() {
  // 12·L·d² + V·d parameters for L = 6, d = 768, V = 8192: the "larger" model size.
  const size_t n = (size_t)12 * 6 * 768 * 768 + (size_t)8192 * 768;
  char shape[32];
  std::snprintf(shape, sizeof shape, "n=%.1fM", n * 1e-6);
  auto p = randn(n, 19, 0.02), g = randn(n, 20, 1e-3);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  int t = 0;
  Timing s = time_runs([&] { adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t); });
  row_gbs("adamw_update", shape, s, 7.0 * n * 4);
  double sink = 0;
  s = time_runs([&] { sink += l2_norm_squared(g.data(), n); });
  row_gbs("l2_norm_squared", shape, s, 1.0 * n * 4);
  s = time_runs([&] { scale_inplace(g.data(), n, 1.0f); });
  row_gbs("scale_inplace", shape, s, 2.0 * n * 4);
  if (sink < 0) std::printf("impossible\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_reps = std::max(1, std::atoi(argv[1]));
  std::vector<int> widths = {256, 512, 768, 1024};
  if (argc > 3) g_cpu_time = std::string(argv[3]) == "cpu";
  if (argc > 2) {
    widths.clear();
    std::stringstream ss(argv[2]);
    for (std::string item; std::getline(ss, item, ',');) widths.push_back(std::atoi(item.c_str()));
  }
  std::printf("kernels_bench: B*T = 4096 rows, %d threads, %d runs, %s time (gemm: %s)\n\n", omp_get_max_threads(),
              g_reps, g_cpu_time ? "process CPU" : "wall", gemm_backend_name());
  std::printf("| %-28s | %-10s | %9s | %9s | %-15s | %-15s |\n|---|---|---|---|---|---|\n", "kernel", "shape",
              "median ms", "best ms", "median", "best");
  for (int C : widths) bench_width(C);
  bench_optimizer();
  return 0;
}
