// `attnlab analyze`: the diagnostics of docs/mechanisms.md §8.1–§8.5 for a checkpoint on a token
// shard, written as DIR/analysis.json (schema: docs/analysis.md), then one PNG per diagnostic by
// scripts/plot_analysis.py (Debian's python3-matplotlib, run with /usr/bin/python3). Without python3
// or matplotlib the JSON is still written and a note says how to get the plots.
#include <cstdio>
#include <string>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"
#include "cli/plots.h"
#include "cli/progress_line.h"

namespace attnlab::cli {
namespace {

struct AnalyzeArgs {
  std::string checkpoint, data, out, plot_script;
  int sequences = 64, batch_size = 8, cka_tokens = 4096, bootstrap = 1000;
  uint64_t seed = 0;
  bool no_plots = false, no_rescue_by_depth = false;
};

void run_analyze(const AnalyzeArgs& a) {
  api::AnalyzeParams p = api::default_analyze_params();
  p.sequences = a.sequences;
  p.batch_size = a.batch_size;
  p.cka_tokens = a.cka_tokens;
  p.bootstrap = a.bootstrap;
  p.seed = a.seed;
  p.rescue_by_depth = !a.no_rescue_by_depth;
  p.on_progress = progress_line();
  p.on_start = [&](int T) {
    std::printf("analyze %s on %s: %d sequences of %d tokens (seed %llu)\n", a.checkpoint.c_str(), a.data.c_str(), a.sequences, T,
                (unsigned long long)a.seed);
    std::fflush(stdout);
  };
  const api::AnalyzeResult r = api::analyze(a.checkpoint, a.data, a.out, p);
  std::printf("wrote %s (loss %.4f)\n", r.path.c_str(), r.loss);
  for (const auto& l : r.layers)
    std::printf("  layer %d: cos_yv %.3f (heads %.3f..%.3f), self %.3f, vsim %.3f%s\n", l.layer, l.cos_yv_mean, l.cos_yv_min,
                l.cos_yv_max, l.self_mean, l.vsim_mean, l.has_cos_zv ? ("  cos_zv " + std::to_string(l.cos_zv_mean)).c_str() : "");
  if (r.has_rescue) {
    std::printf("  rescue gain of the others when stream s is patched (§8.5):");
    int s = 0;
    for (const auto& g : r.rescue_when_patched) std::printf(" s=%d: %.3f ± %.3f", s++, g.value, g.se);
    std::printf("\n");
  }
  std::fflush(stdout);
  if (a.no_plots) return;

  run_plot_script("plot_analysis.py", a.plot_script, {r.path, a.out});
}

}  // namespace

void register_analyze(CLI::App& app) {
  auto* a = program_lifetime<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze", "the diagnostics of docs/mechanisms.md §8 as analysis.json and plots (docs/analysis.md)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
  add_skip_checksums_flag(cmd);
  cmd->add_option("--data", a->data, "token shard (validation data, from `attnlab prepare`)")->required();
  cmd->add_option("--out", a->out, "output directory (analysis.json and the PNGs)")->required();
  cmd->add_option("--sequences", a->sequences, "validation windows of model.seq_len tokens (default 64)")->check(at_least(1));
  cmd->add_option("--seed", a->seed, "seed of the window draw, the CKA token sample and the bootstrap")->check(seed_value());
  cmd->add_option("--batch-size", a->batch_size, "sequences per forward (default 8)")->check(at_least(1));
  cmd->add_option("--cka-tokens", a->cka_tokens, "tokens sampled for CKA, §8.4 (default 4096)")->check(at_least(1));
  cmd->add_option("--bootstrap", a->bootstrap, "bootstrap resamples for §8.5's standard errors (default 1000)")->check(at_least(0));
  cmd->add_flag("--no-rescue-by-depth", a->no_rescue_by_depth, "DAR, HC, mHC: skip §8.5's per-read patches (n·(2L+1) forwards per batch)");
  cmd->add_flag("--no-plots", a->no_plots, "write analysis.json only");
  cmd->add_option("--plot-script", a->plot_script, "the plotting script (default: scripts/plot_analysis.py of the source tree)");
  cmd->callback([a] { run_analyze(*a); });
}

}  // namespace attnlab::cli
