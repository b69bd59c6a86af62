// attnlab public API: the diagnostics of docs/mechanisms.md §8.1–§8.5 for a checkpoint on a token
// shard (`attnlab analyze`): attention statistics per layer and head, the residual kind's streams,
// CKA between layers and §8.5's rescue gain, written as out_dir/analysis.json (schema
// "attnlab.analysis", docs/analysis.md defines every number), with a summary returned.
//
//   api::AnalyzeResult a = api::analyze("runs/default/model.safetensors", "data/val.bin", "runs/analysis");
//   for (const auto& l : a.layers) std::printf("layer %d: cos_yv %.3f\n", l.layer, l.cos_yv_mean);
//
// Thread-safety: calls share nothing but out_dir; distinct out_dirs may be analysed at once.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/error.h"
#include "attnlab/progress.h"

namespace attnlab::api {

struct AnalyzeParams {
  int sequences = 64;      // validation windows of model.seq_len tokens (seeded draw, with replacement)
  int batch_size = 8;      // windows per forward
  int cka_tokens = 4096;   // tokens sampled for CKA, §8.4
  int bootstrap = 1000;    // bootstrap resamples for §8.5's standard errors
  uint64_t seed = 0;       // the window draw, the CKA sample and the bootstrap
  bool rescue_by_depth = true;  // DAR, HC, mHC: §8.5's per-read patches too (n·(2L+1) forwards per batch)
  // Called once the inputs are checked and the windows drawn, before the diagnostics run (they take
  // a while), with the window length (model.seq_len).
  std::function<void(int seq_len)> on_start;
  ProgressCallback on_progress;  // after each batch of windows (attnlab/progress.h); Ctrl-C: Interrupted
};
AnalyzeParams default_analyze_params();

// One layer's attention summary (docs/analysis.md, "attention"); NaN where a value is undefined.
struct AnalyzeLayer {
  int layer = 0;
  double cos_yv_mean = 0, cos_yv_min = 0, cos_yv_max = 0;  // over heads
  double self_mean = 0;    // attention on the token itself
  double vsim_mean = 0;
  bool has_cos_zv = false;  // XSA layers
  double cos_zv_mean = 0;
};

// §8.5: the rescue gain of the other streams when stream s is patched, with its bootstrap error.
struct RescueGain {
  double value = 0, se = 0;
};

struct AnalyzeResult {
  std::string path;        // out_dir/analysis.json
  int seq_len = 0;
  double loss = 0;         // the windows' mean loss (NaN when absent)
  std::vector<AnalyzeLayer> layers;
  bool has_rescue = false; // residual kinds with patchable streams
  std::vector<RescueGain> rescue_when_patched;  // per stream s
};

// Runs every diagnostic that applies to the checkpoint's model on windows of the shard and writes
// out_dir/analysis.json atomically (out_dir is created), with the checkpoint and data paths in it.
AnalyzeResult analyze(const std::string& checkpoint, const std::string& shard, const std::string& out_dir,
                      const AnalyzeParams& params = default_analyze_params());

}  // namespace attnlab::api
