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
    cmd->add_flag("--summarize", o->summarize_only,
                  "train nothing: write results.json, results.md and report.html from the runs finished so far (marked partial); "
                  "may run beside a compare that is still training");
    cmd->callback([grid, o, no_report] {
      o->report = !*no_report;
      if (!api::compare_grid_file(*grid, *o).complete) std::exit(3);
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
