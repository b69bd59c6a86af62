// `attnlab analyze`: the diagnostics of docs/mechanisms.md §8.1–§8.5 for a checkpoint on a token
// shard, written as DIR/analysis.json (schema: docs/analysis.md), then one PNG per diagnostic by
// scripts/plot_analysis.py (Debian's python3-matplotlib, run with /usr/bin/python3). Without python3
// or matplotlib the JSON is still written and a note says how to get the plots.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/plots.h"
#include "core/error.h"
#include "data/shard.h"
#include "experiment/analyze.h"
#include "checkpoint/checkpoint.h"

namespace attnlab::cli {
namespace {

namespace fs = std::filesystem;

struct AnalyzeArgs {
  std::string checkpoint, data, out, plot_script;
  int sequences = 64, batch_size = 8, cka_tokens = 4096, bootstrap = 1000;
  uint64_t seed = 0;
  bool no_plots = false, no_rescue_by_depth = false;
};

void run_analyze(const AnalyzeArgs& a) {
  const Config cfg = read_checkpoint_config(a.checkpoint);
  GPT<float> model(cfg);
  load_checkpoint(a.checkpoint, model, nullptr, nullptr);
  Shard shard = Shard::open(a.data);
  shard.validate_vocab(cfg.model.vocab_size);
  const int T = cfg.model.seq_len;
  if (a.sequences < 1) fail("--sequences must be at least 1");
  if (shard.size() < (size_t)T + 1) fail("data ", a.data, " has ", shard.size(), " tokens, fewer than model.seq_len + 1 = ", T + 1);
  // §8: validation windows of the training length with a fixed seed; §8.5's corrupting windows by a
  // second seeded draw (the pairing is by index).
  const auto seqs = draw_windows(shard.tokens(), shard.size(), a.sequences, T + 1, a.seed);
  const auto corrupt = residual_patchable_streams(cfg) > 0 ? draw_windows(shard.tokens(), shard.size(), a.sequences, T + 1, a.seed + 1)
                                                         : std::vector<int32_t>{};
  AnalyzeOptions opt;
  opt.batch = a.batch_size;
  opt.cka_tokens = a.cka_tokens;
  opt.bootstrap = a.bootstrap;
  opt.seed = a.seed;
  opt.rescue_by_depth = !a.no_rescue_by_depth;
  std::printf("analyze %s on %s: %d sequences of %d tokens (seed %llu)\n", a.checkpoint.c_str(), a.data.c_str(), a.sequences, T,
              (unsigned long long)a.seed);
  std::fflush(stdout);
  nlohmann::json j = analyze(model, seqs, corrupt, a.sequences, T, opt);
  j["checkpoint"] = a.checkpoint;
  j["data"] = a.data;

  fs::create_directories(a.out);
  const std::string path = (fs::path(a.out) / "analysis.json").string(), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) fail("cannot write ", tmp);
    f << j.dump(1) << "\n";
    if (!f.good()) fail("cannot write ", tmp);
  }
  fs::rename(tmp, path);
  std::printf("wrote %s (loss %.4f)\n", path.c_str(), j["loss"].is_number() ? j["loss"].get<double>() : NAN);
  for (const auto& l : j["attention"]["layers"])
    std::printf("  layer %d: cos_yv %.3f (heads %.3f..%.3f), self %.3f, vsim %.3f%s\n", l["layer"].get<int>(),
                l["cos_yv"]["mean"].get<double>(), l["cos_yv"]["min"].get<double>(), l["cos_yv"]["max"].get<double>(),
                l["self"]["mean"].get<double>(), l["vsim"]["mean"].get<double>(),
                l["cos_zv"].is_null() ? "" : ("  cos_zv " + std::to_string(l["cos_zv"]["mean"].get<double>())).c_str());
  if (!j["rescue"].is_null()) {
    std::printf("  rescue gain of the others when stream s is patched (§8.5):");
    int s = 0;
    for (const auto& g : j["rescue"]["RG_when_patched"]) {
      const double v = g["value"].is_number() ? g["value"].get<double>() : NAN, se = g["se"].is_number() ? g["se"].get<double>() : NAN;
      std::printf(" s=%d: %.3f ± %.3f", s++, v, se);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  if (a.no_plots) return;

  run_plot_script("plot_analysis.py", a.plot_script, {path, a.out});
}

}  // namespace

void register_analyze(CLI::App& app) {
  auto* a = program_lifetime<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze", "the diagnostics of docs/mechanisms.md §8 as analysis.json and plots (docs/analysis.md)");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
  cmd->add_option("--data", a->data, "token shard (validation data, from `attnlab prepare`)")->required();
  cmd->add_option("--out", a->out, "output directory (analysis.json and the PNGs)")->required();
  cmd->add_option("--sequences", a->sequences, "validation windows of model.seq_len tokens (default 64)")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "seed of the window draw, the CKA token sample and the bootstrap (default 0)");
  cmd->add_option("--batch-size", a->batch_size, "sequences per forward (default 8)")->check(CLI::PositiveNumber);
  cmd->add_option("--cka-tokens", a->cka_tokens, "tokens sampled for CKA, §8.4 (default 4096)")->check(CLI::PositiveNumber);
  cmd->add_option("--bootstrap", a->bootstrap, "bootstrap resamples for §8.5's standard errors (default 1000)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-rescue-by-depth", a->no_rescue_by_depth, "DAR, HC, mHC: skip §8.5's per-read patches (n·(2L+1) forwards per batch)");
  cmd->add_flag("--no-plots", a->no_plots, "write analysis.json only");
  cmd->add_option("--plot-script", a->plot_script, "the plotting script (default: scripts/plot_analysis.py of the source tree)");
  cmd->callback([a] { run_analyze(*a); });
}

}  // namespace attnlab::cli
