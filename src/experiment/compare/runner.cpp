// Running an `attnlab compare` grid (docs/compare.md "Running, stopping, resuming"): each planned
// run trained through the library's train() and its callbacks (resumed from its latest checkpoint,
// refused when the grid changed since), then evaluated (the whole validation shard, analyze, the
// length sweep, the tasks), its result.json written last; then the grid's documents.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/stop_signals.h"
#include "core/timer.h"
#include "data/files.h"
#include "data/shard.h"
#include "experiment/analyze.h"
#include "experiment/compare.h"
#include "experiment/compare/checkpoints.h"
#include "experiment/compare/common.h"
#include "experiment/compare/evaluations.h"
#include "experiment/compare/plan.h"
#include "experiment/compare/provenance.h"
#include "experiment/long_context.h"
#include "experiment/report.h"
#include "experiment/tasks.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/version.h"
#include "checkpoint/checkpoint.h"
#include "train/trainer.h"

namespace attnlab {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace compare;

namespace {

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

// A word as the shell reads it back: as is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") == std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command that continues this grid, to paste: the grid's own path when it came from a file.
std::string resume_command(const CompareOptions& opts) {
  return "attnlab compare " + (opts.grid_path.empty() ? std::string("GRID") : shell_word(opts.grid_path)) + " --out " +
         shell_word(opts.out) + " --resume";
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  data_files::write_file_atomically(path, {content}, "compare output");
}

namespace {
bool run_compare_steps(const Grid& grid, const CompareOptions& opts);
}

// Ctrl-C / SIGTERM for the whole grid (core/stop_signals.h): training stops with a checkpoint (the
// trainer's own scope nests in this one), an evaluation at its next batch; either way the grid
// exits with the command that continues it. A run's evaluation starts again on --resume.
bool run_compare(const Grid& grid, const CompareOptions& opts) {
  StopSignals signals;
  try {
    return run_compare_steps(grid, opts);
  } catch (const Interrupted& e) {
    std::printf("\ncompare: %s; the run's training is kept and its evaluation starts again on resume: continue with `%s`\n",
                e.what(), resume_command(opts).c_str());
    std::fflush(stdout);
    return false;
  }
}

namespace {
bool run_compare_steps(const Grid& grid, const CompareOptions& opts) {
  const fs::path out(opts.out);
  const fs::path runs_dir = out / "runs";
  if (opts.summarize_only) {
    if (!fs::is_directory(runs_dir)) fail("compare --summarize: ", runs_dir.string(), " does not exist (no runs to summarize)");
  } else if (!opts.resume && fs::exists(runs_dir) && !fs::is_empty(runs_dir)) {
    fail("compare: ", runs_dir.string(), " already holds runs: pass --resume to continue that grid, or choose another --out");
  }
  fs::create_directories(runs_dir);
  // One training compare per output directory (each run's trainer also locks its own run
  // directory). A summary only reads finished runs and renames its documents into place, so it
  // may run beside a compare that is still training.
  DirLock lock;
  if (!opts.summarize_only) lock = DirLock::acquire(out.string(), "compare --out", "attnlab compare");

  std::vector<Run> runs = plan_runs(grid, runs_dir);
  const size_t tokens_per_step = (size_t)runs[0].cfg.train.batch_size * runs[0].cfg.model.seq_len * runs[0].cfg.train.grad_accum;
  for (const auto& r : runs) {
    if (r.budget_factor > 0) continue;  // a [budget] run trains other tokens by design
    const size_t t = (size_t)r.cfg.train.batch_size * r.cfg.model.seq_len * r.cfg.train.grad_accum;
    if (t != tokens_per_step || r.cfg.train.steps != runs[0].cfg.train.steps)
      std::printf("compare: warning: %s trains %zu tokens, %s %zu: not equal tokens\n", r.id.c_str(), t * r.cfg.train.steps,
                  runs[0].id.c_str(), tokens_per_step * runs[0].cfg.train.steps);
  }

  const size_t N = runs.size();
  // The data every run used (docs/compare.md, "Provenance"): a run finished or started on other data
  // than the grid names now (a re-prepared data directory) is refused here, all of them named,
  // before anything trains; nothing is averaged across data.
  std::map<std::string, json> data_by_files;
  auto data_of = [&](const Config& c) -> const json& {
    const std::string key = c.data.train + "\n" + c.data.val + "\n" + c.data.tokenizer;
    auto it = data_by_files.find(key);
    if (it == data_by_files.end()) it = data_by_files.emplace(key, data_identity(c)).first;
    return it->second;
  };
  {
    std::string mixed;
    for (const auto& r : runs)
      for (const char* record : {"result.json", "provenance.json"}) {
        const fs::path path = runs_dir / r.id / record;
        if (!fs::exists(path)) continue;
        json stored;
        try {
          stored = read_json_file(path.string(), "compare: run record");
        } catch (const Error& e) {
          fail(e.what(), ": delete ", (runs_dir / r.id).string(), " to redo this run");
        }
        const std::string d = data_differences(stored, data_of(r.cfg));
        if (!d.empty()) mixed += "\n  " + path.string() + ": " + d;
        break;  // a finished run's result.json is its record
      }
    if (!mixed.empty())
      fail("compare: runs in ", opts.out, " were made on other data than this grid's data now (", runs[0].cfg.data.dir,
           "; the directory was prepared again since?):", mixed,
           "\ndelete those run directories to redo them on this data, restore the data they used, or use another --out");
  }
  // The ETA counts training steps still to do, at the rate measured in this invocation per kind
  // (the language model and each task; a task not yet measured is assumed to cost what the
  // language model costs per token). Evaluations are not counted.
  auto tokens_of = [](const Config& c) { return double(c.train.batch_size) * c.model.seq_len * c.train.grad_accum; };
  std::map<std::string, int64_t> steps_left;   // "" = the language model, else the task's name
  std::map<std::string, double> sec_per_step;  // measured
  std::map<std::string, std::pair<double, int64_t>> measured;
  for (const auto& r : runs) {
    if (fs::exists(runs_dir / r.id / "result.json")) continue;
    steps_left[""] += r.cfg.train.steps;
    for (const auto& t : r.tasks) steps_left[t.task->name] += t.cfg.train.steps;
  }
  auto grid_eta = [&]() {
    const double lm = sec_per_step.count("") ? sec_per_step[""] : NAN;
    double s = steps_left[""] * lm;
    for (const auto& t : runs[0].tasks) {
      const std::string& n = t.task->name;
      const double rate = sec_per_step.count(n) ? sec_per_step[n] : lm * tokens_of(t.cfg) / tokens_of(runs[0].cfg);
      s += steps_left[n] * rate;
    }
    return s;
  };
  int finished_here = 0;
  const bool tty = ::isatty(fileno(stdout));

  for (size_t i = 0; i < N; ++i) {
    const Run& run = runs[i];
    const fs::path dir = runs_dir / run.id;
    const std::string result_path = (dir / "result.json").string();
    const json grid_evals = evaluations_json(grid, run);
    if (fs::exists(result_path)) {
      const json done = read_json_file(result_path, "compare: run record");
      const std::string diff = done.contains("config") ? config_differences(done["config"], run_config_json(run.cfg)) : "no config recorded";
      if (!diff.empty())
        fail("compare: ", result_path, " is the result of another configuration than this grid gives the run (", diff,
             "): the grid file changed since; delete ", dir.string(), " to redo this run, or restore the grid file");
      if (!done.contains("evals") || done["evals"] != grid_evals)
        fail("compare: ", result_path, " was evaluated with other grid settings (analyze, lengths, tasks) than the grid file now gives (",
             done.contains("evals") ? done["evals"].dump() : std::string("none recorded"), " against ", grid_evals.dump(),
             "): delete ", dir.string(), " to redo this run, or restore the grid file");
      if (!opts.quiet && !opts.summarize_only) std::printf("[run %zu/%zu] %s: skipped (already done: %s)\n", i + 1, N, run.id.c_str(), result_path.c_str());
      std::fflush(stdout);
      continue;
    }
    if (opts.summarize_only) continue;  // not finished: left out of the summary
    if (opts.stop_after_runs >= 0 && finished_here >= opts.stop_after_runs) {
      std::printf("compare: stopped after %d run(s) (--stop-after-runs); continue with `%s`\n", finished_here,
                  resume_command(opts).c_str());
      return false;
    }
    const Config& cfg = run.cfg;
    const int steps = cfg.train.steps;
    fs::create_directories(dir);
    if (!fs::exists(dir / "provenance.json"))
      write_file_atomic((dir / "provenance.json").string(), json{{"data", data_of(cfg)}, {"machine", machine_record()}}.dump(1) + "\n");
    const std::string progress_path = (dir / "progress.json").string();

    // The curve of a run stopped mid-way, up to its latest checkpoint.
    json progress{{"train", json::array()}, {"val", json::array()}};
    {
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
        steps_left[""] -= ck_step;
        if (!opts.quiet)
          std::printf("[run %zu/%zu] %s: %s %s (step %lld)\n", i + 1, N, run.id.c_str(), ck_step >= steps ? "trained already:" : "resuming from",
                      ck.c_str(), (long long)ck_step);
      }
    }

    // One progress callback for the language model and the tasks: `what` is "" or the task name.
    Timer print_timer;
    bool printed = false;
    auto progress_line = [&](const std::string& what, int64_t step, int total, double loss, double tps, double tokens_per_step_run) {
      auto& m = measured[what];
      m.first += tokens_per_step_run / tps;
      m.second += 1;
      sec_per_step[what] = m.first / m.second;
      --steps_left[what];
      if (opts.quiet) return;
      if (step == total || print_timer.seconds() >= (tty ? 0.5 : 5.0) || !printed) {
        print_timer = Timer();
        printed = true;
        const std::string label = what.empty() ? run.id : run.id + " " + what;
        std::printf("%s[run %zu/%zu] %s: step %lld/%d (%.0f%%) | loss %.4f | %.0f tok/s | run ETA %s | grid ETA %s%s", tty ? "\r\033[K" : "",
                    i + 1, N, label.c_str(), (long long)step, total, 100.0 * step / total, loss, tps,
                    fmt_eta((total - step) * sec_per_step[what]).c_str(), fmt_eta(grid_eta()).c_str(), tty ? "" : "\n");
        std::fflush(stdout);
      }
    };

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
      if (!val.empty() && val.back()[0].get<int64_t>() == step) val.erase(val.size() - 1);
      val.push_back(json::array({step, num_or_null(vl)}));
    };
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), sets_text(run.v->sets).c_str());
      std::fflush(stdout);
    }
    bool interrupted = false;
    const int64_t reached = train_in(cfg, dir, to, nullptr, opts.resume, &interrupted);
    write_file_atomic(progress_path, progress.dump());
    if (tty && !opts.quiet && printed) std::printf("\n");
    if (reached < steps) {
      keep_newest_step_checkpoint(dir);
      std::printf("compare: %s stopped at step %lld of %d%s; continue with `%s`\n", run.id.c_str(),
                  (long long)reached, steps, interrupted ? " (interrupted)" : "", resume_command(opts).c_str());
      return false;
    }

    // The final model on the whole validation shard, and the diagnostics.
    const std::string model_path = (dir / "model.safetensors").string();
    auto load_model = [&]() {
      auto m = std::make_unique<GPT<float>>(cfg);
      load_checkpoint(model_path, *m, nullptr, nullptr);
      return m;
    };
    auto status = [&](const std::string& what) {
      if (opts.quiet) return;
      std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), what.c_str());
      std::fflush(stdout);
    };
    // An evaluation's progress with its ETA (a moving average over batches): one line redrawn on a
    // terminal, else a line every 10 s and at the end.
    auto eval_progress = [&]() -> ProgressFn {
      if (opts.quiet) return {};
      auto eta = std::make_shared<EtaEstimate>();
      auto last_line = std::make_shared<double>(-1e9);
      return [&, eta, last_line](const std::string& stage, int64_t done, int64_t total, const char* unit) {
        const double left = eta->update(done, total), now = eta->elapsed();
        const bool end = done >= total;
        if (!tty && !end && now - *last_line < 10) return;
        *last_line = now;
        std::printf("%s[run %zu/%zu] %s: %s: %lld/%lld %s (%.0f%%), ETA %s%s", tty ? "\r" : "", i + 1, N, run.id.c_str(),
                    stage.c_str(), (long long)done, (long long)total, unit, 100.0 * double(done) / double(std::max<int64_t>(total, 1)),
                    fmt_eta(left).c_str(), tty && !end ? "   " : "\n");
        std::fflush(stdout);
      };
    };
    Shard val = Shard::open(cfg.data.val);
    status("validation loss on the whole validation shard");
    auto model = load_model();
    model->plan(cfg.train.batch_size, cfg.model.seq_len);
    const EvalResult ev = evaluate(*model, val, 0);
    const size_t n_params = model->num_params();
    model.reset();
    json result{{"variant", run.v->name}, {"seed", run.seed}, {"id", run.id}, {"sets", run.v->sets},
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
    result["evals"] = grid_evals;
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
    result["tasks"] = json::object();
    for (const TaskRun& t : run.tasks) {
      const std::string& name = t.task->name;
      int64_t tck = -1;
      if (!latest_checkpoint(t.dir, &tck).empty() && tck > 0) steps_left[name] -= std::min<int64_t>(tck, t.cfg.train.steps);
      status("task " + name + ": training (" + std::to_string(t.cfg.train.steps) + " steps, " + sets_text(t.task->sets) + ")");
      fs::create_directories(t.dir);
      tasks::TaskTrainData data(t.gen, t.cfg.train.batch_size, t.cfg.model.seq_len, t.cfg.train.seed);
      TrainOptions tto;
      tto.quiet = true;
      if (opts.stop_after_steps >= 0) tto.stop_after = opts.stop_after_steps;
      const double ttok = tokens_of(t.cfg);
      printed = false;
      tto.on_step = [&](int64_t step, double loss, double tps) { progress_line(name, step, t.cfg.train.steps, loss, tps, ttok); };
      const int64_t treached = train_in(t.cfg, t.dir, tto, &data, opts.resume, &interrupted);
      if (tty && !opts.quiet && printed) std::printf("\n");
      if (treached < t.cfg.train.steps) {
        keep_newest_step_checkpoint(t.dir);
        std::printf("compare: %s task %s stopped at step %lld of %d%s; continue with `%s`\n", run.id.c_str(),
                    name.c_str(), (long long)treached, t.cfg.train.steps, interrupted ? " (interrupted)" : "",
                    resume_command(opts).c_str());
        return false;
      }
      prune_step_checkpoints(t.dir, -1);
      status("task " + name + ": evaluation at lengths " + t.task->lengths + " × " + std::to_string(t.cfg.model.seq_len) + " (" +
             std::to_string(t.task->samples) + " samples each)");
      const std::string tmodel = (t.dir / "model.safetensors").string();
      tasks::TaskEvalOptions eo;
      eo.lengths = parse_lengths(t.task->lengths, t.cfg.model.seq_len, t.task->lengths_origin);
      eo.samples = t.task->samples;
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
      result["tasks"][name] = c;
    }
    write_file_atomic(result_path, result.dump(1) + "\n");
    prune_step_checkpoints(dir, -1);  // model.safetensors stays
    ++finished_here;
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: done, val loss %.4f (whole shard, %zu tokens), %.0f tok/s, %zu parameters\n", i + 1, N, run.id.c_str(),
                  ev.mean(), ev.count, result["tokens_per_s"].get<double>(), n_params);
      std::fflush(stdout);
    }
  }

  // Every run is done: the grid's documents.
  json grid_j{{"name", grid.name}, {"preset", grid.preset}, {"sets", grid.sets}, {"steps", runs[0].cfg.train.steps},
              {"seeds", grid.seeds}, {"baseline", grid.baseline}, {"analyze", grid.analyze},
              {"lengths", grid.lengths.empty() ? json(nullptr) : json(grid.lengths)}, {"length_tokens", grid.length_tokens}};
  grid_j["tasks"] = tasks_json(grid);
  // The keys of [primary] and [budget] only where the grid has them: the documents of other grids stay as they were.
  if (!grid.primary.empty()) grid_j["primary"] = primary_json(grid);
  if (!grid.budget.variant.empty()) grid_j["budget"] = {{"variant", grid.budget.variant}, {"factors", grid.budget.factors}};
  json variants = json::array();
  for (const auto& v : grid.variants) variants.push_back({{"name", v.name}, {"sets", v.sets}});
  grid_j["variants"] = variants;
  json results{{"schema", kCompareSchema}, {"version", kCompareVersion}, {"attnlab_version", version()}, {"grid", grid_j},
               {"tokens_per_step", tokens_per_step}, {"tokens_per_run", (long long)tokens_per_step * runs[0].cfg.train.steps}};
  json all = json::array();
  long long val_tokens = 0;
  size_t done = 0;
  for (const auto& r : runs) done += fs::exists(runs_dir / r.id / "result.json");
  if (done < N) {
    results["partial"] = {{"runs_done", done}, {"runs_total", N}};
    if (done == 0) fail("compare --summarize: no run of ", opts.out, " has finished yet");
  }
  for (const auto& r : runs) {
    if (!fs::exists(runs_dir / r.id / "result.json")) continue;  // --summarize of an unfinished grid
    json one = read_json_file((runs_dir / r.id / "result.json").string(), "compare: run record");
    val_tokens = one["val_tokens"].get<long long>();
    all.push_back(one);
  }
  results["val_tokens"] = val_tokens;
  results["runs"] = all;
  // Runs of one variant computed on different machines: the same data, other rounding (warned, kept).
  for (const auto& v : grid.variants) {
    std::map<std::string, std::string> machines;  // key -> a run made there
    for (const auto& one : all)
      if (one.value("variant", std::string()) == v.name)
        machines.emplace(machine_key(one.contains("machine") ? one["machine"] : json(nullptr)), one.value("id", std::string()));
    if (machines.size() > 1) {
      std::string list;
      for (const auto& [key, id] : machines) list += "\n  " + id + " (and others alike): " + key;
      std::printf("compare: warning: the runs of variant %s were computed on %zu different machines or builds:%s\n", v.name.c_str(),
                  machines.size(), list.c_str());
    }
  }
  summarize_results(results);
  write_file_atomic((out / "results.json").string(), results.dump(1) + "\n");
  write_file_atomic((out / "results.md").string(), results_markdown(results));
  if (opts.report) write_file_atomic((out / "report.html").string(), render_report_html(results));
  if (!opts.quiet) {
    std::printf("\n%s", results_markdown(results).c_str());
    if (grid.primary.empty())
      std::printf("\nhint: the grid names no primary comparisons; a [primary] table (comparisons = [\"A < B\", ...]) adds their "
                  "Holm-adjusted tests, the exact sign-flip p and the seeds needed for 80%% power (docs/compare.md)\n");
    std::printf("\nwrote %s, %s%s\n", (out / "results.json").string().c_str(), (out / "results.md").string().c_str(),
                opts.report ? (", " + (out / "report.html").string()).c_str() : "");
  }
  return true;
}

}  // namespace

}  // namespace attnlab
