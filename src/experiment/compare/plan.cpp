#include "experiment/compare/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "experiment/long_context.h"
#include "experiment/tasks.h"
#include "model/gpt.h"

namespace attnlab::compare {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The assignments of one run: the preset, the grid's sets, the variant's sets, then `extra`.
std::vector<Assignment> run_assignments(const Grid& grid, const GridVariant& v) {
  std::vector<Assignment> as;
  if (!grid.preset.empty()) as = parse_config_text(preset_config_text(grid.preset), "preset " + grid.preset);
  for (const auto& s : grid.sets) as.push_back(parse_override(s));
  for (const auto& s : v.sets) {
    Assignment a = parse_override(s);
    a.origin = "variant " + v.name + ": " + s;
    as.push_back(a);
  }
  return as;
}


// Training keeps four float buffers of every parameter (weights, gradients, Adam's two moments):
// a cell whose model alone exceeds this machine's memory is refused before any cell trains (it
// failed when the grid reached it, after the cells before had trained).
void check_training_memory(const std::string& what, const Config& cfg) {
  const double bytes = 4.0 * sizeof(float) * double(GPT<float>::layout(cfg).total());
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (memory > 0 && bytes > memory)
    fail(what, ": training this model needs at least ", bytes / 1e9, " GB (weights, gradients and Adam's two moments of ",
         GPT<float>::layout(cfg).total(), " parameters), more than this machine's ", memory / 1e9, " GB");
}

// MQAR's shape in this cell, its defaults resolved at the task model's seq_len, checked with the
// grid's key names (Task::make names the CLI's options).
void check_mqar_shape(const GridTask& t, const tasks::TaskParams& tp, int seq_len, const std::string& variant) {
  const tasks::MqarShape m = tasks::mqar_shape(tp, seq_len);
  const std::string where = "grid [tasks.mqar] (variant " + variant + ")";
  auto given = [](int v, const char* fallback) { return v > 0 ? std::string() : std::string(" (the default, ") + fallback + ")"; };
  if (m.kv_pairs > m.keys)
    fail(where, ": kv_pairs = ", m.kv_pairs, given(t.kv_pairs, "min(keys, model.seq_len/8)"), " exceeds keys = ", m.keys,
         given(t.mqar_keys, "64"), ": each pair needs its own key");
  if (m.queries > m.kv_pairs)
    fail(where, ": queries = ", m.queries, given(t.queries, "kv_pairs"), " exceeds kv_pairs = ", m.kv_pairs,
         given(t.kv_pairs, "min(keys, model.seq_len/8)"), ": each query asks one pair");
  if (2 * m.kv_pairs + 2 * m.queries > seq_len)
    fail(where, ": ", m.kv_pairs, " pairs and ", m.queries, " queries take ", 2 * m.kv_pairs + 2 * m.queries,
         " tokens, more than the task model's model.seq_len = ", seq_len, ": give fewer kv_pairs or queries, or a longer "
         "model.seq_len in [tasks.mqar] set");
}

std::string quoted(const fs::path& p) {
  std::string q = "\"";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
  q += p.string();
  q += '"';
  return q;
}

}  // namespace

