// `attnlab bench` (training-step timing on synthetic tokens) and `attnlab info` (sizes and memory),
// through the public API (include/attnlab/) alone.
#include <cstdio>
#include <string>
#include <vector>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"

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

// "name:key=value;key=value" → the base assignments plus these overrides (resolved here, so that a
// bad one is reported with its --variant).
api::Config variant_config(const BenchArgs& a, const std::string& spec, std::string& name) {
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
    api::Config cfg = args.api_config();
    cfg.resolve();
    return cfg;
  } catch (const Error& e) {
    fail("--variant ", spec, ": ", e.what());
  }
}

void run_bench(const BenchArgs& a) {
  std::vector<api::BenchVariant> variants;
  if (a.variants.empty()) {
    variants.push_back({"base", a.config.api_config()});
  } else {
    for (const auto& spec : a.variants) {
      std::string name;
      api::Config cfg = variant_config(a, spec, name);
      variants.push_back({name, std::move(cfg)});
    }
  }
  api::BenchParams p = api::default_bench_params();
  p.steps = a.steps;
  p.warmup = a.warmup;
  p.rounds = a.variants.empty() && !a.rounds_given ? 1 : a.rounds;
  p.cpu_time = a.cpu_time;
  const api::BenchResult res = api::bench(variants, p);
  const int rounds = res.rounds;
  const api::KernelInfo kernels = api::kernel_info();
  const auto& runs = res.variants;
  if (a.json) {
    std::printf("%s\n", api::bench_result_json(res).c_str());
    return;
  }
  const api::Config& c = runs[0].config;
  auto number = [&](const char* key) { return std::stoi(c.get(key)); };
  std::printf("attnlab bench: L=%d d=%d H=%d T=%d B=%d V=%d, %d threads, %s, attention kernels %s\n", number("model.n_layer"),
              number("model.d_model"), number("model.n_head"), number("model.seq_len"), number("train.batch_size"),
              number("model.vocab_size"), res.threads,
              (runs[0].precision == "bf16" ? kernels.gemm_backend_bf16 : kernels.gemm_backend).c_str(),
              kernels.attention_kernels.c_str());
  std::printf("%d round%s x %d steps per variant%s, %s time; mean ± sd over %s; MFU against %.0f GFLOP/s (%s %s peak)\n",
              rounds, rounds > 1 ? "s" : "", a.steps, runs.size() > 1 ? ", alternating" : "",
              a.cpu_time ? "process CPU" : "wall", rounds > 1 ? "the rounds' median steps" : "the steps", res.peak.gflops,
              res.peak.source.c_str(), res.peak.isa.c_str());
  for (const auto& r : runs)
    if (r.precision == "bf16") {
      std::printf("bf16 variants: MFU against %.0f GFLOP/s (%s %s peak)\n", r.peak.gflops, r.peak.source.c_str(), r.peak.isa.c_str());
      break;
    }
  std::printf("%-16s %19s %21s %8s %6s %9s %15s\n", "variant", "ms/step", "tokens/s", "GFLOP/s", "MFU",
              "act. MB", runs.size() > 1 ? "ratio (time)" : "");
  for (const auto& r : runs) {
    char ratio_text[64] = "";
    if (runs.size() > 1 && rounds > 1) std::snprintf(ratio_text, sizeof ratio_text, "%.3f ± %.3f", r.ratio_mean, r.ratio_sd);
    else if (runs.size() > 1) std::snprintf(ratio_text, sizeof ratio_text, "%.3f", r.ratio);
    std::printf("%-16s %9.1f ± %7.1f %10.0f ± %8.0f %8.1f %5.1f%% %9.2f %15s\n", r.name.c_str(), r.ms_per_step_mean, r.ms_per_step_sd,
                r.tokens_per_s_mean, r.tokens_per_s_sd, r.tokens_per_s_mean * r.flops_per_token / 1e9, r.mfu_percent,
                r.activation_bytes / 1e6, ratio_text);
  }
}

// "avx2, 8 float lanes; this CPU runs avx2, baseline (ATTNLAB_KERNELS=<set> chooses)".
std::string kernel_set_text(const api::KernelInfo& k) {
  std::string runs;
  for (const std::string& name : k.available) runs += (runs.empty() ? "" : ", ") + name;
  return k.attention_kernels + ", " + std::to_string(k.lanes) + " float lanes; this CPU runs " + runs +
         " (ATTNLAB_KERNELS=<set> chooses)";
}

