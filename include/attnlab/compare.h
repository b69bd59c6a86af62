// attnlab public API: a comparison grid (variants × seeds at equal tokens; format: docs/compare.md)
// trained into an output directory (results.json, results.md, report.html there, resumable), and its
// summary as plain structs.
// Thread-safety: run one grid per output directory at a time; distinct grids may run concurrently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/error.h"

namespace attnlab::api {

struct CompareParams {
  std::string out_dir = "runs/compare";
  bool resume = false;   // continue the grid in out_dir: finished runs are skipped
  bool quiet = true;     // no progress display
  bool report = true;    // write report.html
  // Train nothing: write results.json, results.md and report.html from the runs finished so far
  // (marked partial); may run beside a compare that is still training.
  bool summarize_only = false;
  int stop_after_runs = -1;   // stop after this many runs finish in this call (-1: no)
  int stop_after_steps = -1;  // stop the first unfinished run after this many steps (-1: no)
  // One cell of a batch array (a Slurm array; docs/distributed.md): train the runs i of the plan's
  // order with i % cell_count == cell_index (0 <= cell_index < cell_count) and write no summary
  // (cell_count 0: every run). Cells of one grid may run at the same time into one out_dir.
  int cell_index = 0, cell_count = 0;
  // Train nothing: write results.json, results.md and report.html once every run of the grid has
  // finished (an error naming the runs that have not).
  bool merge = false;
};
CompareParams default_compare_params();

// One variant's final validation losses over its seeds; NaN where a value does not exist (the sd
// of one run, the comparison of the baseline with itself, a test without enough runs).
struct VariantSummary {
  std::string variant;
  bool baseline = false;
  int n = 0;                          // finished runs (seeds)
  long long params = 0;
  double val_loss_mean = 0, val_loss_sd = 0;
  std::vector<double> val_loss_values;
  double tokens_per_s_mean = 0;
  double diff = 0;                    // val_loss_mean − the baseline's (negative: better)
  double ci95_low = 0, ci95_high = 0; // Welch's 95% interval of diff
  double p_value = 0;                 // Welch's t-test against the baseline
};

struct CompareResult {
  bool complete = false;              // every run finished (false: stopped early; the summary, if
                                      // any, covers the runs finished so far); a cell: its runs
  std::string results_json;           // path of results.json
  std::vector<VariantSummary> variants;  // in grid order
};

// Runs (or resumes) the grid of a file, or of grid text (`origin` names it in errors). In a job of
// several processes (a DistributedSession under mpirun, attnlab/distributed.h) every process calls
// it with the same arguments: rank 0 hands the runs out and trains too, and writes the summary
// once all are done; the result's `variants` are filled on rank 0 alone.
CompareResult compare_grid_file(const std::string& path, const CompareParams& params = default_compare_params());
CompareResult compare_grid_text(const std::string& text, const CompareParams& params = default_compare_params(),
                                const std::string& origin = "grid text");
// The summary of a results.json written by a compare.
CompareResult read_compare_results(const std::string& results_json);
// The self-contained HTML report of a results.json (`attnlab report`), written atomically to html_out.
void write_compare_report(const std::string& results_json, const std::string& html_out);

}  // namespace attnlab::api
