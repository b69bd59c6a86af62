// `attnlab bench` (training-step timing on synthetic tokens) and `attnlab info` (sizes and memory).
#include <algorithm>
#include <ctime>
#include <memory>
#include <sstream>
#include <cstdio>
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
  int steps = 20, warmup = 3;
  bool json = false;
  std::vector<std::string> variants;  // --variant "key=value key=value": compared step by step
  bool cpu_time = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

void run_bench(const BenchArgs& a) {
  const Config cfg = a.config.resolve();
  const int B = cfg.train.batch_size, T = cfg.model.seq_len, V = cfg.model.vocab_size;
  GPT<float> model(cfg);
  model.init_weights(cfg.train.seed);
  model.plan(B, T);
  Buffer m(model.registry().total() * sizeof(float)), v(model.registry().total() * sizeof(float));
  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  Rng rng(cfg.train.seed);
  for (size_t i = 0; i < in.size(); ++i) { in[i] = (int32_t)rng.below(V); tgt[i] = (int32_t)rng.below(V); }
  const size_t tokens = (size_t)B * T * cfg.train.grad_accum;
  std::vector<double> times;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    Timer t;
    model.zero_grad();
    for (int micro = 0; micro < cfg.train.grad_accum; ++micro)
      model.train_micro_step(in.data(), tgt.data(), 1.0f / float(tokens));
    optimizer_step(model, m.as<float>(), v.as<float>(), cfg.train, 1e-4, step + 1);
    if (step >= a.warmup) times.push_back(t.seconds());
  }
  const double med = median(times);
  const double flops = training_flops_per_token(model, T);
  const double tps = tokens / med;
  const double gflops = tps * flops / 1e9;
  if (a.json) {
    nlohmann::json j{{"tokens_per_s", tps}, {"ms_per_step_median", med * 1e3}, {"gflops", gflops},
                     {"flops_per_token", flops}, {"steps", a.steps}, {"threads", omp_threads()},
                     {"params", model.num_params()}, {"activation_bytes_per_token", model.activation_bytes() / double(B * T)},
                     {"residual_activation_bytes_per_token", model.residual_activation_bytes() / double(B * T)},
                     {"config", cfg.to_json()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("attnlab bench: L=%d d=%d H=%d T=%d B=%d V=%d, %d threads, %s\n", cfg.model.n_layer, cfg.model.d_model,
                cfg.model.n_head, T, B, V, omp_threads(), gemm_backend_name());
    std::printf("median step %.1f ms over %d steps | %.0f tokens/s | %.1f GFLOP/s model FLOPs\n", med * 1e3, a.steps, tps, gflops);
  }
}

// `--variant` (repeatable): one model per variant (the base configuration plus that variant's
// space-separated key=value overrides), timed one step each in turn, round after round, so that all
// variants see the same machine load (this machine is shared); the starting variant rotates every
// round. Reports each variant's median step and the median over rounds of its step time divided by
// the first variant's in the same round. --cpu-time measures process CPU seconds instead (use with
// OMP_NUM_THREADS=1 on a busy machine, where wall time measures the other processes).
void run_compare(const BenchArgs& a) {
  struct Variant {
    std::string name;
    Config cfg;
    std::unique_ptr<GPT<float>> model;
    Buffer m, v;
    std::vector<double> times, ratios;
  };
  std::vector<Variant> vs;
  for (const auto& text : a.variants) {
    ConfigArgs args = a.config;
    std::istringstream words(text);
    for (std::string w; words >> w;) args.sets.push_back(w);
    Variant v;
    v.name = text;
    v.cfg = args.resolve();
    vs.push_back(std::move(v));
  }
  const int B = vs[0].cfg.train.batch_size, T = vs[0].cfg.model.seq_len, V = vs[0].cfg.model.vocab_size;
  for (auto& v : vs) {
    if (v.cfg.train.batch_size != B || v.cfg.model.seq_len != T || v.cfg.model.vocab_size != V)
      fail("--variant ", v.name, ": variants must share train.batch_size, model.seq_len and model.vocab_size");
    v.model = std::make_unique<GPT<float>>(v.cfg);
    v.model->init_weights(v.cfg.train.seed);
    v.model->plan(B, T);
    v.m = Buffer(v.model->registry().total() * sizeof(float));
    v.v = Buffer(v.model->registry().total() * sizeof(float));
  }
  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  Rng rng(vs[0].cfg.train.seed);
  for (size_t i = 0; i < in.size(); ++i) { in[i] = (int32_t)rng.below(V); tgt[i] = (int32_t)rng.below(V); }
  const Timer wall;
  auto clock = [&]() { return a.cpu_time ? double(std::clock()) / CLOCKS_PER_SEC : wall.seconds(); };
  const int n = (int)vs.size();
  for (int round = 0; round < a.warmup + a.steps; ++round) {
    std::vector<double> t(n);
    for (int k = 0; k < n; ++k) {
      Variant& v = vs[(round + k) % n];
      const double t0 = clock();
      v.model->zero_grad();
      v.model->train_micro_step(in.data(), tgt.data(), 1.0f / float(B * T));
      optimizer_step(*v.model, v.m.as<float>(), v.v.as<float>(), v.cfg.train, 1e-4, round + 1);
      t[(round + k) % n] = clock() - t0;
    }
    if (round < a.warmup) continue;
    for (int k = 0; k < n; ++k) {
      vs[k].times.push_back(t[k]);
      vs[k].ratios.push_back(t[k] / t[0]);
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    std::printf("attnlab bench: %d variants, B=%d T=%d, %d threads, %d rounds, %s time, alternating\n\n"
                "| variant | median ms/step | ratio to first (median of per-round ratios) | residual KB/token |\n|---|---:|---:|---:|\n",
                n, B, T, omp_threads(), a.steps, a.cpu_time ? "CPU" : "wall");
  for (auto& v : vs) {
    const double med = median(v.times) * 1e3, ratio = median(v.ratios);
    const double kb = v.model->residual_activation_bytes() / 1024.0 / (B * T);
    if (a.json) rows.push_back({{"variant", v.name}, {"ms_per_step_median", med}, {"ratio_to_first", ratio}, {"residual_kb_per_token", kb}});
    else std::printf("| %s | %.1f | %.3f | %.1f |\n", v.name.c_str(), med, ratio, kb);
  }
  if (a.json) std::printf("%s\n", nlohmann::json{{"variants", rows}, {"cpu_time", a.cpu_time}, {"threads", omp_threads()}}.dump().c_str());
}

void run_info(const ConfigArgs& args) {
  const Config cfg = args.resolve();
  GPT<float> model(cfg);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  model.plan(B, T);
  std::printf("%s", cfg.to_text().c_str());
  std::printf("parameters: %zu (%.2f MB fp32; with gradients and Adam moments %.2f MB)\n", model.num_params(),
              model.num_params() * 4 / 1e6, model.num_params() * 16 / 1e6);
  std::printf("activation memory: %.2f MB for B=%d T=%d (%.1f KB per token)\n", model.activation_bytes() / 1e6, B, T,
              model.activation_bytes() / 1024.0 / (B * T));
  // The residual kind's share: states, histories or streams, and their gradients (MECHANISMS.md §4.4, §5.4).
  std::printf("  of which residual (%s): %.2f MB (%.1f KB per token)\n", model.residual().kind(),
              model.residual_activation_bytes() / 1e6, model.residual_activation_bytes() / 1024.0 / (B * T));
  if (cfg.residual.kind == "dar") {
    // §6.5 accounting: ours (planned) against the spec's estimate, KB per token.
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
    auto* a = new BenchArgs;
    auto* cmd = app.add_subcommand("bench", "time full training steps (forward, backward, AdamW) on synthetic tokens");
    a->config.add_to(cmd);
    cmd->add_option("--steps", a->steps, "timed steps")->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", a->warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
    cmd->add_flag("--json", a->json, "print one JSON object");
    cmd->add_option("--variant", a->variants,
                    "compare variants step by step, alternating: \"key=value ...\" on top of the configuration (repeatable)");
    cmd->add_flag("--cpu-time", a->cpu_time, "with --variant: time process CPU seconds (use OMP_NUM_THREADS=1 on a busy machine)");
    cmd->callback([a] {
      if (!a->variants.empty()) run_compare(*a);
      else run_bench(*a);
    });
  }
  {
    auto* a = new ConfigArgs;
    auto* cmd = app.add_subcommand("info", "parameter count, activation memory per token and FLOPs of a configuration");
    a->add_to(cmd);
    cmd->callback([a] { run_info(*a); });
  }
}

}  // namespace attnlab::cli
