// attnlab._core compare functions (include/attnlab/compare.h): a grid trained into a directory,
// its summary returned as plain dicts (python/attnlab/comparing.py adds the DataFrame).
#include <attnlab/compare.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>

#include <filesystem>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;

namespace {

nb::dict as_dict(const api::CompareResult& r) {
  nb::list variants;
  for (const api::VariantSummary& v : r.variants) {
    nb::dict d;
    d["variant"] = v.variant;
    d["baseline"] = v.baseline;
    d["n"] = v.n;
    d["params"] = v.params;
    d["val_loss_mean"] = v.val_loss_mean;
    d["val_loss_sd"] = v.val_loss_sd;
    nb::list values;
    for (double x : v.val_loss_values) values.append(x);
    d["val_loss_values"] = values;
    d["tokens_per_s_mean"] = v.tokens_per_s_mean;
    d["diff"] = v.diff;
    d["ci95_low"] = v.ci95_low;
    d["ci95_high"] = v.ci95_high;
    d["p_value"] = v.p_value;
    variants.append(d);
  }
  nb::dict out;
  out["complete"] = r.complete;
  out["results_json"] = r.results_json;
  out["variants"] = variants;
  return out;
}

}  // namespace

void bind_compare(nb::module_& m) {
  m.def(
      "_compare",
      [](nb::object grid_file, nb::object grid_text, const std::filesystem::path& out, bool resume, bool report,
         bool summarize_only, int stop_after_runs, int stop_after_steps, bool quiet) {
        api::CompareParams p = api::default_compare_params();
        p.out_dir = out.string();
        p.resume = resume;
        p.report = report;
        p.summarize_only = summarize_only;
        p.stop_after_runs = stop_after_runs;
        p.stop_after_steps = stop_after_steps;
        p.quiet = quiet;
        api::CompareResult r;
        if (!grid_file.is_none()) {
          const std::string path = nb::cast<std::filesystem::path>(grid_file).string();
          nb::gil_scoped_release release;
          r = api::compare_grid_file(path, p);
        } else {
          const std::string text = nb::cast<std::string>(grid_text);
          nb::gil_scoped_release release;
          r = api::compare_grid_text(text, p, "grid text");
        }
        return as_dict(r);
      },
      "grid_file"_a = nb::none(), "grid_text"_a = nb::none(), "out"_a, "resume"_a = false, "report"_a = true,
      "summarize_only"_a = false, "stop_after_runs"_a = -1, "stop_after_steps"_a = -1, "quiet"_a = true,
      "A comparison grid as the C++ API has it; use attnlab.compare.");
  m.def(
      "_read_compare_results",
      [](const std::filesystem::path& results_json) { return as_dict(api::read_compare_results(results_json.string())); },
      "results_json"_a, "The summary of a results.json written by a compare, as plain Python objects.");
  m.def(
      "write_compare_report",
      [](const std::filesystem::path& results_json, const std::filesystem::path& html_out) {
        nb::gil_scoped_release release;
        api::write_compare_report(results_json.string(), html_out.string());
      },
      "results_json"_a, "html_out"_a, "Writes the self-contained HTML report of a results.json (`attnlab report`).");
}

}  // namespace attnlab::python
