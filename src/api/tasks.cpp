// attnlab::api tasks (include/attnlab/tasks.h): experiment/tasks.h's generators, training source
// and teacher-forced evaluation behind the public types.
#include <sstream>

#include "api/internal.h"
#include "attnlab/tasks.h"
#include "checkpoint/checkpoint.h"
#include "core/denormals.h"
#include "core/error.h"
#include "experiment/long_context.h"
#include "experiment/tasks.h"

namespace attnlab::api {
namespace {

tasks::TaskParams internal_params(const TaskParams& p) {
  tasks::TaskParams t;
  t.name = p.name;
  t.mqar_keys = p.mqar_keys;
  t.kv_pairs = p.kv_pairs;
  t.queries = p.queries;
  return t;
}

std::vector<double> parse_depths(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    double v = -1;
    try { v = std::stod(item, &used); } catch (...) { used = 0; }
    if (used == 0 || !(v >= 0 && v <= 1)) fail("--depths entry '", item, "': expected a depth in [0, 1]");
    out.push_back(v);
  }
  return out;
}

}  // namespace

TaskParams default_task_params() { return TaskParams{}; }
TaskEvalParams default_task_eval_params() { return TaskEvalParams{}; }

Config task_config(const Config& config, const TaskParams& task) {
  const attnlab::Config resolved = resolve(config);
  const auto t = tasks::Task::make(internal_params(task), resolved.model.seq_len);
  Config out = config;
  // (Applied last: no shard is read, so data.* is unused.)
  out.set_override("model.vocab_size=" + std::to_string(t->vocab_size()));
  return out;
}

TrainResult train_task(const Config& config, const TaskParams& task, const TrainParams& params) {
  if (params.validation) fail("TrainParams::validation: a task validates on its own fixed batches");
  const attnlab::Config cfg = resolve(config);
  auto t = std::shared_ptr<const tasks::Task>(tasks::Task::make(internal_params(task), cfg.model.seq_len));
  if (cfg.model.vocab_size != t->vocab_size())
    fail("train_task: model.vocab_size = ", cfg.model.vocab_size, ", but the task ", task.name, " has ", t->vocab_size(),
         " ids (apply task_config to the configuration)");
  tasks::TaskTrainData data(t, cfg.train.batch_size, cfg.model.seq_len, cfg.train.seed);
  ScopedFlushDenormals flush;
  return train_result(attnlab::train(cfg, train_options(params), data));
}

TaskEvalResult evaluate_task(const std::string& checkpoint, const TaskParams& task, const TaskEvalParams& params) {
  const attnlab::Config cfg = read_checkpoint_config(checkpoint);
  tasks::TaskParams p = internal_params(task);
  if (p.name == "mqar" && p.mqar_keys == 0) p.mqar_keys = (cfg.model.vocab_size - 3) / 2;  // from the vocabulary
  const auto t = tasks::Task::make(p, cfg.model.seq_len);
  tasks::TaskEvalOptions o;
  o.lengths = parse_lengths(params.lengths, cfg.model.seq_len);
  check_inference_memory("--lengths " + params.lengths, cfg, o.lengths, params.batch_size);
  if (!params.depths.empty()) {
    if (!t->uses_depth()) fail("--depths applies to the needle task only");
    o.depths = parse_depths(params.depths);
  }
  o.samples = params.samples;
  o.seed = params.seed;
  o.batch_size = params.batch_size;
  o.chunk = params.chunk;
  o.progress = progress_fn(params.on_progress);
  tasks::TaskEvalReport rep;
  {
    ScopedFlushDenormals flush;
    rep = interruptible([&] { return tasks::evaluate_task(*t, [&] { return load_model(checkpoint); }, o); });
  }
  TaskEvalResult r;
  for (const tasks::TaskCell& c : rep.cells) {
    TaskCell cell;
    cell.length = c.length;
    cell.depth = c.depth;
    cell.applicable = c.applicable;
    cell.samples = c.score.samples;
    cell.solved = c.score.solved;
    cell.answer_tokens = c.score.answer_tokens;
    cell.correct_tokens = c.score.correct_tokens;
    cell.strict_accuracy = c.score.strict_accuracy();
    cell.token_accuracy = c.score.token_accuracy();
    cell.answer_logprob = c.score.mean_logprob();
    cell.seconds = c.seconds;
    r.cells.push_back(cell);
  }
  r.table = tasks::task_report_table(rep);
  r.json = tasks::task_report_json(rep).dump(2);
  return r;
}

}  // namespace attnlab::api