void run_info(const ConfigArgs& args, int ranks) {
  const api::Config cfg = args.api_config();
  const api::ModelInfo m = api::model_info(cfg);
  const int B = m.batch_size, T = m.seq_len;
  std::printf("%s", cfg.dump().c_str());
  std::printf("parameters: %zu (%.2f MB fp32; with gradients and Adam moments %.2f MB)\n", m.params,
              m.params * 4 / 1e6, m.params * 16 / 1e6);
  std::printf("activation memory: %.2f MB for B=%d T=%d (%.1f KB per token)\n", m.activation_bytes / 1e6, B, T,
              m.activation_bytes / 1024.0 / (B * T));
  // The residual kind's share: states, histories or streams, and their gradients (docs/mechanisms.md §4.4, §5.4).
  std::printf("  of which residual (%s): %.2f MB (%.1f KB per token)\n", m.residual_kind.c_str(),
              m.residual_activation_bytes / 1e6, m.residual_activation_bytes / 1024.0 / (B * T));
  if (m.dar) {
    // §6.5 accounting: ours (planned) against the estimate of docs/mechanisms.md §6.5, KB per token.
    const double kb = 1 / 1024.0;
    std::printf("    DAR (§6.5, KB per token): histories %.1f (estimate %.1f), reads %.1f (estimate %.1f); "
                "sublayer inputs/outputs %.1f, backward accumulators %.1f\n",
                m.dar_histories * kb, m.dar_histories_estimate * kb, m.dar_reads * kb, m.dar_reads_estimate * kb,
                m.dar_inputs_outputs * kb, m.dar_backward * kb);
  }
  std::printf("training FLOPs per token: %.3g (6·N_matmul + 6·L·d·(T+1): the causal half of attention)\n",
              m.training_flops_per_token);
  const api::PeakFlops peak = api::peak_flops();
  std::printf("fp32 peak (the MFU denominator): %.0f GFLOP/s, %s %s, %d threads\n", peak.gflops, peak.source.c_str(),
              peak.isa.c_str(), peak.threads);
  const api::PeakFlops p16 = api::peak_flops(true);
  std::printf("bf16 peak (train.precision = bf16): %.0f GFLOP/s, %s %s, %d threads\n", p16.gflops, p16.source.c_str(),
              p16.isa.c_str(), p16.threads);
  // Data-parallel training (docs/distributed.md): every rank holds the parameters and gradients;
  // the moments are whole on every rank, or a 1/N shard with ZeRO-1 (plus the shard of the summed
  // gradient it receives); activations are those of its B/N rows.
  if (!api::DistributedSession::built_with_mpi()) {
    // no data-parallel training in this build: nothing to report per rank
  } else if (B % ranks != 0) {
    std::printf("data-parallel on %d ranks (--ranks): train.batch_size = %d does not divide among them\n", ranks, B);
  } else {
    api::Config per_rank = cfg;
    per_rank.set_override("train.batch_size=" + std::to_string(B / ranks));
    const api::ModelInfo r = api::model_info(per_rank);
    const double p = double(m.params) * 4;  // bytes of one fp32 copy of the parameters
    std::printf("data-parallel, per rank of %d (--ranks; mpirun -np %d attnlab train): activations %.2f MB for B/N=%d; "
                "parameters, gradients and Adam moments %.2f MB, with train.zero = 1 (ZeRO-1) %.2f MB "
                "(rank 0 gathers the moments, +%.2f MB, while it writes a checkpoint)\n",
                ranks, ranks, r.activation_bytes / 1e6, B / ranks, 4 * p / 1e6, (2 * p + 3 * p / ranks) / 1e6, 2 * p / 1e6);
  }
  const api::KernelInfo k = api::kernel_info();
  std::printf("attention kernels: %s (%s)\n", kernel_set_text(k).c_str(), k.gemm_backend.c_str());
  std::printf("%s\n", api::DistributedSession::built_with_mpi()
                          ? "processes: MPI built in (ATTNLAB_MPI): `mpirun -np N attnlab compare` shares a grid, `mpirun -np N attnlab train` "
                            "trains data-parallel (docs/distributed.md)"
                          : "processes: one (built without MPI, ATTNLAB_MPI=OFF)");
}

}  // namespace

void register_bench(CLI::App& app) {
  {
    auto* a = program_lifetime<BenchArgs>();
    auto* cmd = app.add_subcommand("bench", "time full training steps (forward, backward, AdamW) on synthetic tokens");
    a->config.add_to(cmd);
    cmd->add_option("--steps", a->steps, "timed steps")->check(at_least(1));
    cmd->add_option("--warmup", a->warmup, "untimed steps first")->check(at_least(0));
    cmd->add_flag("--json", a->json, "print one JSON object (an array of them with --variant)");
    cmd->add_option("--variant", a->variants,
                    "NAME:key=value;key=value — time several configurations in one run, alternating (repeatable; "
                    "the first is the baseline of the ratios; 'NAME:' is the base configuration)");
    cmd->add_option("--rounds", a->rounds,
                    "alternation rounds with --variant (default 3); without --variant, rounds of --steps steps (default 1)")
        ->check(at_least(1));
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
    auto* ranks = program_lifetime<int>();
    *ranks = 2;
    cmd->add_option("--ranks", *ranks, "the memory per rank of data-parallel training on this many ranks")->check(at_least(1));
    cmd->callback([a, ranks] { run_info(*a, *ranks); });
  }
}

}  // namespace attnlab::cli
