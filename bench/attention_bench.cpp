// Timing of the fused causal attention kernel (src/kernels/attention.h), docs/mechanisms.md §1.1.
// For each shape: forward and backward (with and without the learned sink) and an unfused baseline
// (scores materialized per head with the project's oneDNN GEMM, the way a plain implementation
// would do it): median and best wall time of `reps` runs after warm-up, with 2 OpenMP threads
// unless OMP_NUM_THREADS says otherwise, and GFLOP/s per busy core from the CPU time.
//
// FLOP counts (causal, matching PyTorch's accounting of SDPA): forward 4·B·H·Dh·T²/2 (QKᵀ and PV);
// backward 2.5× the forward (QKᵀ recomputed, dP = dO·Vᵀ, dV, dK, dQ). The fp32 FMA peak depends on
// the machine (`attnlab info` measures it; docs/performance.md).
// Every shape also times "bwd scratch, N ch": the backward with the model's scratch (N query chunks
// per pair, each task's query rows in a pack), alternating with the backward without scratch.
//
//   OMP_WAIT_POLICY=passive build/<dir>/attention_bench [--reps N] [--shape B,T,H,Hkv,Dh]... [--no-baseline]
// Default shapes: the model's typical B=16 T=256 H=4 Dh=64, GQA, and T=1024 at Dh = 32, 64, 128.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/gemm.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/attention.h"

using namespace attnlab;
using namespace attnlab::kernels;

namespace {

struct Shape {
  int B, T, H, Hkv, Dh;
};

std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.normal() * scale);
  return v;
}

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Median and best wall seconds of `reps` runs after two warm-up runs, and the least CPU time (all
// threads) of a run. The machine is shared (docs/performance.md pitfall 4): the best run estimates the
// kernel's own speed, and FLOPs per CPU-second (per busy core) stay meaningful even when other
// processes hold the cores, as long as OMP_WAIT_POLICY=passive keeps idle threads from spinning.
struct Timing {
  double median, best, cpu;
};

Timing time_runs(const std::function<void()>& f, int reps) {
  f();
  f();
  std::vector<double> t(reps);
  double cpu = 1e30;
  for (auto& s : t) {
    const double c0 = cpu_seconds();
    Timer timer;
    f();
    s = timer.seconds();
    cpu = std::min(cpu, cpu_seconds() - c0);
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0], cpu};
}

// Two kernels timed alternately (f, g, f, g, ...), so that a shared machine's drifts hit both alike:
// the A/B of the backward with and without its query-chunk split.
std::pair<Timing, Timing> time_alternating(const std::function<void()>& f, const std::function<void()>& g, int reps) {
  f();
  g();
  std::vector<double> t[2];
  double cpu[2] = {1e30, 1e30};
  for (int r = 0; r < reps; ++r)
    for (int which = 0; which < 2; ++which) {
      const double c0 = cpu_seconds();
      Timer timer;
      (which == 0 ? f : g)();
      t[which].push_back(timer.seconds());
      cpu[which] = std::min(cpu[which], cpu_seconds() - c0);
    }
  Timing out[2];
  for (int which = 0; which < 2; ++which) {
    std::sort(t[which].begin(), t[which].end());
    out[which] = {t[which][t[which].size() / 2], t[which][0], cpu[which]};
  }
  return {out[0], out[1]};
}

// The unfused forward: per (b, h), S = scale·Q·Kᵀ (full T×T through gemm), causal softmax, O = P·V.
// It computes twice the causal FLOPs in its GEMMs and stores B·H·T² scores; it is credited with the
// same causal FLOP count, so its GFLOP/s is directly comparable.
void unfused_forward(float* out, float* scores, const float* qkv, const Shape& sh) {
  const int stride = (sh.H + 2 * sh.Hkv) * sh.Dh, G = sh.H / sh.Hkv, T = sh.T;
  const float scale = 1.f / std::sqrt(float(sh.Dh));
  for (int b = 0; b < sh.B; ++b)
    for (int h = 0; h < sh.H; ++h) {
      const float* q = qkv + size_t(b) * T * stride + h * sh.Dh;
      const float* k = qkv + size_t(b) * T * stride + (sh.H + h / G) * sh.Dh;
      const float* v = k + sh.Hkv * sh.Dh;
      float* S = scores + (size_t(b) * sh.H + h) * T * T;
      gemm(false, true, T, T, sh.Dh, scale, q, stride, k, stride, 0.f, S, T);
#pragma omp parallel for schedule(static)
      for (int i = 0; i < T; ++i) {
        float* row = S + size_t(i) * T;
        float m = -INFINITY, z = 0;
        for (int j = 0; j <= i; ++j) m = std::max(m, row[j]);
        for (int j = 0; j <= i; ++j) z += (row[j] = std::exp(row[j] - m));
        for (int j = 0; j <= i; ++j) row[j] /= z;
        for (int j = i + 1; j < T; ++j) row[j] = 0;
      }
      gemm(false, false, T, sh.Dh, T, 1.f, S, T, v, stride, 0.f, out + size_t(b) * T * sh.H * sh.Dh + h * sh.Dh,
           sh.H * sh.Dh);
    }
}

