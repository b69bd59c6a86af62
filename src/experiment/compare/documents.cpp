#include "experiment/compare/documents.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "experiment/compare/common.h"
#include "experiment/compare/evaluations.h"
#include "experiment/compare/provenance.h"
#include "experiment/report.h"
#include "model/version.h"

namespace attnlab::compare {

namespace fs = std::filesystem;
using nlohmann::json;

void write_grid_documents(const Grid& grid, const std::vector<Run>& runs, const CompareOptions& opts) {
  const fs::path out(opts.out);
  const fs::path runs_dir = out / "runs";
  const size_t N = runs.size();
  const size_t tokens_per_step = (size_t)runs[0].cfg.train.batch_size * runs[0].cfg.model.seq_len * runs[0].cfg.train.grad_accum;
  const int lm_steps = grid.language_model ? runs[0].cfg.train.steps : 0;
  json grid_j{{"name", grid.name}, {"preset", grid.preset}, {"sets", grid.sets}, {"steps", lm_steps}, {"language_model", grid.language_model},
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
               {"tokens_per_step", grid.language_model ? tokens_per_step : 0}, {"tokens_per_run", (long long)tokens_per_step * lm_steps}};
  json all = json::array();
  long long val_tokens = 0;
  size_t done = 0;
  for (const auto& r : runs) done += fs::exists(runs_dir / r.id / "result.json");
  if (done < N) {
    results["partial"] = {{"runs_done", done}, {"runs_total", N}};
    if (done == 0) fail("compare --summarize: no run of ", opts.out, " has finished yet");
  }
  for (const auto& r : runs) {  // the plan's order, not the order the runs finished in
    if (!fs::exists(runs_dir / r.id / "result.json")) continue;  // --summarize of an unfinished grid
    json one = read_json_file((runs_dir / r.id / "result.json").string(), "compare: run record");
    complete_from_run_files(one, runs_dir / r.id);
    val_tokens = one["val_tokens"].get<long long>();
    all.push_back(one);
  }
  results["val_tokens"] = val_tokens;
  results["runs"] = all;
  // Runs of one variant computed on different machines (other processes of an mpirun job or cells
  // of an array may run elsewhere): the same data, other rounding (warned, kept).
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
    if (grid.primary.empty() && grid.language_model)
      std::printf("\nhint: the grid names no primary comparisons; a [primary] table (comparisons = [\"A < B\", ...]) adds their "
                  "Holm-adjusted tests, the exact sign-flip p and the seeds needed for 80%% power (docs/compare.md)\n");
    std::printf("\nwrote %s, %s%s\n", (out / "results.json").string().c_str(), (out / "results.md").string().c_str(),
                opts.report ? (", " + (out / "report.html").string()).c_str() : "");
  }
  std::fflush(stdout);
}

}  // namespace attnlab::compare
