// The training loop: gradient accumulation, schedules, clipping, AdamW, periodic validation and
// checkpoints, a progress line and a JSONL metrics log. All buffers are allocated before the first
// step; the loop itself allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
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
  bool quiet = false;
  // Events for a driver such as `attnlab compare` (called on the training thread; may be empty).
  // on_step: after every optimizer step, with the step (1-based, counted from the start of the
  // whole run, resumes included), its training loss, and that step's tokens per second.
  // on_eval: after every validation, with the step, the mean loss and the number of targets scored.
  std::function<void(int64_t step, double loss, double tokens_per_s)> on_step;
  std::function<void(int64_t step, double val_loss, size_t val_tokens)> on_eval;
};

struct TrainSummary {
  int64_t steps = 0;
  double last_train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;
  double train_seconds = 0;    // wall time of this run's optimizer steps (evaluations excluded)
  int64_t steps_this_run = 0;
  size_t num_params = 0;
  bool interrupted = false;    // stopped by a signal before train.steps (not by stop_after or time_limit)
  std::string checkpoint;
  std::vector<double> losses;  // train loss per optimizer step taken in this run
};

// Sum of losses and number of targets over the first `max_batches` batches (0: all) of a shard's
// consecutive (T+1)-token windows in order (DataLoader::eval_batch): deterministic, each window once.
struct EvalResult { double loss_sum = 0; size_t count = 0; double mean() const { return count ? loss_sum / count : 0; } };
EvalResult evaluate(GPT<float>& model, const Shard& shard, int max_batches);

// Model FLOPs per token of a training step (docs/performance.md): 6·N_matmul + 12·L·T·d.
double training_flops_per_token(const GPT<float>& model, int T);

// Global-norm clipping and one AdamW update of every parameter (decay per the registry, §0).
// t is the 1-based step for bias correction. Returns the gradient norm before clipping.
double optimizer_step(GPT<float>& model, float* adam_m, float* adam_v, const TrainConfig& tc, double lr, int t);

TrainSummary train(const Config& cfg, const TrainOptions& opts);

}  // namespace attnlab
