// Benchmark of the fused, chunked LM head + cross-entropy (src/kernels/cross_entropy.h, docs/mechanisms.md §1.1)
// over chunk sizes, with a breakdown into its four phases and two GEMM-only references:
//   fused       lm_head_ce_forward_backward (what training calls)
//   gemm3       the same three chunked GEMMs with the softmax skipped (the ceiling at that chunk size)
//   phases      logits GEMM | softmax+CE | dx GEMM | dwte GEMM, timed separately
//   full gemm   one unchunked (N,V,C) logits GEMM: what the GEMM reaches on this shape
// FLOPs of the fused op = 3 GEMMs = 6·N·C·V. Median (and mean ± sd) of --reps runs after a warm-up
// (buffers are touched first: docs/performance.md pitfall 2). Output is a markdown table.
//
// Usage: cross_entropy_bench [--reps 5] [--chunks 64,128,256,512,1024,2048,4096]
//                            [--shapes 4096x256x8192,4096x768x8192] [--clock wall|cpu]
//                            [--strided-copies auto|on|off]
// --strided-copies forces gemm's padded copies of operands whose rows lie a multiple of 4 KiB apart
// (core/gemm.h; here dlogits in the dwte product at V = 8192, C <= 256); auto is what training does.
// --clock cpu times with the process CPU clock instead of wall time: on a machine shared with other
// jobs, run it with OMP_NUM_THREADS=1 to compare chunk sizes by the work they cost, free of
// time-slicing (with 2 threads it would also count OpenMP's spin-waiting).
//
// Measured while choosing lm_head_default_chunk_rows (the 2-core machine was shared with other builds
// at load 5–10 throughout, so absolute 2-thread numbers were 5x below docs/performance.md; ratios to the
// unchunked GEMM measured in the same run are what carry over):
//   OMP_NUM_THREADS=1 --clock cpu, best of 5, GFLOP/s of the fused op (6·N·C·V) for chunk 128/256/512/1024/2048,
//   against one unchunked (N,V,C) logits GEMM in the same run:
//     C=256: 99 / 114 / 118 / 115 / 100   vs GEMM  98  (run 2: 119 / 117 / 121 / 121 / 126 vs 128)
//     C=768: 105 / 118 / 120 / 123 / 114  vs GEMM 124  (run 2: 117 / 133 / 131 / 139 / 141 vs 144)
//   softmax+CE phase: 21–29 ms of CPU per call for N·V = 33.5M logits (~0.65 ns/logit), 5% of the
//   C=256 op and 2% of the C=768 op.
//   2 threads, wall, best of 7, chunk 512/1024/2048: C=256: 44 / 53 / 65 vs GEMM 64;
//     C=768: 60 / 67 / 81 vs GEMM 68 GFLOP/s (contended; the fused op tracks the GEMM).
//   One earlier 2-thread run at load ~2: chunk 512 → 203, 1024 → 263 GFLOP/s at C=256.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <omp.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"

using namespace attnlab;
using namespace attnlab::kernels;

namespace {

bool g_cpu_clock = false;

// Seconds on the chosen clock (wall, or CPU time of the whole process).
struct Clock {
  double t0 = now();
  static double now() {
    if (g_cpu_clock) {
      timespec ts;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec + 1e-9 * ts.tv_nsec;
    }
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  double seconds() const { return now() - t0; }
  void reset() { t0 = now(); }
};

struct Stats {
  double median, mean, sd, best;
};

Stats time_it(int reps, const std::function<void()>& fn) {
  fn();  // warm-up: first touch, oneDNN primitive creation
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    Clock timer;
    fn();
    t.push_back(timer.seconds());
  }
  std::vector<double> s = t;
  std::sort(s.begin(), s.end());
  double mean = 0, var = 0;
  for (double v : t) mean += v;
  mean /= reps;
  for (double v : t) var += (v - mean) * (v - mean);
  const double median = reps % 2 ? s[reps / 2] : 0.5 * (s[reps / 2 - 1] + s[reps / 2]);
  return {median, mean, reps > 1 ? std::sqrt(var / (reps - 1)) : 0.0, s.front()};
}

std::vector<int> parse_ints(const std::string& s, char sep) {
  std::vector<int> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find(sep, p);
    if (q == std::string::npos) q = s.size();
    const std::string tok = s.substr(p, q - p);
    char* end = nullptr;
    const long v = std::strtol(tok.c_str(), &end, 10);
    if (tok.empty() || *end != '\0' || v <= 0) fail("cross_entropy_bench: '", tok, "' in '", s, "' is not a positive integer");
    out.push_back((int)v);
    p = q + 1;
  }
  return out;
}

void fill_normal(float* p, size_t n, uint64_t seed, double scale) {
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) p[i] = float(rng.normal() * scale);
}

