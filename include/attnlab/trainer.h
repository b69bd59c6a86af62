// attnlab public API: training, step by step reported through callbacks instead of printed lines.
//
//   auto params = attnlab::api::default_train_params();
//   params.on_step = [](int64_t step, double loss, double tokens_per_s) { ... };
//   attnlab::api::TrainResult r = attnlab::api::train(cfg, source, params);
//   auto model = attnlab::api::Model::load(r.checkpoint);
//
// It is the same loop as `attnlab train` (gradient accumulation, schedule, clipping, AdamW,
// periodic validation, checkpoints and metrics.jsonl in train.out_dir): the same configuration
// and data give the same losses, bit for bit.
// Signals: for its duration, train() takes SIGINT and SIGTERM (blocked on the calling thread and
// the OpenMP workers, waited for by a thread of its own): either stops the run cleanly after the
// current step, with a checkpoint (TrainResult::interrupted). The previous mask is restored after.
// request_train_stop() asks for the same stop from code: another thread, a callback, or a host's
// own signal handler (the Python package's Ctrl-C handler calls it).
// Thread-safety: one train() per process at a time (the signal handling above is process-wide);
// Models may be used on other threads meanwhile. The callbacks run on the thread that called train().
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/data.h"
#include "attnlab/error.h"

namespace attnlab::api {

struct TrainParams {
  bool quiet = true;            // no progress lines on stdout (the callbacks report instead)
  std::string resume;           // a checkpoint of this run to continue exactly from
  int stop_after = -1;          // stop, with a checkpoint, after this many steps of this call; -1: no
  bool force = false;           // a fresh run may delete an earlier run's checkpoints in train.out_dir
  // Validation batches for a user DataSource (train.eval_batches of them every train.eval_every
  // steps); none: validation is skipped (val_loss NaN). Training on data.dir validates on val.bin.
  DataSource* validation = nullptr;
  // After every optimizer step: the step (1-based, resumes included), its loss and tokens per second.
  std::function<void(int64_t step, double loss, double tokens_per_s)> on_step;
  // After every validation: the step and the mean validation loss.
  std::function<void(int64_t step, double val_loss)> on_eval;
};
TrainParams default_train_params();

struct TrainResult {
  int64_t steps = 0;            // optimizer steps completed (resumes included)
  int64_t steps_this_run = 0;
  double last_train_loss = 0, val_loss = 0;
  double tokens_per_s = 0;
  double train_seconds = 0;     // wall time of this call's optimizer steps
  size_t num_params = 0;
  std::string checkpoint;       // the last checkpoint written (load it with Model::load)
  std::vector<double> losses;   // training loss per step of this call
  int64_t skipped_steps = 0;    // steps skipped for a non-finite loss or gradient
  bool interrupted = false;     // stopped by a signal (SIGINT/SIGTERM) or request_train_stop() before train.steps
};

// Trains on the prepared shards of the configuration's data.dir (train.bin, val.bin).
// Under a DistributedSession of N processes (`mpirun -np N`, attnlab/distributed.h) every process
// calls it with the same configuration and parameters: they train one model data-parallel, each on
// train.batch_size / N sequences of every batch, and rank 0 alone prints and writes files
// (docs/distributed.md). The other train() and train_task() run in one process only.
TrainResult train(const Config& config, const TrainParams& params = default_train_params());
// Trains on batches from `source`.
TrainResult train(const Config& config, DataSource& source, const TrainParams& params = default_train_params());

// Stops the train() (or train_task(), or a compare's training) running now after its current
// optimizer step, as a first SIGINT does: validation, a checkpoint, TrainResult::interrupted.
// Callable from any thread and from a signal handler (an atomic store); no effect on a training
// that starts after the call (each clears the request when it starts).
void request_train_stop();

}  // namespace attnlab::api