void bench_shape(const Shape& sh, int reps, bool baseline) {
  const AttentionShape s = packed_attention_shape(sh.B, sh.T, sh.H, sh.Hkv, sh.Dh);
  const size_t n_qkv = size_t(sh.B) * sh.T * s.q_stride, n_out = size_t(sh.B) * sh.T * sh.H * sh.Dh;
  const auto qkv = randn(n_qkv, 1), dout = randn(n_out, 2), sink = randn(sh.H, 3);
  std::vector<float> out(n_out), lse(size_t(sh.B) * sh.H * sh.T), dqkv(n_qkv), dsink(sh.H);
  const float scale = 1.f / std::sqrt(float(sh.Dh));
  const float* q = qkv.data();
  const float* k = q + sh.H * sh.Dh;
  const float* v = k + sh.Hkv * sh.Dh;
  const double flops_fwd = 4.0 * sh.B * sh.H * sh.Dh * double(sh.T) * sh.T / 2, flops_bwd = 2.5 * flops_fwd;
  auto fwd = [&] { attention_forward(out.data(), lse.data(), q, k, v, (const float*)nullptr, scale, s); };
  auto bwd = [&] {
    attention_backward(dqkv.data(), dqkv.data() + sh.H * sh.Dh, dqkv.data() + (sh.H + sh.Hkv) * sh.Dh,
                       (float*)nullptr, dout.data(), out.data(), lse.data(), q, k, v, (const float*)nullptr, scale, s);
  };
  auto fwd_sink = [&] { attention_forward(out.data(), lse.data(), q, k, v, sink.data(), scale, s); };
  auto bwd_sink = [&] {
    attention_backward(dqkv.data(), dqkv.data() + sh.H * sh.Dh, dqkv.data() + (sh.H + sh.Hkv) * sh.Dh, dsink.data(),
                       dout.data(), out.data(), lse.data(), q, k, v, sink.data(), scale, s);
  };
  // The model gives the backward a scratch: with few (b, kv head) pairs it splits over query chunks,
  // and each task keeps its query rows contiguous in a pack (attention_backward); timed against the
  // backward without scratch (one task per pair, rows copied per key tile), alternately.
  std::vector<float> scratch(attention_backward_scratch_size<float>(s));
  auto bwd_split = [&] {
    attention_backward(dqkv.data(), dqkv.data() + sh.H * sh.Dh, dqkv.data() + (sh.H + sh.Hkv) * sh.Dh,
                       (float*)nullptr, dout.data(), out.data(), lse.data(), q, k, v, (const float*)nullptr, scale, s, {},
                       scratch.data(), scratch.size());
  };
  char name[96];
  std::snprintf(name, sizeof name, "B=%d T=%d H=%d Hkv=%d Dh=%d", sh.B, sh.T, sh.H, sh.Hkv, sh.Dh);
  auto row = [&](const char* what, const Timing& t, double flops) {
    std::printf("| %-32s | %-16s | %9.3f | %9.3f | %8.1f | %9.1f | %9.1f |\n", name, what, t.median * 1e3,
                t.best * 1e3, flops / t.median * 1e-9, flops / t.best * 1e-9, flops / t.cpu * 1e-9);
    std::fflush(stdout);
  };
  row("forward", time_runs(fwd, reps), flops_fwd);
  if (scratch.empty()) {
    row("backward", time_runs(bwd, reps), flops_bwd);
  } else {
    const auto [whole, split] = time_alternating(bwd, bwd_split, reps);
    row("backward", whole, flops_bwd);
    char what[32];
    std::snprintf(what, sizeof what, "bwd scratch, %d ch", kernels::attention_query_chunks(s, kernels::attention_kernels().tile));
    row(what, split, flops_bwd);
  }
  row("forward+sink", time_runs(fwd_sink, reps), flops_fwd);
  row("backward+sink", time_runs(bwd_sink, reps), flops_bwd);
  if (baseline) {
    std::vector<float> scores(size_t(sh.B) * sh.H * sh.T * sh.T), out2(n_out);
    row("unfused (gemm)", time_runs([&] { unfused_forward(out2.data(), scores.data(), q, sh); }, reps), flops_fwd);
    double diff = 0;  // the baseline doubles as a sanity check of the fused output
    fwd();
    for (size_t i = 0; i < n_out; ++i) diff = std::max(diff, double(std::abs(out[i] - out2[i])));
    if (diff > 1e-4) std::printf("  WARNING: fused and unfused outputs differ by %.3g\n", diff);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool baseline = true;
  std::vector<Shape> shapes;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--reps" && a + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++a]));
    } else if (arg == "--shape" && a + 1 < argc) {
      Shape sh{};
      if (std::sscanf(argv[++a], "%d,%d,%d,%d,%d", &sh.B, &sh.T, &sh.H, &sh.Hkv, &sh.Dh) != 5) {
        std::fprintf(stderr, "attention_bench: --shape wants B,T,H,Hkv,Dh (got '%s')\n", argv[a]);
        return 1;
      }
      shapes.push_back(sh);
    } else if (arg == "--no-baseline") {
      baseline = false;
    } else {
      std::fprintf(stderr, "usage: attention_bench [--reps N] [--shape B,T,H,Hkv,Dh]... [--no-baseline]\n");
      return 1;
    }
  }
  if (shapes.empty())
    shapes = {{16, 256, 4, 4, 64}, {16, 256, 4, 2, 64}, {8, 512, 6, 6, 64},
              {4, 1024, 8, 8, 32}, {4, 1024, 4, 4, 64}, {4, 1024, 2, 2, 128}};
  std::printf("attention_bench: %d threads, %d reps (median and best ms; GFLOP/s of the causal FLOPs)\n\n",
              omp_get_max_threads(), reps);
  std::printf("| %-32s | %-16s | %9s | %9s | %8s | %9s | %9s |\n", "shape", "kernel", "median ms", "best ms",
              "GF/s med", "GF/s best", "GF/s/core");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(34, '-').c_str(), std::string(18, '-').c_str(),
              std::string(11, '-').c_str(), std::string(11, '-').c_str(), std::string(10, '-').c_str(),
              std::string(11, '-').c_str(), std::string(11, '-').c_str());
  try {
    for (const Shape& sh : shapes) bench_shape(sh, reps, baseline);
  } catch (const Error& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