void run_shape(int N, int C, int V, const std::vector<int>& chunks, int reps) {
  const int max_chunk = *std::max_element(chunks.begin(), chunks.end());
  Buffer xb((size_t)N * C * 4), wteb((size_t)V * C * 4), dxb((size_t)N * C * 4), dwteb((size_t)V * C * 4);
  Buffer tb((size_t)N * 4), sb(lm_head_scratch_size(std::min(max_chunk, N), V) * 4), fullb((size_t)N * V * 4);
  float *x = xb.as<float>(), *wte = wteb.as<float>(), *dx = dxb.as<float>(), *dwte = dwteb.as<float>();
  float *scratch = sb.as<float>(), *full = fullb.as<float>();
  int32_t* targets = tb.as<int32_t>();
  // x like a normalized hidden state, wte like GPT-2's N(0, 0.02) init scaled up so the softmax is
  // not flat; 1 row in 10 ignored (padding-like).
  fill_normal(x, (size_t)N * C, 1, 1.0);
  fill_normal(wte, (size_t)V * C, 2, 0.1);
  Rng rng(3);
  for (int i = 0; i < N; ++i) targets[i] = i % 10 == 9 ? -1 : (int32_t)rng.below(V);
  const float scale = 1.0f / lm_head_count_targets(targets, N);
  const double gflop = 6.0 * N * C * V * 1e-9;

  const Stats full_gemm = time_it(reps, [&] { gemm(false, true, N, V, C, 1.0f, x, C, wte, C, 0.0f, full, V); });
  std::printf("\n### N=%d C=%d V=%d (%.1f GFLOP per call, %d threads, %s clock)\n\n", N, C, V, gflop,
              omp_get_max_threads(), g_cpu_clock ? "process CPU" : "wall");
  std::printf("one unchunked logits GEMM (%d,%d,%d): median %.1f ms = %.0f GFLOP/s, best %.1f ms = %.0f GFLOP/s\n\n",
              N, V, C, full_gemm.median * 1e3, gflop / 3 / full_gemm.median, full_gemm.best * 1e3,
              gflop / 3 / full_gemm.best);
  std::printf("| chunk_rows | scratch MB | fused ms median | mean ± sd | best | GFLOP/s median | GFLOP/s best |"
              " gemm3 GFLOP/s best | logits ms | softmax ms | dx ms | dwte ms |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int chunk : chunks) {
    if (chunk > N) continue;
    const Stats fused = time_it(reps, [&] {
      lm_head_ce_forward_backward(dx, dwte, (float*)nullptr, x, wte, targets, N, C, V, scale, scratch, chunk);
    });
    // Phase by phase, accumulated over the chunks of one call; the gemm3 total is their GEMM sum.
    double t_logits = 1e30, t_soft = 1e30, t_dx = 1e30, t_dwte = 1e30;
    for (int r = 0; r < std::max(2, reps / 2); ++r) {
      double a = 0, b = 0, c = 0, d = 0;
      for (int r0 = 0; r0 < N; r0 += chunk) {
        const int n = std::min(chunk, N - r0);
        Clock t;
        gemm(false, true, n, V, C, 1.0f, x + (size_t)r0 * C, C, wte, C, 0.0f, scratch, V);
        a += t.seconds();
        t.reset();
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; ++i) softmax_ce_row_forward_backward(scratch + (size_t)i * V, V, targets[r0 + i], scale);
        b += t.seconds();
        t.reset();
        gemm(false, false, n, C, V, 1.0f, scratch, V, wte, C, 0.0f, dx + (size_t)r0 * C, C);
        c += t.seconds();
        t.reset();
        gemm(true, false, V, C, n, 1.0f, scratch, V, x + (size_t)r0 * C, C, 1.0f, dwte, C);
        d += t.seconds();
      }
      t_logits = std::min(t_logits, a);
      t_soft = std::min(t_soft, b);
      t_dx = std::min(t_dx, c);
      t_dwte = std::min(t_dwte, d);
    }
    std::printf("| %d | %.1f | %.1f | %.1f ± %.1f | %.1f | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f |\n", chunk,
                lm_head_scratch_size(chunk, V) * 4.0 / (1 << 20), fused.median * 1e3, fused.mean * 1e3, fused.sd * 1e3,
                fused.best * 1e3, gflop / fused.median, gflop / fused.best, gflop / (t_logits + t_dx + t_dwte),
                t_logits * 1e3, t_soft * 1e3, t_dx * 1e3, t_dwte * 1e3);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int reps = 5;
    std::vector<int> chunks = {64, 128, 256, 512, 1024, 2048, 4096};
    std::vector<std::vector<int>> shapes = {{4096, 256, 8192}, {4096, 768, 8192}};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) fail("cross_entropy_bench: option ", a, " needs a value (see the usage in the source header)");
      const std::string v = argv[++i];
      if (a == "--reps") reps = parse_ints(v, ',').at(0);
      else if (a == "--chunks") chunks = parse_ints(v, ',');
      else if (a == "--strided-copies") {
        if (v != "auto" && v != "on" && v != "off")
          fail("cross_entropy_bench: --strided-copies must be auto, on or off, not '", v, "'");
        set_gemm_strided_copies(v == "auto" ? GemmStridedCopies::automatic
                                : v == "on" ? GemmStridedCopies::always
                                            : GemmStridedCopies::never);
      } else if (a == "--clock") {
        if (v != "wall" && v != "cpu") fail("cross_entropy_bench: --clock must be wall or cpu, not '", v, "'");
        g_cpu_clock = v == "cpu";
      }
      else if (a == "--shapes") {
        shapes.clear();
        for (size_t p = 0; p <= v.size();) {
          size_t q = v.find(',', p);
          if (q == std::string::npos) q = v.size();
          auto dims = parse_ints(v.substr(p, q - p), 'x');
          if (dims.size() != 3) fail("cross_entropy_bench: shape '", v.substr(p, q - p), "' must be NxCxV");
          shapes.push_back(dims);
          p = q + 1;
        }
      } else fail("cross_entropy_bench: unknown option ", a,
                  "; options are --reps, --chunks, --shapes, --clock, --strided-copies");
    }
    std::printf("# fused LM head + cross-entropy (gemm: %s; strided copies %s)\n", gemm_backend_name(),
                gemm_strided_copies_active() ? "on" : "off");
    // Two-thread timings swing with whatever else runs on the 2 cores (docs/performance.md pitfall 4): print
    // the load so a reader can judge, and report the best run next to the median.
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
      char line[128] = {0};
      if (std::fgets(line, sizeof line, f)) std::printf("load average at start: %s", line);
      std::fclose(f);
    }
    for (const auto& s : shapes) run_shape(s[0], s[1], s[2], chunks, reps);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
