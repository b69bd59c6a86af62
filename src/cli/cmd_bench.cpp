// `attnlab bench` (training-step timing on synthetic tokens) and `attnlab info` (sizes and memory).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/peak.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "model/residual/dar.h"
#include "train/trainer.h"

namespace attnlab::cli {
namespace {

struct BenchArgs {
  ConfigArgs config;
  int steps = 20, warmup = 3, rounds = 3;
  bool rounds_given = false;  // --rounds on the command line (a single configuration then runs that many too)
  bool json = false;
  std::vector<std::string> variants;  // "name:key=value;key=value" (empty after the colon: the base config)
  bool cpu_time = false;              // time process CPU seconds instead of wall seconds
};

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
  Config cfg;
  GPT<float> model;
  Buffer m, v;
  std::vector<int32_t> in, tgt;
  std::vector<double> times;  // seconds per timed step
  std::vector<double> round_medians;  // median seconds per step of each round
  int step_count = 0;
  BenchModel(std::string n, const Config& c) : name(std::move(n)), cfg(c), model(c) {
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

// "name:key=value;key=value" → the base assignments plus these overrides.
Config variant_config(const BenchArgs& a, const std::string& spec, std::string& name) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0)
    fail("--variant ", spec, ": expected NAME:key=value;key=value (e.g. xsa:attn.xsa=on), or NAME: for the base configuration");
  name = spec.substr(0, colon);
  ConfigArgs args = a.config;
  std::string rest = spec.substr(colon + 1);
  size_t start = 0;
  while (start < rest.size()) {
    const size_t semi = rest.find(';', start);
    const std::string item = rest.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
    if (!item.empty()) args.sets.push_back(item);
    if (semi == std::string::npos) break;
    start = semi + 1;
  }
  try {
    return args.resolve();
  } catch (const Error& e) {
    fail("--variant ", spec, ": ", e.what());
  }
}

void run_bench(const BenchArgs& a) {
  // Every variant is built and planned first; then rounds alternate between them (each round times
  // `steps` steps of every variant in turn), so slow drifts of a shared machine hit all alike and the
  // ratios come from one run.
  std::vector<std::unique_ptr<BenchModel>> runs;
  if (a.variants.empty()) {
    runs.push_back(std::make_unique<BenchModel>("base", a.config.resolve()));
  } else {
    for (const auto& spec : a.variants) {
      std::string name;
      const Config cfg = variant_config(a, spec, name);
      runs.push_back(std::make_unique<BenchModel>(name, cfg));
    }
  }
  for (auto& r : runs)
    for (int i = 0; i < a.warmup; ++i) r->step(false, a.cpu_time);
  const int rounds = a.variants.empty() && !a.rounds_given ? 1 : a.rounds;
  for (int round = 0; round < rounds; ++round)
    for (auto& r : runs) {
      const size_t first = r->times.size();
      for (int i = 0; i < a.steps; ++i) r->step(true, a.cpu_time);
      r->round_medians.push_back(median(std::vector<double>(r->times.begin() + first, r->times.end())));
    }
  // Spreads over rounds (each round's median step); with one round, over the steps themselves.
  // A ratio is formed within each round (the variants ran back to back), then spread over rounds.
  auto samples = [&](const BenchModel& r) { return rounds > 1 ? r.round_medians : r.times; };
  const double base = median(runs[0]->times);
  const PeakFlops peak = peak_flops(omp_threads());
  nlohmann::json out = nlohmann::json::array();
  if (!a.json) {
    const Config& c = runs[0]->cfg;
    std::printf("attnlab bench: L=%d d=%d H=%d T=%d B=%d V=%d, %d threads, %s, attention kernels %s\n", c.model.n_layer,
                c.model.d_model, c.model.n_head, c.model.seq_len, c.train.batch_size, c.model.vocab_size, omp_threads(),
                gemm_backend_name(c.train.precision == "bf16"), kernels::attention_kernels().name);
    std::printf("%d round%s x %d steps per variant%s, %s time; mean ± sd over %s; MFU against %.0f GFLOP/s (%s %s peak)\n",
                rounds, rounds > 1 ? "s" : "", a.steps, runs.size() > 1 ? ", alternating" : "",
                a.cpu_time ? "process CPU" : "wall", rounds > 1 ? "the rounds' median steps" : "the steps", peak.gflops,
                peak.source, peak.isa);
    for (auto& r : runs)
      if (r->cfg.train.precision == "bf16") {
        const PeakFlops p16 = peak_flops(omp_threads(), true);
        std::printf("bf16 variants: MFU against %.0f GFLOP/s (%s %s peak)\n", p16.gflops, p16.source, p16.isa);
        break;
      }
    std::printf("%-16s %19s %21s %8s %6s %9s %15s\n", "variant", "ms/step", "tokens/s", "GFLOP/s", "MFU",
                "act. MB", runs.size() > 1 ? "ratio (time)" : "");
  }
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
    const PeakFlops my_peak = peak_flops(omp_threads(), r->cfg.train.precision == "bf16");
    const double mfu = s_tok.mean * flops / (my_peak.gflops * 1e9) * 100.0;
    if (a.json) {
      out.push_back({{"name", r->name}, {"tokens_per_s", tps}, {"ms_per_step_median", med * 1e3},
                     {"ratio", med / base}, {"gflops", gflops}, {"flops_per_token", flops}, {"steps", r->times.size()},
                     {"rounds", rounds}, {"ms_per_step_mean", s_ms.mean}, {"ms_per_step_sd", s_ms.sd},
                     {"tokens_per_s_mean", s_tok.mean}, {"tokens_per_s_sd", s_tok.sd},
                     {"ratio_mean", rounds > 1 ? s_ratio.mean : med / base}, {"ratio_sd", s_ratio.sd},
                     {"round_ms_per_step", r->round_medians}, {"mfu_percent", mfu}, {"peak_gflops", my_peak.gflops},
                     {"peak_source", my_peak.source}, {"peak_isa", my_peak.isa}, {"precision", r->cfg.train.precision}, {"cpu_time", a.cpu_time},
                     {"threads", omp_threads()}, {"attention_kernels", kernels::attention_kernels().name}, {"params", r->model.num_params()},
                     {"activation_bytes", r->model.activation_bytes()},
                     {"residual_activation_bytes", r->model.residual_activation_bytes()}, {"config", r->cfg.to_json()}});
    } else {
      char ratio_text[64] = "";
      if (runs.size() > 1 && rounds > 1) std::snprintf(ratio_text, sizeof ratio_text, "%.3f ± %.3f", s_ratio.mean, s_ratio.sd);
      else if (runs.size() > 1) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", med / base);
      std::printf("%-16s %9.1f ± %7.1f %10.0f ± %8.0f %8.1f %5.1f%% %9.2f %15s\n", r->name.c_str(), s_ms.mean, s_ms.sd,
                  s_tok.mean, s_tok.sd, s_tok.mean * flops / 1e9, mfu, r->model.activation_bytes() / 1e6, ratio_text);
    }
  }
  if (a.json) std::printf("%s\n", (runs.size() == 1 ? out[0] : out).dump().c_str());
}

