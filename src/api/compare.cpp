// attnlab::api compare functions (include/attnlab/compare.h): the library's grid runner
// (eval/compare.h) and its results.json read back into plain structs.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "attnlab/compare.h"
#include "core/denormals.h"
#include "core/distributed.h"
#include "core/error.h"
#include "core/json.h"
#include "experiment/compare.h"
#include "experiment/compare/common.h"
#include "experiment/report.h"

namespace attnlab::api {
namespace {

double number(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

CompareResult run(const Grid& grid, const CompareParams& params, const std::string& grid_path) {
  CompareOptions o;
  o.grid_path = grid_path;
  o.out = params.out_dir;
  o.resume = params.resume;
  o.quiet = params.quiet;
  o.report = params.report;
  o.summarize_only = params.summarize_only;
  o.stop_after_runs = params.stop_after_runs;
  o.stop_after_steps = params.stop_after_steps;
  o.cell_index = params.cell_index;
  o.cell_count = params.cell_count;
  o.merge = params.merge;
  bool complete = false;
  {
    ScopedFlushDenormals flush;
    complete = run_compare(grid, o);
  }
  // Stopped early, results.json is not written (or is an earlier, partial one).
  const std::string path = (std::filesystem::path(params.out_dir) / "results.json").string();
  CompareResult r;
  // Only the process that wrote it reads it back (a cell or another rank might read an older one).
  const bool wrote = (complete || params.summarize_only) && params.cell_count == 0 && distributed::rank() == 0;
  if (wrote && std::filesystem::exists(path)) r = read_compare_results(path);
  r.results_json = path;
  r.complete = complete;
  return r;
}

// results.json as JSON, checked to be a compare document of this version; errors name the file.
nlohmann::json read_results_document(const std::string& results_json) {
  if (!std::ifstream(results_json)) fail("results file ", results_json, ": cannot be opened");
  const nlohmann::json j = compare::read_json_file(results_json, "results file");
  if (!j.is_object())
    fail("results file ", results_json, ": is a JSON ", j.type_name(), ", not the object `attnlab compare` writes (schema ",
         kCompareSchema, ")");
  if (!j.contains("schema") || !j["schema"].is_string() || j["schema"] != kCompareSchema) fail("results file ", results_json, ": schema is not ", kCompareSchema);
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kCompareVersion)
    fail("results file ", results_json, ": version ", j.contains("version") ? j["version"].dump().substr(0, 40) : "missing",
         ", this tool reads ", kCompareVersion);
  return j;
}

}  // namespace

CompareParams default_compare_params() { return CompareParams{}; }

CompareResult compare_grid_file(const std::string& path, const CompareParams& params) {
  return run(parse_grid_file(path), params, path);
}

CompareResult compare_grid_text(const std::string& text, const CompareParams& params, const std::string& origin) {
  return run(parse_grid_text(text, origin), params, "");
}

CompareResult read_compare_results(const std::string& results_json) {
  nlohmann::json j = read_results_document(results_json);
  CompareResult r;
  r.results_json = results_json;
  r.complete = !j.contains("partial");
  try {
    // The summary is derived from the runs (as `attnlab report` does): always the current statistics.
    if (j.contains("runs") && j.contains("grid")) summarize_results(j);
    const std::string baseline = j["grid"]["baseline"].get<std::string>();
    for (const auto& s : j.at("summary")) {
      VariantSummary v;
      v.variant = s.at("variant").get<std::string>();
      v.baseline = v.variant == baseline;
      v.n = s.at("n").get<int>();
      v.params = s["params"].is_number() ? s["params"].get<long long>() : 0;
      v.val_loss_mean = number(s["val_loss"]["mean"]);
      v.val_loss_sd = number(s["val_loss"]["sd"]);
      for (const auto& x : s["val_loss"]["values"]) v.val_loss_values.push_back(number(x));
      v.tokens_per_s_mean = number(s["tokens_per_s"]["mean"]);
      const nlohmann::json& vs = s["vs_baseline"];
      const bool has = vs.is_object();
      v.diff = has ? number(vs["diff"]) : NAN;
      v.p_value = has ? number(vs["p"]) : NAN;
      v.ci95_low = has && vs["ci95"].is_array() ? number(element(vs["ci95"], 0)) : NAN;
      v.ci95_high = has && vs["ci95"].is_array() ? number(element(vs["ci95"], 1)) : NAN;
      r.variants.push_back(std::move(v));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("results file ", results_json, ": not a compare document this library can read (", e.what(), ")");
  }
  return r;
}

void write_compare_report(const std::string& results_json, const std::string& html_out) {
  nlohmann::json j = read_results_document(results_json);
  // The summary is derived from the runs: recomputing it gives a document written by an older
  // attnlab the current statistics (e.g. the paired test) and cannot disagree with its runs.
  std::string html;
  try {
    if (j.contains("runs") && j["runs"].is_array() && j.contains("grid")) summarize_results(j);
    else if (!j.contains("summary")) fail("results file ", results_json, ": has neither runs nor a summary");
    // Its top-level parts are checked first, for a message that says what is missing; a nested
    // key missing deeper in is an out_of_range from nlohmann (src/core/json.h), caught below.
    for (const char* key : {"grid", "runs", "summary"})
      if (!j.contains(key)) fail("results file ", results_json, ": has no \"", key, "\"");
    if (!j["grid"].is_object() || !j["runs"].is_array() || !j["summary"].is_array())
      fail("results file ", results_json, ": \"grid\" must be an object, \"runs\" and \"summary\" arrays");
    html = render_report_html(j);
  } catch (const nlohmann::json::exception& e) {
    fail("results file ", results_json, ": not a compare document this tool can read (", e.what(), ")");
  }
  write_file_atomic(html_out, html);
}

}  // namespace attnlab::api
