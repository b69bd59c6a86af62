// `attnlab compare GRID.toml` (a grid of variants × seeds at equal tokens, resumable) and
// `attnlab report results.json` (the HTML page alone). Formats: docs/compare.md.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "core/error.h"
#include "eval/compare.h"
#include "eval/report.h"

namespace attnlab::cli {

void register_compare(CLI::App& app) {
  {
    auto* grid = program_lifetime<std::string>();
    auto* o = program_lifetime<CompareOptions>();
    auto* no_report = program_lifetime<bool>();  // false
    auto* cmd = app.add_subcommand("compare", "train a grid of variants × seeds at equal tokens; results.json, results.md, report.html (docs/compare.md)");
    cmd->add_option("grid", *grid, "grid file (TOML subset, docs/compare.md)")->required();
    cmd->add_option("--out", o->out, "output directory (default runs/compare)");
    cmd->add_flag("--resume", o->resume, "continue the grid in --out: finished runs are skipped, a stopped run resumes from its last checkpoint");
    cmd->add_option("--stop-after-runs", o->stop_after_runs, "stop after this many runs finish in this invocation (exit status 3)");
    cmd->add_option("--stop-after-steps", o->stop_after_steps, "stop the first unfinished run after this many steps (exit status 3)");
    cmd->add_flag("--quiet", o->quiet, "no progress display");
    cmd->add_flag("--no-report", *no_report, "do not write report.html");
    cmd->add_flag("--summarize", o->summarize_only,
                  "train nothing: write results.json, results.md and report.html from the runs finished so far (marked partial); "
                  "may run beside a compare that is still training");
    cmd->callback([grid, o, no_report] {
      const Grid g = parse_grid_file(*grid);
      o->report = !*no_report;
      if (!run_compare(g, *o)) std::exit(3);
    });
  }
  {
    auto* in = program_lifetime<std::string>();
    auto* out = program_lifetime<std::string>();
    *out = "report.html";
    auto* cmd = app.add_subcommand("report", "write the self-contained HTML report of a compare results.json");
    cmd->add_option("results", *in, "results.json written by `attnlab compare`")->required();
    cmd->add_option("--out", *out, "HTML file (default report.html)");
    cmd->callback([in, out] {
      std::ifstream f(*in);
      if (!f) fail("results file ", *in, ": cannot be opened");
      nlohmann::json j;
      try { j = nlohmann::json::parse(f); } catch (const std::exception& e) { fail("results file ", *in, ": not JSON (", e.what(), ")"); }
      if (j.value("schema", "") != kCompareSchema) fail("results file ", *in, ": schema is not ", kCompareSchema);
      if (j.value("version", 0) != kCompareVersion) fail("results file ", *in, ": version ", j.value("version", 0), ", this tool reads ", kCompareVersion);
      // The summary is derived from the runs: recomputing it gives a document written by an older
      // attnlab the current statistics (e.g. the paired test) and cannot disagree with its runs.
      std::string html;
      try {
        if (j.contains("runs") && j["runs"].is_array() && j.contains("grid")) summarize_results(j);
        else if (!j.contains("summary")) fail("results file ", *in, ": has neither runs nor a summary");
        html = render_report_html(j);
      } catch (const nlohmann::json::exception& e) {
        fail("results file ", *in, ": not a compare document this tool can read (", e.what(), ")");
      }
      write_file_atomic(*out, html);
      std::printf("wrote %s\n", out->c_str());
    });
  }
}

}  // namespace attnlab::cli