// "avx2, 8 float lanes; this CPU runs avx2, baseline".
std::string kernel_set_text() {
  const auto& set = kernels::attention_kernels();
  std::string runs;
  for (const std::string& name : kernels::attention_kernel_sets()) runs += (runs.empty() ? "" : ", ") + name;
  return std::string(set.name) + ", " + std::to_string(set.lanes) + " float lanes; this CPU runs " + runs +
         " (ATTNLAB_KERNELS=<set> chooses)";
}

void run_info(const ConfigArgs& args) {
  const Config cfg = args.resolve();
  GPT<float> model(cfg);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  model.plan_count_only(B, T);  // the activation memory is counted, not allocated
  std::printf("%s", cfg.to_text().c_str());
  std::printf("parameters: %zu (%.2f MB fp32; with gradients and Adam moments %.2f MB)\n", model.num_params(),
              model.num_params() * 4 / 1e6, model.num_params() * 16 / 1e6);
  std::printf("activation memory: %.2f MB for B=%d T=%d (%.1f KB per token)\n", model.activation_bytes() / 1e6, B, T,
              model.activation_bytes() / 1024.0 / (B * T));
  // The residual kind's share: states, histories or streams, and their gradients (docs/mechanisms.md §4.4, §5.4).
  std::printf("  of which residual (%s): %.2f MB (%.1f KB per token)\n", model.residual().kind(),
              model.residual_activation_bytes() / 1e6, model.residual_activation_bytes() / 1024.0 / (B * T));
  if (cfg.residual.kind == "dar") {
    // §6.5 accounting: ours (planned) against the estimate of docs/mechanisms.md §6.5, KB per token.
    const DarOptions opt = dar_options(cfg);
    const int S = 2 * cfg.model.n_layer, C = cfg.model.d_model;
    const DarMemory ours = Dar<float>(opt, S, C).memory_per_token(true), est = dar_memory_estimate(opt, S, C);
    const double kb = 4 / 1024.0;
    std::printf("    DAR (§6.5, KB per token): histories %.1f (estimate %.1f), reads %.1f (estimate %.1f); "
                "sublayer inputs/outputs %.1f, backward accumulators %.1f\n",
                ours.histories * kb, est.histories * kb, ours.reads * kb, est.reads * kb, ours.inputs_outputs * kb,
                ours.backward * kb);
  }
  std::printf("training FLOPs per token: %.3g (6·N_matmul + 6·L·d·(T+1): the causal half of attention)\n",
              training_flops_per_token(model, T));
  const PeakFlops peak = peak_flops(omp_threads());
  std::printf("fp32 peak (the MFU denominator): %.0f GFLOP/s, %s %s, %d threads\n", peak.gflops, peak.source, peak.isa,
              peak.threads);
  const PeakFlops p16 = peak_flops(omp_threads(), true);
  std::printf("bf16 peak (train.precision = bf16): %.0f GFLOP/s, %s %s, %d threads\n", p16.gflops, p16.source, p16.isa,
              p16.threads);
  std::printf("attention kernels: %s (%s)\n", kernel_set_text().c_str(), gemm_backend_name());
}

}  // namespace

