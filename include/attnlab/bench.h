// attnlab public API: speed and size of configurations on this machine — timed training steps
// (`attnlab bench`), sizes, memory and FLOPs (`attnlab info`), and the machine's own figures (its
// measured peak, the attention kernel set and GEMM library in use). docs/performance.md has the method.
//
//   std::vector<api::BenchVariant> v = {{"std", api::Config::preset("bench")},
//                                       {"xsa", api::Config::preset("bench").set("attn.xsa", "on")}};
//   api::BenchParams p = api::default_bench_params();
//   p.rounds = 3;                                   // alternate the variants: ratios from one run
//   for (const auto& r : api::bench(v, p).variants) std::printf("%s %.3f\n", r.name.c_str(), r.ratio_mean);
//
// Thread-safety: bench() measures the whole machine: run one at a time, with nothing else busy.
// The other functions may run concurrently.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/error.h"

namespace attnlab::api {

// The machine's FMA throughput, the denominator of MFU (measured once per process, about 0.1 s).
struct PeakFlops {
  double gflops = 0;      // over `threads` threads (an FMA counts 2 FLOPs)
  int threads = 0;
  std::string source;     // "measured", or "ATTNLAB_PEAK_GFLOPS" / "ATTNLAB_PEAK_GFLOPS_BF16" when given
  std::string isa;        // the widest vector FMA this CPU runs
};
// bf16: the peak of the bf16 products (train.precision = bf16) instead of fp32.
PeakFlops peak_flops(bool bf16 = false);

// The attention kernel set chosen at run time (ATTNLAB_KERNELS=<set> forces one) and the GEMM library.
struct KernelInfo {
  std::string attention_kernels;                 // e.g. "avx2"
  int lanes = 0;                                 // its float lanes per vector
  std::vector<std::string> available;            // the sets this CPU runs, widest first
  std::string gemm_backend, gemm_backend_bf16;   // the GEMM library for fp32 and for bf16 products
};
KernelInfo kernel_info();
int threads();  // the threads the library computes with (OMP_NUM_THREADS, or every core)

// Sizes of a configuration, counted without allocating its activations (`attnlab info`).
struct ModelInfo {
  size_t params = 0;
  int batch_size = 0, seq_len = 0;               // the (B, T) the activations are counted for
  size_t activation_bytes = 0;                   // training activations at (B, T)
  std::string residual_kind;                     // the residual kind's name
  size_t residual_activation_bytes = 0;          // its share: states, histories or streams, and gradients
  double training_flops_per_token = 0;           // 6·N_matmul + 6·L·d·(T+1) (the causal half of attention)
  // residual.kind = dar: docs/mechanisms.md §6.5's accounting, bytes per token, planned against its estimate.
  bool dar = false;
  double dar_histories = 0, dar_histories_estimate = 0, dar_reads = 0, dar_reads_estimate = 0;
  double dar_inputs_outputs = 0, dar_backward = 0;
};
ModelInfo model_info(const Config& config);

struct BenchParams {
  int steps = 20;         // timed steps per variant and round
  int warmup = 3;         // untimed steps per variant first
  int rounds = 1;         // rounds; each times `steps` steps of every variant in turn
  bool cpu_time = false;  // process CPU seconds instead of wall seconds (steadier with 1 thread on a busy machine)
};
BenchParams default_bench_params();

struct BenchVariant {
  std::string name;
  Config config;          // the model, train.batch_size, train.grad_accum, train.precision and train.seed
};

// One variant's timings. Spreads (mean ± sd) are over the rounds' median steps when rounds > 1,
// else over the steps; ratios are to the first variant, formed within each round.
struct BenchVariantResult {
  std::string name;
  Config config;                        // as resolved
  std::string precision;                // train.precision
  size_t tokens_per_step = 0;           // B·T·grad_accum
  std::vector<double> step_seconds;     // every timed step, in order
  std::vector<double> round_median_seconds;  // each round's median step, in seconds
  double ms_per_step_median = 0, tokens_per_s = 0;  // of all timed steps (the median step)
  double ratio = 0;                     // median step / the first variant's
  double flops_per_token = 0, gflops = 0;
  double ms_per_step_mean = 0, ms_per_step_sd = 0, tokens_per_s_mean = 0, tokens_per_s_sd = 0;
  double ratio_mean = 0, ratio_sd = 0;  // rounds == 1: ratio and 0
  double mfu_percent = 0;               // tokens_per_s_mean · flops_per_token against peak
  PeakFlops peak;                       // fp32, or bf16 for train.precision = bf16
  size_t params = 0, activation_bytes = 0, residual_activation_bytes = 0;
};

struct BenchResult {
  int rounds = 0, threads = 0;
  bool cpu_time = false;                // BenchParams::cpu_time
  PeakFlops peak;                       // fp32
  std::vector<BenchVariantResult> variants;  // in the order given
};

// Builds and plans every variant first (model, Adam moments, synthetic tokens from train.seed),
// runs `warmup` untimed steps of each, then `rounds` rounds timing `steps` full training steps
// (forward, backward, AdamW) of every variant in turn, so that a shared machine's slow drifts hit
// all alike.
BenchResult bench(const std::vector<BenchVariant>& variants, const BenchParams& params = default_bench_params());

// The result as `attnlab bench --json` prints it: one JSON object per variant (every field above,
// the kernels in use and the resolved config), one object when there is one variant, else an array.
std::string bench_result_json(const BenchResult& result);

}  // namespace attnlab::api
