// attnlab::api compare functions (include/attnlab/compare.h): the library's grid runner
// (eval/compare.h) and its results.json read back into plain structs.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnlab/compare.h"
#include "core/denormals.h"
#include "core/error.h"
#include "eval/compare.h"

namespace attnlab::api {
namespace {

double number(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

CompareResult run(const Grid& grid, const CompareParams& params) {
  CompareOptions o;
  o.out = params.out_dir;
  o.resume = params.resume;
  o.quiet = params.quiet;
  o.report = params.report;
  bool complete = false;
  {
    ScopedFlushDenormals flush;
    complete = run_compare(grid, o);
  }
  const std::string path = (std::filesystem::path(params.out_dir) / "results.json").string();
  if (!complete) {
    CompareResult r;  // stopped early (a signal): the runs so far are in out_dir, no summary yet
    r.results_json = path;
    return r;
  }
  return read_compare_results(path);
}

}  // namespace

CompareParams default_compare_params() { return CompareParams{}; }

CompareResult compare_grid_file(const std::string& path, const CompareParams& params) {
  return run(parse_grid_file(path), params);
}

CompareResult compare_grid_text(const std::string& text, const CompareParams& params, const std::string& origin) {
  return run(parse_grid_text(text, origin), params);
}

CompareResult read_compare_results(const std::string& results_json) {
  std::ifstream f(results_json);
  if (!f) fail("results file ", results_json, ": cannot be opened");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("results file ", results_json, ": not JSON (", e.what(), ")");
  }
  if (j.value("schema", "") != kCompareSchema) fail("results file ", results_json, ": schema is not ", kCompareSchema);
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
      v.ci95_low = has && vs["ci95"].is_array() ? number(vs["ci95"][0]) : NAN;
      v.ci95_high = has && vs["ci95"].is_array() ? number(vs["ci95"][1]) : NAN;
      r.variants.push_back(std::move(v));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("results file ", results_json, ": not a compare document this library can read (", e.what(), ")");
  }
  return r;
}

}  // namespace attnlab::api
