#include "experiment/compare/cell_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "data/shard.h"
#include "experiment/analyze.h"
#include "experiment/compare/checkpoints.h"
#include "experiment/compare/common.h"
#include "experiment/compare/evaluations.h"
#include "experiment/compare/provenance.h"
#include "experiment/long_context.h"
#include "experiment/tasks.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace attnlab::compare {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double tokens_of(const Config& c) { return double(c.train.batch_size) * c.model.seq_len * c.train.grad_accum; }

std::string fmt_eta(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// Trains (or finishes, or skips when already finished) one model in `dir` with `data` (nullptr: the
// config's shards) and returns the step it reached; the trainer's own checkpoints make a stop at
// any step resumable. on_step/on_eval are passed through.
int64_t train_in(const Config& cfg, const fs::path& dir, TrainOptions to, TrainData* data, bool resume_allowed, bool* interrupted) {
  int64_t ck_step = -1;
  std::vector<std::string> unreadable;
  const std::string ck = latest_checkpoint(dir, &ck_step, &unreadable);
  if (ck.empty() && !unreadable.empty()) {  // the trainer would refuse them and advise its --force
    std::string names;
    for (const auto& n : unreadable) names += (names.empty() ? "" : ", ") + n;
    fail("compare: ", dir.string(), " holds checkpoints none of which can be read (", names,
         "): this run cannot resume from them; delete ", dir.string(), " to retrain this run");
  }
  if (!ck.empty() && ck_step >= 0) {
    if (!resume_allowed) fail("compare: ", dir.string(), " holds checkpoints: pass --resume");
    // The checkpoint must come from this run's configuration: a grid file edited between
    // invocations (other steps, lr, model, ...) must not silently continue an older run.
    const std::string diff = config_differences(run_config_json(read_checkpoint_config(ck)), run_config_json(cfg));
    if (!diff.empty())
      fail("compare: ", ck, " was trained with another configuration than this grid gives the run (", diff,
           "): the grid file changed since; delete ", dir.string(), " to retrain this run, or restore the grid file");
    if (ck_step >= cfg.train.steps) return ck_step;  // trained already
    to.resume = ck;
  }
  const TrainSummary ts = data ? train(cfg, to, *data) : train(cfg, to);
  *interrupted = ts.interrupted;
  return ts.steps;
}

}  // namespace

void check_finished_run(const Grid& grid, const Run& run, const fs::path& runs_dir) {
  const fs::path dir = runs_dir / run.id;
  const std::string result_path = (dir / "result.json").string();
  if (!fs::exists(result_path)) return;
  json done;
  try {
    done = read_json_file(result_path, "compare: run record");
  } catch (const Error& e) {
    fail(e.what(), ": delete ", dir.string(), " to redo this run");
  }
  const std::string diff = done.contains("config") ? config_differences(done["config"], run_config_json(run.cfg)) : "no config recorded";
  if (!diff.empty())
    fail("compare: ", result_path, " is the result of another configuration than this grid gives the run (", diff,
         "): the grid file changed since; delete ", dir.string(), " to redo this run, or restore the grid file");
  const json grid_evals = evaluations_json(grid, run);
  if (!done.contains("evals") || done["evals"] != grid_evals)
    fail("compare: ", result_path, " was evaluated with other grid settings (analyze, lengths, tasks) than the grid file now gives (",
         done.contains("evals") ? done["evals"].dump() : std::string("none recorded"), " against ", grid_evals.dump(),
         "): delete ", dir.string(), " to redo this run, or restore the grid file");
}

CellRunner::CellRunner(const Grid& grid, const CompareOptions& opts, const std::vector<Run>& runs, const std::vector<size_t>& cells,
                       bool one_line, std::string process)
    : grid_(grid), opts_(opts), runs_(runs), runs_dir_(fs::path(opts.out) / "runs"), one_line_(one_line), process_(std::move(process)),
      tty_(::isatty(fileno(stdout))) {
  for (size_t i : cells) {
    const Run& r = runs_[i];
    if (fs::exists(runs_dir_ / r.id / "result.json")) continue;
    if (grid_.language_model) steps_left_[""] += r.cfg.train.steps;
    for (const auto& t : r.tasks) steps_left_[t.task->name] += t.cfg.train.steps;
  }
}

const json& CellRunner::data_of(const Config& c) {
  const std::string key = c.data.train + "\n" + c.data.val + "\n" + c.data.tokenizer;
  auto it = data_by_files_.find(key);
  if (it == data_by_files_.end()) it = data_by_files_.emplace(key, data_identity(c)).first;
  return it->second;
}