std::vector<Run> plan_runs(const Grid& grid, const fs::path& runs_dir) {
  std::vector<Run> runs;
  for (uint64_t seed : grid.seeds)
    for (const auto& v : grid.variants) {
      std::vector<Assignment> as = run_assignments(grid, v);
      const std::string id = v.name + "_s" + std::to_string(seed);
      const Config probe = resolve_config(as);
      const int steps = grid.steps > 0 ? grid.steps : probe.train.steps;
      int ckpt = grid.ckpt_every > 0 ? grid.ckpt_every : probe.train.ckpt_every;
      if (ckpt <= 0) ckpt = probe.train.eval_every > 0 ? probe.train.eval_every : std::max(1, steps / 4);
      as.push_back({"train.steps", std::to_string(steps), "compare"});
      as.push_back({"train.seed", std::to_string(seed), "compare"});
      as.push_back({"train.ckpt_every", std::to_string(ckpt), "compare"});
      as.push_back({"train.time_limit", "0", "compare"});
      as.push_back({"train.out_dir", quoted(runs_dir / id), "compare"});
      Run run{&v, seed, id, resolve_config(as), {}};
      if (grid.language_model) check_training_memory("variant " + v.name, run.cfg);  // a task-only grid trains no language model
      if (!grid.lengths.empty())  // a bad entry fails before any training
        check_inference_memory("grid lengths = \"" + grid.lengths + "\"", run.cfg, parse_lengths(grid.lengths, run.cfg.model.seq_len, grid.lengths_origin),
                                LengthEvalOptions{}.batch_size);
      for (const auto& t : grid.tasks) {
        std::vector<Assignment> ts = run_assignments(grid, v);
        // The task's steps before its sets, so that a set checked against train.steps (train.warmup)
        // meets the task's steps rather than the preset's; given again below, where it wins.
        ts.push_back({"train.steps", std::to_string(t.steps), "compare task"});
        for (const auto& s : t.sets) {
          Assignment a = parse_override(s);
          a.origin = "task " + t.name + ": " + s;
          ts.push_back(a);
        }
        const Config tprobe = resolve_config(ts);
        tasks::TaskParams tp;
        tp.name = t.name;
        tp.mqar_keys = t.mqar_keys;
        tp.kv_pairs = t.kv_pairs;
        tp.queries = t.queries;
        if (t.name == "mqar") check_mqar_shape(t, tp, tprobe.model.seq_len, v.name);
        auto gen = std::shared_ptr<const tasks::Task>(tasks::Task::make(tp, tprobe.model.seq_len));
        const fs::path tdir = runs_dir / id / ("task_" + t.name);
        ts.push_back({"model.vocab_size", std::to_string(gen->vocab_size()), "compare task"});
        ts.push_back({"train.steps", std::to_string(t.steps), "compare task"});
        ts.push_back({"train.seed", std::to_string(seed), "compare task"});
        ts.push_back({"train.ckpt_every", std::to_string(std::max(1, t.steps / 4)), "compare task"});
        ts.push_back({"train.eval_every", "0", "compare task"});  // validated once after training, below
        ts.push_back({"train.time_limit", "0", "compare task"});
        ts.push_back({"train.out_dir", quoted(tdir), "compare task"});
        TaskRun tr{&t, gen, resolve_config(ts), tdir};
        check_training_memory("grid task " + t.name + " (variant " + v.name + ")", tr.cfg);
        // What the task's training would find out after the run's language model trained: check now.
        if (tr.cfg.model.seq_len + 1 < gen->min_length())
          fail("grid task ", t.name, " (variant ", v.name, "): its samples need at least ", gen->min_length(),
               " tokens, so model.seq_len must be at least ", gen->min_length() - 1, " (it is ", tr.cfg.model.seq_len,
               "); set it in the task: [tasks.", t.name, "] set = [\"model.seq_len=", gen->min_length() - 1, "\"]");
        check_inference_memory("[tasks." + t.name + "] lengths = \"" + t.lengths + "\"", tr.cfg,
                                parse_lengths(t.lengths, tr.cfg.model.seq_len, t.lengths_origin), tasks::TaskEvalOptions{}.batch_size);
        run.tasks.push_back(std::move(tr));
      }
      runs.push_back(std::move(run));
    }
  // [budget]: the variant at k × its steps; the rest of its configuration as the grid gives it.
  if (!grid.budget.variant.empty()) {
    const GridVariant* v = nullptr;
    for (const auto& x : grid.variants)
      if (x.name == grid.budget.variant) v = &x;
    for (uint64_t seed : grid.seeds)
      for (double factor : grid.budget.factors) {
        std::vector<Assignment> as = run_assignments(grid, *v);
        const Config probe = resolve_config(as);
        const int base_steps = grid.steps > 0 ? grid.steps : probe.train.steps;
        check_budget_steps(grid.budget, base_steps, "grid [budget] of variant " + v->name);
        const int steps = (int)std::llround(factor * base_steps);
        const std::string id = budget_run_id(v->name, factor, seed);
        int ckpt = grid.ckpt_every > 0 ? grid.ckpt_every : probe.train.ckpt_every;
        if (ckpt <= 0) ckpt = probe.train.eval_every > 0 ? probe.train.eval_every : std::max(1, steps / 4);
        as.push_back({"train.steps", std::to_string(steps), "compare budget"});
        as.push_back({"train.seed", std::to_string(seed), "compare budget"});
        as.push_back({"train.ckpt_every", std::to_string(ckpt), "compare budget"});
        as.push_back({"train.time_limit", "0", "compare budget"});
        as.push_back({"train.out_dir", quoted(runs_dir / id), "compare budget"});
        Run run{v, seed, id, resolve_config(as), {}, factor};
        runs.push_back(std::move(run));
      }
  }
  return runs;
}

