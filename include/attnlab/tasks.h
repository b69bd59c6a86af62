// attnlab public API: the synthetic long-context tasks (`attnlab task`, docs/long-context.md):
// passkey retrieval (docs/mechanisms.md §8.7), needle in a haystack (§8.8) and multi-query
// associative recall (mqar). Training is train()'s loop on the task's generated batches, with the
// loss weighted towards the answer; evaluation is teacher-forced on fresh samples at several lengths.
//
//   api::TaskParams task = api::default_task_params();
//   task.name = "passkey";
//   api::Config cfg = api::task_config(api::Config::preset("tiny"), task);   // the task's vocabulary
//   api::TrainResult r = api::train_task(cfg, task);
//   api::TaskEvalResult e = api::evaluate_task(r.checkpoint, task);          // lengths 1,2,4,8 × seq_len
//
// Thread-safety: train_task as train() (one per process at a time); evaluate_task calls share nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/error.h"
#include "attnlab/progress.h"
#include "attnlab/trainer.h"

namespace attnlab::api {

struct TaskParams {
  std::string name;    // passkey | needle | mqar
  // mqar only (0: the defaults of docs/long-context.md). Give evaluation the values training had.
  int mqar_keys = 0;   // K keys and K values: vocabulary 3 + 2K (0: 64 in training; the checkpoint's in evaluation)
  int kv_pairs = 0;    // key-value pairs per sample (0: min(K, model.seq_len / 8))
  int queries = 0;     // queries per sample (0: the number of pairs)
};
TaskParams default_task_params();

// `config` with the task's vocabulary appended (model.vocab_size, from the task and model.seq_len).
// Throws attnlab::Error for task parameters that do not fit (named as `attnlab task` options).
Config task_config(const Config& config, const TaskParams& task);
// Trains on the task's batches (train.seed seeds them; validation on fixed task batches). The
// configuration's model.vocab_size must be the task's (task_config); data.* is unused.
TrainResult train_task(const Config& config, const TaskParams& task, const TrainParams& params = default_train_params());

struct TaskEvalParams {
  std::string lengths = "1,2,4,8";  // tokens read per sample: multiples of model.seq_len, or N tok
  std::string depths;  // needle only: comma-separated depths in [0, 1]; empty: 0.1,0.3,0.5,0.7,0.9
  int samples = 256;   // per length (and depth)
  uint64_t seed = 1;   // of the evaluation samples (training draws from other streams)
  int batch_size = 8;  // samples side by side
  int chunk = 0;       // tokens per KV-cached chunk; 0: model.seq_len
  ProgressCallback on_progress;  // after each batch of samples (attnlab/progress.h); Ctrl-C: Interrupted
};
TaskEvalParams default_task_eval_params();

struct TaskCell {
  int length = 0;
  double depth = -1;             // needle only; -1 otherwise
  bool applicable = true;        // false: learned positions beyond model.seq_len (N/A)
  size_t samples = 0, solved = 0, answer_tokens = 0, correct_tokens = 0;
  double strict_accuracy = 0;    // samples whose whole answer is the argmax
  double token_accuracy = 0;     // answer tokens that are the argmax
  double answer_logprob = 0;     // mean over samples of the answer's log-probability
  double seconds = 0;
};

struct TaskEvalResult {
  std::vector<TaskCell> cells;
  std::string table;             // the readable table `attnlab task --eval` prints
  std::string json;              // the report, schema "attnlab-task-eval" version 1 (write_json_report writes it)
};

// Evaluates the checkpoint on fresh samples of the task at each length (and depth).
TaskEvalResult evaluate_task(const std::string& checkpoint, const TaskParams& task,
                             const TaskEvalParams& params = default_task_eval_params());

}  // namespace attnlab::api