double CellRunner::grid_eta() {
  // Seconds per token trained: the language model's, or in a task-only grid a measured task's.
  double per_token = sec_per_step_.count("") ? sec_per_step_[""] / tokens_of(runs_[0].cfg) : NAN;
  for (const auto& t : runs_[0].tasks)
    if (!std::isfinite(per_token) && sec_per_step_.count(t.task->name)) per_token = sec_per_step_[t.task->name] / tokens_of(t.cfg);
  double s = steps_left_[""] > 0 ? steps_left_[""] * per_token * tokens_of(runs_[0].cfg) : 0.0;
  for (const auto& t : runs_[0].tasks) {
    const std::string& n = t.task->name;
    const double rate = sec_per_step_.count(n) ? sec_per_step_[n] : per_token * tokens_of(t.cfg);
    s += steps_left_[n] * rate;
  }
  return s;
}

CellEnd CellRunner::run(size_t i) {
  const Grid& grid = grid_;
  const CompareOptions& opts = opts_;
  const size_t N = runs_.size();
  const bool quiet = opts.quiet || one_line_;  // the progress display
  const Run& run = runs_[i];
  const fs::path dir = runs_dir_ / run.id;
  const std::string result_path = (dir / "result.json").string();
  if (fs::exists(result_path)) {  // checked against the grid before any cell ran (check_finished_run)
    if (!quiet) std::printf("[run %zu/%zu] %s: skipped (already done: %s)\n", i + 1, N, run.id.c_str(), result_path.c_str());
    std::fflush(stdout);
    return CellEnd::done;
  }
  if (opts.stop_after_runs >= 0 && finished_here_ >= opts.stop_after_runs) {
    std::printf("compare: stopped after %d run(s) (--stop-after-runs); continue with `%s`\n", finished_here_,
                resume_command(opts.grid_path, opts.out).c_str());
    return CellEnd::stopped;
  }
  const Config& cfg = run.cfg;
  const int steps = cfg.train.steps;
  fs::create_directories(dir);
  if (!fs::exists(dir / "provenance.json")) {
    const json data = grid.language_model ? data_of(cfg) : json(nullptr);  // a task-only grid reads no shard
    write_file_atomic((dir / "provenance.json").string(), json{{"data", data}, {"machine", machine_record()}}.dump(1) + "\n");
  }
  const std::string progress_path = (dir / "progress.json").string();

  // The curve of a run stopped mid-way, up to its latest checkpoint.
  json progress{{"train", json::array()}, {"val", json::array()}};
  if (grid.language_model) {
    int64_t ck_step = -1;
    const std::string ck = latest_checkpoint(dir, &ck_step);
    if (!ck.empty() && ck_step >= 0) {
      if (!opts.resume) fail("compare: ", dir.string(), " holds checkpoints: pass --resume");
      if (fs::exists(progress_path)) {
        const json old = read_json_file(progress_path, "compare: run progress");
        for (const auto& e : old["train"]) if (e[0].get<int64_t>() <= ck_step) progress["train"].push_back(e);
        for (const auto& e : old["val"]) if (e[0].get<int64_t>() <= ck_step) progress["val"].push_back(e);
      }
      if ((int64_t)progress["train"].size() != ck_step)
        fail("compare: ", progress_path, " has ", progress["train"].size(), " steps of curve, the checkpoint ", ck, " is at step ",
             ck_step, " (delete ", dir.string(), " to retrain this run)");
      steps_left_[""] -= ck_step;
      if (!quiet)
        std::printf("[run %zu/%zu] %s: %s %s (step %lld)\n", i + 1, N, run.id.c_str(), ck_step >= steps ? "trained already:" : "resuming from",
                    ck.c_str(), (long long)ck_step);
    }
  }

  // One progress callback for the language model and the tasks: `what` is "" or the task name.
  Timer print_timer;
  bool printed = false;
  auto progress_line = [&](const std::string& what, int64_t step, int total, double loss, double tps, double tokens_per_step_run) {
    auto& m = measured_[what];
    m.first += tokens_per_step_run / tps;
    m.second += 1;
    sec_per_step_[what] = m.first / m.second;
    --steps_left_[what];
    if (quiet) return;
    if (step == total || print_timer.seconds() >= (tty_ ? 0.5 : 5.0) || !printed) {
      print_timer = Timer();
      printed = true;
      const std::string label = what.empty() ? run.id : run.id + " " + what;
      std::printf("%s[run %zu/%zu] %s: step %lld/%d (%.0f%%) | loss %.4f | %.0f tok/s | run ETA %s | grid ETA %s%s", tty_ ? "\r\033[K" : "",
                  i + 1, N, label.c_str(), (long long)step, total, 100.0 * step / total, loss, tps,
                  fmt_eta((total - step) * sec_per_step_[what]).c_str(), fmt_eta(grid_eta()).c_str(), tty_ ? "" : "\n");
      std::fflush(stdout);
    }
  };

  auto status = [&](const std::string& what) {
    if (quiet) return;
    std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), what.c_str());
    std::fflush(stdout);
  };
  // An evaluation's progress with its ETA (a moving average over batches): one line redrawn on a
  // terminal, else a line every 10 s and at the end.
  auto eval_progress = [&]() -> ProgressFn {
    if (quiet) return {};
    auto eta = std::make_shared<EtaEstimate>();
    auto last_line = std::make_shared<double>(-1e9);
    return [&, eta, last_line](const std::string& stage, int64_t done, int64_t total, const char* unit) {
      const double left = eta->update(done, total), now = eta->elapsed();
      const bool end = done >= total;
      if (!tty_ && !end && now - *last_line < 10) return;
      *last_line = now;
      std::printf("%s[run %zu/%zu] %s: %s: %lld/%lld %s (%.0f%%), ETA %s%s", tty_ ? "\r" : "", i + 1, N, run.id.c_str(), stage.c_str(),
                  (long long)done, (long long)total, unit, 100.0 * double(done) / double(std::max<int64_t>(total, 1)),
                  fmt_eta(left).c_str(), tty_ && !end ? "   " : "\n");
      std::fflush(stdout);
    };
  };
  bool interrupted = false;
  json result;
  if (grid.language_model) {
  TrainOptions to;
  to.quiet = true;
  if (opts.stop_after_steps >= 0) to.stop_after = opts.stop_after_steps;
  const double tokens_per_step_run = tokens_of(cfg);
  const int ckpt_every = cfg.train.ckpt_every;
  to.on_step = [&](int64_t step, double loss, double tps) {
    // The trainer wrote step_(step−1) after the previous step: the older ones are not needed.
    if (ckpt_every > 0 && step > 1 && (step - 1) % ckpt_every == 0) prune_step_checkpoints(dir, step - 1);
    progress["train"].push_back(json::array({step, num_or_null(loss), tps}));
    write_file_atomic(progress_path, progress.dump());
    progress_line("", step, steps, loss, tps, tokens_per_step_run);
  };
  to.on_eval = [&](int64_t step, double vl, size_t) {
    if (step % std::max(1, cfg.train.eval_every) != 0 && step != steps) return;  // an interruption's extra evaluation
    auto& val = progress["val"];
    if (!val.empty() && element(val.back(), 0).get<int64_t>() == step) val.erase(val.size() - 1);
    val.push_back(json::array({step, num_or_null(vl)}));
  };
  if (!quiet) {
    std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), sets_text(run.v->sets).c_str());
    std::fflush(stdout);
  }
  const int64_t reached = train_in(cfg, dir, to, nullptr, opts.resume, &interrupted);
  write_file_atomic(progress_path, progress.dump());
  if (tty_ && !quiet && printed) std::printf("\n");
  if (reached < steps) {
    keep_newest_step_checkpoint(dir);
    std::printf("compare: %s stopped at step %lld of %d%s; continue with `%s`\n", run.id.c_str(), (long long)reached, steps,
                interrupted ? " (interrupted)" : "", resume_command(opts.grid_path, opts.out).c_str());
    return CellEnd::stopped;
  }

  // The final model on the whole validation shard, and the diagnostics.
  const std::string model_path = (dir / "model.safetensors").string();
  auto load_model = [&]() {
    auto m = std::make_unique<GPT<float>>(cfg);
    load_checkpoint(model_path, *m, nullptr, nullptr);
    return m;
  };
  Shard val = Shard::open(cfg.data.val);
  status("validation loss on the whole validation shard");
  auto model = load_model();
  model->plan(cfg.train.batch_size, cfg.model.seq_len);
  const EvalResult ev = evaluate(*model, val, 0);
  const size_t n_params = model->num_params();
  model.reset();
  result = json{{"variant", run.v->name}, {"seed", run.seed}, {"id", run.id}, {"sets", run.v->sets},
                {"steps", steps}, {"tokens", (long long)(tokens_per_step_run * steps)}, {"params", n_params},
                {"val_loss", num_or_null(ev.mean())}, {"val_tokens", ev.count}};
  if (run.budget_factor > 0) result["budget_factor"] = run.budget_factor;  // summaries keep it out of the variant's statistics
  double secs = 0;
  json train_curve = json::array();
  for (const auto& e : progress["train"]) {
    secs += tokens_per_step_run / e[2].get<double>();
    train_curve.push_back(json::array({e[0], e[1]}));
  }
  result["train_seconds"] = secs;
  result["tokens_per_s"] = secs > 0 ? tokens_per_step_run * steps / secs : 0.0;
  result["curve"] = {{"train", train_curve}, {"val", progress["val"]}};
  result["config"] = run_config_json(cfg);
  result["data"] = data_of(cfg);
  result["machine"] = machine_record();
  result["evals"] = evaluations_json(grid, run);
  result["analysis"] = nullptr;
  if (grid.analyze && run.budget_factor == 0) {
    status("analyze (" + std::to_string(grid.analyze_sequences) + " sequences)");
    auto am = load_model();
    const int T = cfg.model.seq_len;
    const auto seqs = draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 0);
    const auto corrupt = residual_patchable_streams(cfg) > 0
                             ? draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 1) : std::vector<int32_t>{};
    AnalyzeOptions ao;
    ao.bootstrap = 200;
    ao.rescue_by_depth = false;
    ao.progress = eval_progress();
    json a = analyze(*am, seqs, corrupt, grid.analyze_sequences, T, ao);
    a["checkpoint"] = model_path;
    a["data"] = cfg.data.val;
    write_file_atomic((dir / "analysis.json").string(), a.dump(1) + "\n");
    result["analysis"] = compact_analysis(a);
  }
  result["lengths"] = nullptr;
  if (!grid.lengths.empty() && run.budget_factor == 0) {
    status("validation loss at lengths " + grid.lengths + " × T_train (" + std::to_string(grid.length_tokens) + " tokens each)");
    LengthEvalOptions lo;
    lo.lengths = parse_lengths(grid.lengths, cfg.model.seq_len, grid.lengths_origin);
    lo.token_budget = (size_t)grid.length_tokens;
    lo.progress = eval_progress();
    const LengthEvalReport rep = evaluate_lengths([&] { return load_model(); }, val, lo);
    json lj = length_report_json(rep);
    write_file_atomic((dir / "lengths.json").string(), lj.dump(1) + "\n");
    result["lengths"] = compact_lengths(lj);
  }
  } else {
    // A task-only grid (docs/compare.md "Task-only grids"): the keys of a run, without a language model.
    result = json{{"variant", run.v->name}, {"seed", run.seed}, {"id", run.id}, {"sets", run.v->sets}, {"language_model", false},
                  {"steps", 0}, {"tokens", 0}, {"params", nullptr}, {"val_loss", nullptr}, {"val_tokens", 0}, {"train_seconds", 0},
                  {"tokens_per_s", nullptr}, {"curve", {{"train", json::array()}, {"val", json::array()}}},
                  {"config", run_config_json(cfg)}, {"data", nullptr}, {"machine", machine_record()},
                  {"evals", evaluations_json(grid, run)}, {"analysis", nullptr}, {"lengths", nullptr}};
  }
  result["tasks"] = json::object();
  for (const TaskRun& t : run.tasks) {
    const std::string& name = t.task->name;
    int64_t tck = -1;
    if (!latest_checkpoint(t.dir, &tck).empty() && tck > 0) steps_left_[name] -= std::min<int64_t>(tck, t.cfg.train.steps);
    status("task " + name + ": training (" + std::to_string(t.cfg.train.steps) + " steps, " + sets_text(t.task->sets) + ")");
    fs::create_directories(t.dir);
    tasks::TaskTrainData data(t.gen, t.cfg.train.batch_size, t.cfg.model.seq_len, t.cfg.train.seed);
    TrainOptions tto;
    tto.quiet = true;
    if (opts.stop_after_steps >= 0) tto.stop_after = opts.stop_after_steps;
    const double ttok = tokens_of(t.cfg);
    printed = false;
    // The task's training time: Σ of its optimizer steps' own times over every invocation (steps
    // repeated after a crash included: the CPU they cost), kept in train_time.json beside its
    // checkpoints at each checkpoint and at the end, so a resumed task reports all of it.
    // A task trained in part by a binary without this file has no known time: null, not a count.
    const fs::path time_path = t.dir / "train_time.json";
    const bool time_known = fs::exists(time_path) || tck <= 0;
    double task_seconds = 0;
    if (fs::exists(time_path)) {
      const json tt = read_json_file(time_path.string(), "compare: task training time");
      if (!tt.is_object() || !tt.contains("train_seconds") || !tt["train_seconds"].is_number() || !(tt["train_seconds"].get<double>() >= 0))
        fail("compare: ", time_path.string(), ": expected {\"train_seconds\": a number ≥ 0}; delete the file to restart the count from 0");
      task_seconds = tt["train_seconds"].get<double>();
    }
    auto save_task_seconds = [&] {
      if (time_known) write_file_atomic(time_path.string(), json{{"train_seconds", task_seconds}}.dump() + "\n");
    };
    const int tck_every = std::max(1, t.cfg.train.ckpt_every);
    tto.on_step = [&](int64_t step, double loss, double tps) {
      if (tps > 0) task_seconds += ttok / tps;
      if (step % tck_every == 0) save_task_seconds();
      progress_line(name, step, t.cfg.train.steps, loss, tps, ttok);
    };
    const int64_t treached = train_in(t.cfg, t.dir, tto, &data, opts.resume, &interrupted);
    save_task_seconds();
    if (tty_ && !quiet && printed) std::printf("\n");
    if (treached < t.cfg.train.steps) {
      keep_newest_step_checkpoint(t.dir);
      std::printf("compare: %s task %s stopped at step %lld of %d%s; continue with `%s`\n", run.id.c_str(), name.c_str(),
                  (long long)treached, t.cfg.train.steps, interrupted ? " (interrupted)" : "", resume_command(opts.grid_path, opts.out).c_str());
      return CellEnd::stopped;
    }
    prune_step_checkpoints(t.dir, -1);
    status("task " + name + ": evaluation at lengths " + t.task->lengths + " × " + std::to_string(t.cfg.model.seq_len) + " (" +
           std::to_string(t.task->samples) + " samples each)");
    const std::string tmodel = (t.dir / "model.safetensors").string();
    tasks::TaskEvalOptions eo;
    eo.lengths = parse_lengths(t.task->lengths, t.cfg.model.seq_len, t.task->lengths_origin);
    eo.samples = t.task->samples;
    eo.depths = t.task->depths;  // empty: the task's own
    eo.seed = 1;
    eo.progress = eval_progress();
    const auto rep = tasks::evaluate_task(
        *t.gen,
        [&] {
          auto m = std::make_unique<GPT<float>>(t.cfg);
          load_checkpoint(tmodel, *m, nullptr, nullptr);
          return m;
        },
        eo);
    // The weighted validation loss on the task's fixed validation batches (the same whichever
    // invocation trained the model).
    double task_val = NAN;
    {
      GPT<float> m(t.cfg);
      load_checkpoint(tmodel, m, nullptr, nullptr);
      m.plan(t.cfg.train.batch_size, t.cfg.model.seq_len);
      task_val = data.validate(m, t.cfg.train.eval_batches).mean();
    }
    json tj = tasks::task_report_json(rep);
    write_file_atomic((t.dir / "eval.json").string(), tj.dump(1) + "\n");
    json c = compact_task(tj);
    c["steps"] = t.cfg.train.steps;
    c["seq_len"] = t.cfg.model.seq_len;
    c["val_loss"] = num_or_null(task_val);
    c["train_seconds"] = time_known ? json(task_seconds) : json(nullptr);
    result["tasks"][name] = c;
  }
  write_file_atomic(result_path, result.dump(1) + "\n");
  prune_step_checkpoints(dir, -1);  // model.safetensors stays
  ++finished_here_;
  if (!grid.language_model) {
    if (!quiet) status("done (tasks only)");
    else if (one_line_ && !opts.quiet)
      std::printf("[run %zu/%zu] %s: done%s%s (tasks only)\n", i + 1, N, run.id.c_str(), process_.empty() ? "" : " on ", process_.c_str());
  } else if (!quiet) {
    std::printf("[run %zu/%zu] %s: done, val loss %.4f (whole shard, %lld tokens), %.0f tok/s, %lld parameters\n", i + 1, N, run.id.c_str(),
                result["val_loss"].is_number() ? result["val_loss"].get<double>() : NAN, result["val_tokens"].get<long long>(),
                result["tokens_per_s"].get<double>(), result["params"].get<long long>());
  } else if (one_line_ && !opts.quiet) {
    std::printf("[run %zu/%zu] %s: done%s%s, val loss %.4f, %.0f tok/s\n", i + 1, N, run.id.c_str(), process_.empty() ? "" : " on ",
                process_.c_str(), result["val_loss"].is_number() ? result["val_loss"].get<double>() : NAN,
                result["tokens_per_s"].get<double>());
  }
  std::fflush(stdout);
  return CellEnd::done;
}

}  // namespace attnlab::compare
