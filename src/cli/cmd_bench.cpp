// `attnlab bench` (training-step timing on synthetic tokens) and `attnlab info` (sizes and memory).
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "model/residual/dar.h"
#include "train/trainer.h"

namespace attnlab::cli {
namespace {

struct BenchArgs {
  ConfigArgs config;
  int steps = 20, warmup = 3, rounds = 3;
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

// One configuration being timed: model, Adam moments and synthetic tokens, all allocated up front.
struct BenchModel {
  std::string name;
  Config cfg;
  GPT<float> model;
  Buffer m, v;
  std::vector<int32_t> in, tgt;
  std::vector<double> times;  // seconds per timed step
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
  const int rounds = a.variants.empty() ? 1 : a.rounds;
  for (int round = 0; round < rounds; ++round)
    for (auto& r : runs)
      for (int i = 0; i < a.steps; ++i) r->step(true, a.cpu_time);
  const double base = median(runs[0]->times);
  nlohmann::json out = nlohmann::json::array();
  if (!a.json) {
    const Config& c = runs[0]->cfg;
    std::printf("attnlab bench: L=%d d=%d H=%d T=%d B=%d V=%d, %d threads, %s\n", c.model.n_layer, c.model.d_model,
                c.model.n_head, c.model.seq_len, c.train.batch_size, c.model.vocab_size, omp_threads(), gemm_backend_name());
    if (runs.size() > 1)
      std::printf("%d rounds x %d steps per variant, alternating; ratio = median step / median step of '%s'\n", rounds,
                  a.steps, runs[0]->name.c_str());
  }
  for (auto& r : runs) {
    const double med = median(r->times);
    const double flops = training_flops_per_token(r->model, r->cfg.model.seq_len);
    const double tps = r->tokens() / med, gflops = tps * flops / 1e9;
    if (a.json) {
      out.push_back({{"name", r->name}, {"tokens_per_s", tps}, {"ms_per_step_median", med * 1e3},
                     {"ratio", med / base}, {"gflops", gflops}, {"flops_per_token", flops}, {"steps", r->times.size()},
                     {"threads", omp_threads()}, {"params", r->model.num_params()},
                     {"activation_bytes", r->model.activation_bytes()},
                     {"residual_activation_bytes", r->model.residual_activation_bytes()}, {"config", r->cfg.to_json()}});
    } else if (runs.size() == 1) {
      std::printf("median step %.1f ms over %d steps | %.0f tokens/s | %.1f GFLOP/s model FLOPs\n", med * 1e3, a.steps, tps,
                  gflops);
    } else {
      std::printf("%-16s median %8.1f ms | ratio %.3f | %7.0f tokens/s | %6.1f GFLOP/s | %.2f MB activations\n",
                  r->name.c_str(), med * 1e3, med / base, tps, gflops, r->model.activation_bytes() / 1e6);
    }
  }
  if (a.json) std::printf("%s\n", (runs.size() == 1 ? out[0] : out).dump().c_str());
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
  std::printf("training FLOPs per token: %.3g\n", training_flops_per_token(model, T));
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
    cmd->add_option("--rounds", a->rounds, "alternation rounds with --variant")->check(CLI::PositiveNumber);
    cmd->add_flag("--cpu-time", a->cpu_time, "time process CPU seconds (use with OMP_NUM_THREADS=1 on a busy machine)");
    cmd->callback([a] { run_bench(*a); });
  }
  {
    auto* a = program_lifetime<ConfigArgs>();
    auto* cmd = app.add_subcommand("info", "parameter count, activation memory per token and FLOPs of a configuration");
    a->add_to(cmd);
    cmd->callback([a] { run_info(*a); });
  }
}

}  // namespace attnlab::cli
