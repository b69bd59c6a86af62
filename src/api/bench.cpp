// attnlab::api bench and info (include/attnlab/bench.h): timed training steps on synthetic tokens,
// a configuration's sizes counted without allocating, and the machine's figures.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>

#include "api/internal.h"
#include "attnlab/bench.h"
#include "core/denormals.h"
#include "core/error.h"
#include "core/json.h"
#include "core/gemm.h"
#include "core/peak.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "model/residual/dar.h"

namespace attnlab::api {
namespace {

// Process CPU seconds: with OMP_NUM_THREADS=1 on a busy shared machine, a steadier measure of a
// step's own work than wall time (which also measures the other processes).
double cpu_seconds() { return double(std::clock()) / CLOCKS_PER_SEC; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Mean and sample standard deviation (0 for a single value).
struct Spread {
  double mean = 0, sd = 0;
};
Spread spread(const std::vector<double>& v) {
  Spread r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= double(v.size());
  if (v.size() > 1) {
    for (double x : v) r.sd += (x - r.mean) * (x - r.mean);
    r.sd = std::sqrt(r.sd / double(v.size() - 1));
  }
  return r;
}

// One configuration being timed: model, Adam moments and synthetic tokens, all allocated up front.
struct BenchModel {
  std::string name;
  attnlab::Config cfg;
  GPT<float> model;
  Buffer m, v;
  std::vector<int32_t> in, tgt;
  std::vector<double> times;  // seconds per timed step
  std::vector<double> round_medians;  // median seconds per step of each round
  int step_count = 0;
  BenchModel(std::string n, const attnlab::Config& c) : name(std::move(n)), cfg(c), model(c) {
    const int B = cfg.train.batch_size, T = cfg.model.seq_len, V = cfg.model.vocab_size;
    model.init_weights(cfg.train.seed);
    model.plan(B, T);
    m = Buffer(model.registry().total() * sizeof(float));
    v = Buffer(model.registry().total() * sizeof(float));
    in.resize((size_t)B * T), tgt.resize((size_t)B * T);
    Rng rng(cfg.train.seed);
    for (size_t i = 0; i < in.size(); ++i) { in[i] = (int32_t)rng.below(V); tgt[i] = (int32_t)rng.below(V); }
  }
  size_t tokens() const { return (size_t)cfg.train.batch_size * cfg.model.seq_len * cfg.train.grad_accum; }
  void step(bool timed, bool cpu_time) {
    Timer t;
    const double c0 = cpu_seconds();
    model.zero_grad();
    for (int micro = 0; micro < cfg.train.grad_accum; ++micro)
      model.train_micro_step(in.data(), tgt.data(), 1.0f / float(tokens()));
    optimizer_step(model, m.as<float>(), v.as<float>(), cfg.train, 1e-4, ++step_count);
    if (timed) times.push_back(cpu_time ? cpu_seconds() - c0 : t.seconds());
  }
};

PeakFlops public_peak(const attnlab::PeakFlops& p) {
  PeakFlops r;
  r.gflops = p.gflops;
  r.threads = p.threads;
  r.source = p.source;
  r.isa = p.isa;
  return r;
}

}  // namespace

BenchParams default_bench_params() { return BenchParams{}; }

PeakFlops peak_flops(bool bf16) { return public_peak(attnlab::peak_flops(omp_threads(), bf16)); }

int threads() { return omp_threads(); }

KernelInfo kernel_info() {
  KernelInfo k;
  const auto& set = kernels::attention_kernels();
  k.attention_kernels = set.name;
  k.lanes = set.lanes;
  k.available = kernels::attention_kernel_sets();
  k.gemm_backend = gemm_backend_name(false);
  k.gemm_backend_bf16 = gemm_backend_name(true);
  return k;
}

ModelInfo model_info(const Config& config) {
  const attnlab::Config cfg = resolve(config);
  GPT<float> model(cfg);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  model.plan_count_only(B, T);  // the activation memory is counted, not allocated
  ModelInfo info;
  info.params = model.num_params();
  info.batch_size = B;
  info.seq_len = T;
  info.activation_bytes = model.activation_bytes();
  info.residual_kind = model.residual().kind();
  info.residual_activation_bytes = model.residual_activation_bytes();
  if (cfg.residual.kind == "dar") {
    // §6.5 accounting: ours (planned) against the estimate of docs/mechanisms.md §6.5, in floats per token.
    const DarOptions opt = dar_options(cfg);
    const int S = 2 * cfg.model.n_layer, C = cfg.model.d_model;
    const DarMemory ours = Dar<float>(opt, S, C).memory_per_token(true), est = dar_memory_estimate(opt, S, C);
    const double bytes = sizeof(float);
    info.dar = true;
    info.dar_histories = ours.histories * bytes;
    info.dar_histories_estimate = est.histories * bytes;
    info.dar_reads = ours.reads * bytes;
    info.dar_reads_estimate = est.reads * bytes;
    info.dar_inputs_outputs = ours.inputs_outputs * bytes;
    info.dar_backward = ours.backward * bytes;
  }
  info.training_flops_per_token = training_flops_per_token(model, T);
  return info;
}

BenchResult bench(const std::vector<BenchVariant>& variants, const BenchParams& params) {
  if (variants.empty()) fail("bench: no variants to time");
  if (params.steps < 1) fail("BenchParams::steps ", params.steps, ": must be positive");
  if (params.warmup < 0) fail("BenchParams::warmup ", params.warmup, ": must be >= 0");
  if (params.rounds < 1) fail("BenchParams::rounds ", params.rounds, ": must be positive");
  ScopedFlushDenormals flush;
  // Every variant is built and planned first; then rounds alternate between them (each round times
  // `steps` steps of every variant in turn), so slow drifts of a shared machine hit all alike and the
  // ratios come from one run.
  std::vector<std::unique_ptr<BenchModel>> runs;
  for (const BenchVariant& v : variants) runs.push_back(std::make_unique<BenchModel>(v.name, resolve(v.config)));
  for (auto& r : runs)
    for (int i = 0; i < params.warmup; ++i) r->step(false, params.cpu_time);
  const int rounds = params.rounds;
  for (int round = 0; round < rounds; ++round)
    for (auto& r : runs) {
      const size_t first = r->times.size();
      for (int i = 0; i < params.steps; ++i) r->step(true, params.cpu_time);
      r->round_medians.push_back(median(std::vector<double>(r->times.begin() + first, r->times.end())));
    }
  // Spreads over rounds (each round's median step); with one round, over the steps themselves.
  // A ratio is formed within each round (the variants ran back to back), then spread over rounds.
  auto samples = [&](const BenchModel& r) { return rounds > 1 ? r.round_medians : r.times; };
  const double base = median(runs[0]->times);
  BenchResult result;
  result.rounds = rounds;
  result.cpu_time = params.cpu_time;
  result.threads = omp_threads();
  result.peak = public_peak(attnlab::peak_flops(omp_threads()));
  for (auto& r : runs) {
    const double med = median(r->times);
    const double flops = training_flops_per_token(r->model, r->cfg.model.seq_len);
    const double tps = r->tokens() / med, gflops = tps * flops / 1e9;
    std::vector<double> ms, tok, ratio;
    const std::vector<double> mine = samples(*r), first = samples(*runs[0]);
    for (size_t i = 0; i < mine.size(); ++i) {
      ms.push_back(mine[i] * 1e3);
      tok.push_back(r->tokens() / mine[i]);
      if (rounds > 1) ratio.push_back(mine[i] / first[i]);
    }
    const Spread s_ms = spread(ms), s_tok = spread(tok), s_ratio = spread(ratio);
    const attnlab::PeakFlops my_peak = attnlab::peak_flops(omp_threads(), r->cfg.train.precision == "bf16");
    BenchVariantResult v;
    v.name = r->name;
    v.config = from_resolved(r->cfg, "bench variant " + r->name);
    v.precision = r->cfg.train.precision;
    v.tokens_per_step = r->tokens();
    v.step_seconds = r->times;
    v.round_median_seconds = r->round_medians;
    v.ms_per_step_median = med * 1e3;
    v.tokens_per_s = tps;
    v.ratio = med / base;
    v.flops_per_token = flops;
    v.gflops = gflops;
    v.ms_per_step_mean = s_ms.mean;
    v.ms_per_step_sd = s_ms.sd;
    v.tokens_per_s_mean = s_tok.mean;
    v.tokens_per_s_sd = s_tok.sd;
    v.ratio_mean = rounds > 1 ? s_ratio.mean : med / base;
    v.ratio_sd = s_ratio.sd;
    v.mfu_percent = s_tok.mean * flops / (my_peak.gflops * 1e9) * 100.0;
    v.peak = public_peak(my_peak);
    v.params = r->model.num_params();
    v.activation_bytes = r->model.activation_bytes();
    v.residual_activation_bytes = r->model.residual_activation_bytes();
    result.variants.push_back(std::move(v));
  }
  return result;
}

std::string bench_result_json(const BenchResult& result) {
  const KernelInfo kernels = kernel_info();
  nlohmann::json out = nlohmann::json::array();
  for (const BenchVariantResult& r : result.variants)
    out.push_back({{"name", r.name}, {"tokens_per_s", r.tokens_per_s}, {"ms_per_step_median", r.ms_per_step_median},
                   {"ratio", r.ratio}, {"gflops", r.gflops}, {"flops_per_token", r.flops_per_token}, {"steps", r.step_seconds.size()},
                   {"rounds", result.rounds}, {"ms_per_step_mean", r.ms_per_step_mean}, {"ms_per_step_sd", r.ms_per_step_sd},
                   {"tokens_per_s_mean", r.tokens_per_s_mean}, {"tokens_per_s_sd", r.tokens_per_s_sd},
                   {"ratio_mean", r.ratio_mean}, {"ratio_sd", r.ratio_sd},
                   // (each round's median step, in seconds, whatever the key's name says)
                   {"round_ms_per_step", r.round_median_seconds}, {"mfu_percent", r.mfu_percent}, {"peak_gflops", r.peak.gflops},
                   {"peak_source", r.peak.source}, {"peak_isa", r.peak.isa}, {"precision", r.precision}, {"cpu_time", result.cpu_time},
                   {"threads", result.threads}, {"attention_kernels", kernels.attention_kernels}, {"params", r.params},
                   {"activation_bytes", r.activation_bytes},
                   {"residual_activation_bytes", r.residual_activation_bytes},
                   {"config", nlohmann::json::parse(r.config.to_json_string())}});
  return (out.size() == 1 ? out[0] : out).dump();
}

}  // namespace attnlab::api
