// The training loop: gradient accumulation, schedules, clipping, AdamW, periodic validation and
// checkpoints, a progress line and a JSONL metrics log. All buffers are allocated before the first
// step; the loop itself allocates nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "model/config.h"
#include "model/gpt.h"
#include "checkpoint/checkpoint.h"

namespace attnlab {

class Shard;

struct TrainOptions {
  std::string resume;          // checkpoint to resume from (exact resume)
  int stop_after = -1;         // stop (with a checkpoint) after this many optimizer steps in this run; -1 = no
  bool force = false;          // a fresh run may replace the checkpoints of an earlier run in train.out_dir
  bool quiet = false;
  // Train one model across the ranks of the MPI job (train/data_parallel.h): every rank calls
  // train() with the same configuration and options; rank 0 alone prints and writes files. With
  // one rank, or false (a compare grid's cells, one per rank), this process trains alone.
  bool data_parallel = false;
  // Events for a driver such as `attnlab compare` (called on the training thread; may be empty).
  // on_step: after every optimizer step, with the step (1-based, counted from the start of the
  // whole run, resumes included), its training loss, and that step's tokens per second.
  // on_eval: after every validation, with the step, the mean loss and the number of targets scored.
  std::function<void(int64_t step, double loss, double tokens_per_s)> on_step;
  std::function<void(int64_t step, double val_loss, size_t val_tokens)> on_eval;
};

// Asks the train() running now (on any thread) to stop after its current step, exactly as a first
// SIGINT does: evaluate, write a checkpoint, return with interrupted set. Thread-safe and
// async-signal-safe (an atomic store). A train() that starts later clears the request.
void request_stop();

struct TrainSummary {
  int64_t steps = 0;
  double last_train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;
  double train_seconds = 0;    // wall time of this run's optimizer steps (evaluations excluded)
  int64_t steps_this_run = 0;
  size_t num_params = 0;
  bool interrupted = false;    // stopped by a signal or request_stop() before train.steps (not by stop_after or time_limit)
  std::string checkpoint;
  std::vector<double> losses;  // train loss per optimizer step taken in this run (NaN/Inf for a skipped step)
  int64_t skipped_steps = 0;   // steps whose update was skipped (non-finite loss or gradient)
};

// Sum of losses and number of targets over the first `max_batches` batches (0: all) of a shard's
// consecutive (T+1)-token windows in order (DataLoader::eval_batch): deterministic, each window once.
// part, parts (data-parallel validation): the planned B is a 1/parts share of the global batch;
// this call scores every parts-th of the first max_batches·parts batches, from batch `part`, so
// that the sums over the parts cover the same windows as one process with the global batch.
struct EvalResult { double loss_sum = 0; size_t count = 0; double mean() const { return count ? loss_sum / count : 0; } };
EvalResult evaluate(GPT<float>& model, const Shard& shard, int max_batches, int part = 0, int parts = 1);

// Model FLOPs per token of a training step (docs/performance.md): 6·N_matmul + 6·L·d·(T + 1), the
// attention term counting the causal half only (query i attends to i + 1 keys). Recomputation in
// the backward is not counted.
double training_flops_per_token(const GPT<float>& model, int T);

// Global-norm clipping and one AdamW update of every parameter (decay per the registry, §0).
// t is the 1-based step for bias correction. Returns the gradient norm before clipping. When that
// norm is not finite (a NaN or Inf gradient anywhere), nothing is changed (weights, moments and
// gradients stay as they are) and the non-finite norm is returned: the caller skips the step.
double optimizer_step(GPT<float>& model, float* adam_m, float* adam_v, const TrainConfig& tc, double lr, int t);

// Where the training loop gets its micro-batches and its validation loss: the token shards of
// cfg.data (the default, ShardTrainData) or a synthetic task (src/experiment/tasks.h). The loop, the
// optimizer, checkpoints and logs are the same for every source.
class TrainData {
 public:
  virtual ~TrainData() = default;
  // Fills the next (B, T) micro-batch. When weighted(), also the per-token loss weights (B, T):
  // their sum over a micro-batch must be B·T, so that the step's loss Σ w·CE / (B·T·grad_accum)
  // is a weighted mean on the scale of the plain one (weights all 1). Must not allocate.
  virtual void next(int32_t* inputs, int32_t* targets, float* weights) = 0;
  virtual bool weighted() const { return false; }
  // Exact resume: the position of the next micro-batch, stored in the checkpoint.
  virtual DataLoader::State state() const = 0;
  virtual void restore(DataLoader::State s) = 0;
  // Validation loss of the model planned for (B, T) (mean weighted like training).
  virtual EvalResult validate(GPT<float>& model, int max_batches) = 0;
  // One line for the start of the run: what is trained on.
  virtual std::string describe() const = 0;
  // Data-parallel training (train/data_parallel.h), called once before the first batch: from then
  // on next() fills this rank's rows [part·B/parts, (part+1)·B/parts) of each global (B, T) batch,
  // whose windows depend on the seed and the step alone, and validate() scores this rank's share
  // (evaluate()'s part, parts). False when the source cannot be split.
  virtual bool split(int /*part*/, int /*parts*/) { return false; }
};

TrainSummary train(const Config& cfg, const TrainOptions& opts);             // on the shards of cfg.data
TrainSummary train(const Config& cfg, const TrainOptions& opts, TrainData& data);

}  // namespace attnlab