void register_bench(CLI::App& app) {
  {
    auto* a = program_lifetime<BenchArgs>();
    auto* cmd = app.add_subcommand("bench", "time full training steps (forward, backward, AdamW) on synthetic tokens");
    a->config.add_to(cmd);
    cmd->add_option("--steps", a->steps, "timed steps")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", a->warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
    cmd->add_flag("--json", a->json, "print one JSON object (an array of them with --variant)");
    cmd->add_option("--variant", a->variants,
                    "NAME:key=value;key=value — time several configurations in one run, alternating (repeatable; "
                    "the first is the baseline of the ratios; 'NAME:' is the base configuration)");
    cmd->add_option("--rounds", a->rounds,
                    "alternation rounds with --variant (default 3); without --variant, rounds of --steps steps (default 1)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--cpu-time", a->cpu_time, "time process CPU seconds (use with OMP_NUM_THREADS=1 on a busy machine)");
    cmd->callback([a, cmd] {
      a->rounds_given = cmd->count("--rounds") > 0;
      run_bench(*a);
    });
  }
  {
    auto* a = program_lifetime<ConfigArgs>();
    auto* cmd = app.add_subcommand("info", "parameter count, activation memory per token and FLOPs of a configuration");
    a->add_to(cmd);
    cmd->callback([a] { run_info(*a); });
  }
}

}  // namespace attnlab::cli
