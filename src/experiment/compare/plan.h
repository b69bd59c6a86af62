// The plan of an `attnlab compare` grid: every run (variant × seed) and each of its task models with
// the configuration it trains with (docs/compare.md "The grid file": defaults < preset < base set <
// variant set < compare's own keys), resolved before any training so that a bad cell fails first;
// and what a finished run records of its configuration and evaluations, to refuse mixing runs of an
// edited grid on --resume.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "experiment/compare.h"
#include "experiment/tasks.h"
#include "model/config.h"

namespace attnlab::compare {

struct TaskRun {
  const GridTask* task;
  std::shared_ptr<const tasks::Task> gen;
  Config cfg;
  std::filesystem::path dir;
};

struct Run {
  const GridVariant* v;
  uint64_t seed;
  std::string id;  // <variant>_s<seed> (a [budget] run: <variant>@<k>x_s<seed>): the run's directory under runs_dir
  Config cfg;
  std::vector<TaskRun> tasks;
  double budget_factor = 0;  // a [budget] run: k (its steps are k × the grid's); 0 for the grid's own runs
};

// Seed-major order (every variant with the first seed, then every variant with the next): a grid
// stopped part-way has whole rounds of seeds to compare. Then the [budget] runs, seed-major too:
// the variant at each factor k, evaluated on the whole validation shard only (no analyze, length
// sweep or tasks). The runs point into `grid`.
std::vector<Run> plan_runs(const Grid& grid, const std::filesystem::path& runs_dir);

// A run's configuration as compared between invocations: everything but where it writes and its
// wall-clock limit.
nlohmann::json run_config_json(const Config& c);
// "" when equal, else the differing keys ("train.steps, model.d_model"). A key `a` lacks (recorded
// before attnlab had it) counts only when `b` gives it another value than the default.
std::string config_differences(const nlohmann::json& a, const nlohmann::json& b);

// The grid's [primary] table as results.json's "grid" records it (docs/compare.md): {comparisons[]:
// {text, a, b, direction ("<", ">", "vs"), effect (null: none of its own)}, effect, alpha, power}.
nlohmann::json primary_json(const Grid& grid);

// The grid's [tasks.NAME] as results.json's "grid" and each result.json's "evals" record them.
nlohmann::json tasks_json(const Grid& grid);
// What a run's evaluations were (checked when a finished run is skipped): a grid whose analyze,
// lengths or tasks changed must not mix runs evaluated differently. A [budget] run's are none of
// these (budget = true: the whole validation shard only).
nlohmann::json evaluations_json(const Grid& grid);
nlohmann::json evaluations_json(const Grid& grid, const Run& run);

// [budget] factors whose k × steps are under one step, or the same steps as another factor or as
// the grid's own runs, are an error at `where`.
void check_budget_steps(const GridBudget& budget, int steps, const std::string& where);

}  // namespace attnlab::compare
