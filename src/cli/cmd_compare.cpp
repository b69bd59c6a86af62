// `attnlab compare GRID.toml` (a grid of variants × seeds at equal tokens, resumable) and
// `attnlab report results.json` (the HTML page alone), through the public API (include/attnlab/)
// alone. Formats: docs/compare.md.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"

namespace attnlab::cli {

namespace {

// --cell I/N: two whole numbers, 0 <= I < N.
void parse_cell(const std::string& text, int* index, int* count) {
  const size_t slash = text.find('/');
  auto whole = [](const std::string& s, int* v) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    *v = std::stoi(s);
    return true;
  };
  if (slash == std::string::npos || !whole(text.substr(0, slash), index) || !whole(text.substr(slash + 1), count) || *count < 1)
    fail("--cell ", text, ": expected I/N, two whole numbers with N >= 1 (e.g. --cell 0/4; in a Slurm array: --cell "
         "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT with --array=0-(N-1))");
  if (*index >= *count)
    fail("--cell ", text, ": the cell index must be 0 .. ", *count - 1, " (a Slurm array --array=0-", *count - 1,
         " gives SLURM_ARRAY_TASK_ID in that range)");
}

}  // namespace

void register_compare(CLI::App& app) {
  {
    auto* grid = program_lifetime<std::string>();
    auto* o = program_lifetime<api::CompareParams>();
    o->quiet = false;  // the tool shows progress unless --quiet (the API's default is quiet)
    auto* no_report = program_lifetime<bool>();  // false
    auto* cmd = app.add_subcommand("compare", "train a grid of variants × seeds at equal tokens; results.json, results.md, report.html (docs/compare.md)");
    cmd->add_option("grid", *grid, "grid file (TOML subset, docs/compare.md)")->required();
    add_skip_checksums_flag(cmd);
    cmd->add_option("--out", o->out_dir, "output directory (default runs/compare)");
    cmd->add_flag("--resume", o->resume, "continue the grid in --out: finished runs are skipped, a stopped run resumes from its last checkpoint");
    cmd->add_option("--stop-after-runs", o->stop_after_runs, "stop after this many runs finish in this invocation (exit status 3)")
        ->check(at_least(1))
        ->default_str("none");
    cmd->add_option("--stop-after-steps", o->stop_after_steps, "stop the first unfinished run after this many steps (exit status 3)")
        ->check(at_least(1))
        ->default_str("none");
    cmd->add_flag("--quiet", o->quiet, "no progress display");
    cmd->add_flag("--no-report", *no_report, "do not write report.html");
    auto* cell = program_lifetime<std::string>();
    cmd->add_option("--cell", *cell,
                    "I/N: one cell of a batch array: train every N-th run of the plan from run I (0 <= I < N), write no summary; "
                    "a Slurm array --array=0-(N-1): --cell $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT (docs/distributed.md)");
    cmd->add_flag("--merge", o->merge, "train nothing: write results.json, results.md and report.html once every run has finished (after --cell)");
    cmd->add_flag("--summarize", o->summarize_only,
                  "train nothing: write results.json, results.md and report.html from the runs finished so far (marked partial); "
                  "may run beside a compare that is still training");
    cmd->callback([grid, o, no_report, cell] {
      o->report = !*no_report;
      if (!cell->empty()) parse_cell(*cell, &o->cell_index, &o->cell_count);
      if (!api::compare_grid_file(*grid, *o).complete) exit_status() = 3;
    });
  }
  {
    auto* in = program_lifetime<std::string>();
    auto* out = program_lifetime<std::string>();
    auto* cmd = app.add_subcommand("report", "write the self-contained HTML report of a compare results.json");
    cmd->add_option("results", *in, "results.json written by `attnlab compare`")->required();
    cmd->add_option("--out", *out, "HTML file (default: report.html beside the results file, where compare writes it)");
    cmd->callback([in, out] {
      // Beside results.json by default, not in whatever directory the command happens to run in.
      const std::string html = !out->empty() ? *out : (std::filesystem::path(*in).parent_path() / "report.html").string();
      api::write_compare_report(*in, html);
      std::printf("wrote %s\n", html.c_str());
    });
  }
}

}  // namespace attnlab::cli
