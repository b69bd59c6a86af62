// `attnlab compare`: a grid of variants (named groups of --set overrides) × seeds trained at equal
// tokens through the library's train() and its event callbacks, each run's final validation loss on
// the whole validation shard, tokens/s, parameters and optionally analyze(); per-variant mean ± sd
// and Welch's t-test against the baseline. Schema of the grid file and of results.json:
// docs/compare.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "experiment/stats.h"

namespace attnlab {

inline constexpr const char* kCompareSchema = "attnlab.compare";
inline constexpr int kCompareVersion = 1;

struct GridVariant {
  std::string name;
  std::vector<std::string> sets;  // key=value overrides, applied after the grid's base sets
};

// A synthetic task every run of the grid also trains on and is evaluated on (src/experiment/tasks.h): the
// run's model settings (preset, grid sets, variant sets) with the task's own sets on top and the
// task's vocabulary; trained for `steps` steps with the run's seed, then evaluated at `lengths`.
struct GridTask {
  std::string name;                    // passkey | needle | mqar
  std::vector<std::string> sets;       // applied after the variant's sets (e.g. model.seq_len=128)
  int steps = 200;
  std::string lengths = "1,2,4";       // parse_lengths of the task model's seq_len
  std::string lengths_origin = "[tasks] lengths";  // where it was set ("grid.toml:12"), for errors
  int samples = 64;                    // per length (and depth, for the needle)
  // mqar's shape as `attnlab task mqar --keys --kv-pairs --queries` takes it (0: the task's default).
  int mqar_keys = 0, kv_pairs = 0, queries = 0;
  std::vector<double> depths;          // needle: the depths evaluated (empty: the task's 0.1, 0.3, 0.5, 0.7, 0.9)
};

// A primary comparison of the grid's [primary] table (docs/compare.md "Primary comparisons"), written
// "A < B" (A's loss is lower: the one-sided alternative mean(loss_A − loss_B) < 0), "A > B", or
// "A vs B" (two-sided), optionally followed by "by EFFECT" (the loss difference to plan seeds for).
struct GridComparison {
  std::string a, b;
  stats::Alternative alternative = stats::Alternative::two_sided;
  double effect = 0;  // > 0: this comparison's planning effect; 0: [primary] effect, else the observed difference
};

// The grid's [budget] table (docs/compare.md "Gains in compute"): runs of one variant at k × the
// grid's steps (every seed), to express the other variants' losses as "the variant at k× the tokens".
struct GridBudget {
  std::string variant;          // "" when the grid has no [budget] table
  std::vector<double> factors;  // the k ≠ 1 in file order (k = 1 is the grid's own runs)
};

struct Grid {
  std::string name = "grid";
  std::string preset;                  // built-in preset applied first (may be empty)
  std::vector<std::string> sets;       // base overrides for every run
  std::vector<GridVariant> variants;   // in file order
  std::vector<uint64_t> seeds{1337};   // train.seed of each run (init and data order)
  std::string baseline;                // a variant name (default: the first variant)
  int steps = 0;                       // train.steps of every run (0: the resolved config's)
  int ckpt_every = 0;                  // checkpoint interval (0: train.eval_every, else steps/4)
  bool analyze = false;                // run analyze() on every final model
  int analyze_sequences = 16;
  std::string lengths;                 // length-extrapolation sweep of every final model ("" = none), e.g. "1,2,4"
  std::string lengths_origin = "grid lengths";  // where it was set ("grid.toml:9"), for errors
  int length_tokens = 32768;           // tokens scored per length (the same stream prefix at every length)
  std::vector<GridTask> tasks;         // in file order
  std::vector<GridComparison> primary; // [primary] comparisons, in file order (empty: none)
  double primary_effect = 0;           // [primary] effect: the planning effect of comparisons without their own (0: observed)
  double primary_alpha = 0.05;         // [primary] alpha: level of the tests and of the seed plan
  double primary_power = 0.8;          // [primary] power: the seed plan's target power
  GridBudget budget;
  // false: a task-only grid (docs/compare.md "Task-only grids"): each cell trains and evaluates its
  // [tasks.NAME] models and no language model.
  bool language_model = true;
};

// "A < B", "A > B", "A vs B", with " by EFFECT" when the comparison has its own effect.
std::string comparison_text(const GridComparison& c);
// The [budget] run id of a variant at factor k: "<variant>@<k>x_s<seed>" ('@' is not allowed in
// variant names, so it cannot collide with a variant's run).
std::string budget_run_id(const std::string& variant, double factor, uint64_t seed);

// Parses a grid file (the TOML subset of configs, docs/compare.md); errors name the file and line.
Grid parse_grid_file(const std::string& path);
Grid parse_grid_text(const std::string& text, const std::string& origin);

struct CompareOptions {
  std::string out = "runs/compare";
  bool resume = false;          // continue a grid in `out`: finished runs are skipped
  int stop_after_runs = -1;     // stop after this many runs finished in this invocation (tests)
  int stop_after_steps = -1;    // stop the next unfinished run after this many steps in this invocation (tests)
  bool quiet = false;           // no progress display
  bool report = true;           // write report.html
  bool summarize_only = false;  // train nothing: write the documents from the runs finished so far (marked partial)
  // One cell of a batch array (docs/distributed.md): run the plan's runs i with i % cell_count ==
  // cell_index and write no documents (cell_count 0: every run).
  int cell_index = 0, cell_count = 0;
  bool merge = false;           // train nothing: write the documents once every run has finished (an error naming the missing ones)
  std::string grid_path;        // the grid file, for the resume hint ("" when the grid came as text: GRID)
};

// Runs (or resumes) the grid: in one process, or shared by the processes of an mpirun job
// (core/distributed.h; rank 0 writes the documents), or one cell of an array. Returns true when
// every run is done (results.json, results.md and report.html written; a cell: its runs; a rank
// other than 0: the runs it was handed), false when stopped early (by a signal or a stop_after_*
// option).
bool run_compare(const Grid& grid, const CompareOptions& opts);

// The per-variant summary and baseline comparison of a results document's "runs" (used by
// run_compare and exposed for tests): fills results["summary"].
void summarize_results(nlohmann::json& results);
// results.md from a results document.
std::string results_markdown(const nlohmann::json& results);

// Writes `content` to `path` through a temporary file of this writer's own and a rename
// (data_files::write_file_atomically: an interrupted write never leaves a half-written file).
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace attnlab