json run_config_json(const Config& c) {
  json j = c.to_json();  // flat: {"model.d_model": 256, ...}
  j.erase("train.out_dir");
  j.erase("train.time_limit");
  return j;
}

std::string config_differences(const json& a, const json& b) {
  if (a == b) return "";
  // A key attnlab gained after `a` was recorded (train.precision, ...) is no difference when `b`
  // keeps it at its default: the old run trained with what that default does.
  const json defaults = run_config_json(Config{});
  std::set<std::string> keys;
  for (const auto& [k, v] : b.items())
    if (a.contains(k) ? a[k] != v : !(defaults.contains(k) && defaults[k] == v)) keys.insert(k);
  for (const auto& [k, v] : a.items())
    if (!b.contains(k)) keys.insert(k);
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

json primary_json(const Grid& grid) {
  json comparisons = json::array();
  for (const auto& c : grid.primary) {
    const char* direction = c.alternative == stats::Alternative::less ? "<" : c.alternative == stats::Alternative::greater ? ">" : "vs";
    comparisons.push_back({{"text", comparison_text(c)}, {"a", c.a}, {"b", c.b}, {"direction", direction},
                           {"effect", c.effect > 0 ? json(c.effect) : json(nullptr)}});
  }
  return {{"comparisons", comparisons}, {"effect", grid.primary_effect > 0 ? json(grid.primary_effect) : json(nullptr)},
          {"alpha", grid.primary_alpha}, {"power", grid.primary_power}};
}

json tasks_json(const Grid& grid) {
  json tasks = json::array();
  for (const auto& t : grid.tasks) {
    json j{{"name", t.name}, {"sets", t.sets}, {"steps", t.steps}, {"lengths", t.lengths}, {"samples", t.samples}};
    // Only where the grid gives them: the records of earlier grids stay equal (resume compares them).
    if (t.mqar_keys > 0) j["keys"] = t.mqar_keys;
    if (t.kv_pairs > 0) j["kv_pairs"] = t.kv_pairs;
    if (t.queries > 0) j["queries"] = t.queries;
    if (!t.depths.empty()) j["depths"] = t.depths;
    tasks.push_back(j);
  }
  return tasks;
}

json evaluations_json(const Grid& grid, const Run& run) {
  if (run.budget_factor > 0) return {{"budget", true}};
  return evaluations_json(grid);
}

json evaluations_json(const Grid& grid) {
  json e{{"analyze", grid.analyze}, {"analyze_sequences", grid.analyze ? grid.analyze_sequences : 0},
         {"lengths", grid.lengths}, {"length_tokens", grid.lengths.empty() ? 0 : grid.length_tokens}, {"tasks", tasks_json(grid)}};
  // Only in a task-only grid: the runs of other grids keep the record they were made with.
  if (!grid.language_model) e["language_model"] = false;
  return e;
}

}  // namespace attnlab::compare
