// The training loop: gradient accumulation, schedules, clipping, AdamW, periodic validation and
// checkpoints, a progress line and a JSONL metrics log. All buffers are allocated before the first
// step; the loop itself allocates nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.h"
#include "train/checkpoint.h"

namespace attnlab {

class Shard;

struct TrainOptions {
  std::string resume;          // checkpoint to resume from (exact resume)
  int stop_after = -1;         // stop (with a checkpoint) after this many optimizer steps in this run; -1 = no
  bool force = false;          // a fresh run may replace the checkpoints of an earlier run in train.out_dir
  bool quiet = false;
};

struct TrainSummary {
  int64_t steps = 0;
  double last_train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;
  std::string checkpoint;
  std::vector<double> losses;  // train loss per optimizer step taken in this run (NaN/Inf for a skipped step)
  int64_t skipped_steps = 0;   // steps whose update was skipped (non-finite loss or gradient)
};

// Sum of losses and number of targets over the first `max_batches` batches (0: all) of a shard's
// consecutive (T+1)-token windows in order (DataLoader::eval_batch): deterministic, each window once.
struct EvalResult { double loss_sum = 0; size_t count = 0; double mean() const { return count ? loss_sum / count : 0; } };
EvalResult evaluate(GPT<float>& model, const Shard& shard, int max_batches);

// Model FLOPs per token of a training step (MACHINE.md): 6·N_matmul + 12·L·T·d.
double training_flops_per_token(const GPT<float>& model, int T);

// Global-norm clipping and one AdamW update of every parameter (decay per the registry, §0).
// t is the 1-based step for bias correction. Returns the gradient norm before clipping. When that
// norm is not finite (a NaN or Inf gradient anywhere), nothing is changed (weights, moments and
// gradients stay as they are) and the non-finite norm is returned: the caller skips the step.
double optimizer_step(GPT<float>& model, float* adam_m, float* adam_v, const TrainConfig& tc, double lr, int t);

TrainSummary train(const Config& cfg, const TrainOptions& opts);

}  // namespace attnlab
