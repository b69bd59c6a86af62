// The per-variant statistics of a results document (docs/compare.md "results.json": "summary"):
// mean ± sd over seeds, Welch's t-test and the paired-by-seed t-test against the baseline
// (experiment/stats.h), and the bands of the length sweep and the tasks; then the primary
// comparisons, the gains in compute, the tasks' pooled accuracies and the length sweep's
// difference-in-differences where the grid has them (compare/inference.h). The runs of a [budget]
// sweep are kept out of their variant's statistics.
#include <map>
#include <string>
#include <vector>

#include "experiment/compare.h"
#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab {

using nlohmann::json;
using compare::is_budget_run;
using compare::num_or_null;

namespace compare {

bool is_budget_run(const json& run) { return run.contains("budget_factor") && run["budget_factor"].is_number(); }

std::map<std::string, std::map<uint64_t, double>> loss_by_variant_and_seed(const json& results) {
  std::map<std::string, std::map<uint64_t, double>> loss;
  for (const auto& r : results["runs"])
    if (!is_budget_run(r) && r["val_loss"].is_number() && r.contains("seed") && r["seed"].is_number_unsigned())
      loss[r["variant"].get<std::string>()][r["seed"].get<uint64_t>()] = r["val_loss"].get<double>();
  return loss;
}

}  // namespace compare

void summarize_results(json& results) {
  std::vector<std::string> order;
  for (const auto& v : results["grid"]["variants"]) order.push_back(v["name"].get<std::string>());
  const std::string base = results["grid"]["baseline"].get<std::string>();
  std::map<std::string, std::vector<double>> loss, tps;
  std::map<std::string, std::map<uint64_t, double>> loss_by_seed;
  std::map<std::string, json> params;
  for (const auto& r : results["runs"]) {
    if (is_budget_run(r)) continue;
    const std::string v = r["variant"].get<std::string>();
    if (r["val_loss"].is_number()) {
      loss[v].push_back(r["val_loss"].get<double>());
      if (r.contains("seed") && r["seed"].is_number_unsigned()) loss_by_seed[v][r["seed"].get<uint64_t>()] = r["val_loss"].get<double>();
    }
    if (r["tokens_per_s"].is_number()) tps[v].push_back(r["tokens_per_s"].get<double>());
    params[v] = r["params"];
  }
  json summary = json::array();
  for (const auto& v : order) {
    json s{{"variant", v}, {"n", loss[v].size()}, {"params", params.count(v) ? params[v] : json(nullptr)}};
    s["val_loss"] = {{"mean", num_or_null(stats::mean(loss[v]))}, {"sd", num_or_null(stats::sample_sd(loss[v]))}, {"values", loss[v]}};
    s["tokens_per_s"] = {{"mean", num_or_null(stats::mean(tps[v]))}, {"sd", num_or_null(stats::sample_sd(tps[v]))}};
    if (v == base) {
      s["vs_baseline"] = nullptr;
    } else {
      const stats::Welch w = stats::welch(loss[v], loss[base]);
      s["vs_baseline"] = {{"diff", num_or_null(w.diff)},
                          {"se", w.valid ? json(w.se) : json(nullptr)},
                          {"df", w.valid ? json(w.df) : json(nullptr)},
                          {"t", w.valid ? json(w.t) : json(nullptr)},
                          {"p", w.valid ? json(w.p) : json(nullptr)},
                          {"ci95", w.valid ? json::array({w.lo, w.hi}) : json(nullptr)}};
      // Paired by seed: a seed fixes the data order of every variant, so the per-seed differences
      // remove the variation the variants share (the seeds both have finished).
      std::vector<double> a, b;
      for (const auto& [seed, x] : loss_by_seed[v])
        if (loss_by_seed[base].count(seed)) { a.push_back(x); b.push_back(loss_by_seed[base][seed]); }
      const stats::Paired pd = stats::paired(a, b);
      s["vs_baseline"]["paired"] = {{"n", pd.n},
                                    {"diff", pd.n ? num_or_null(pd.diff) : json(nullptr)},
                                    {"sd", pd.valid ? json(pd.sd) : json(nullptr)},
                                    {"t", pd.valid ? json(pd.t) : json(nullptr)},
                                    {"df", pd.valid ? json(pd.df) : json(nullptr)},
                                    {"p", pd.valid ? json(pd.p) : json(nullptr)},
                                    {"ci95", pd.valid ? json::array({pd.lo, pd.hi}) : json(nullptr)}};
    }
    // Length sweep and tasks: mean ± sd over the variant's runs at each length multiple.
    std::vector<const json*> vr;
    for (const auto& r : results["runs"])
      if (r["variant"].get<std::string>() == v && !is_budget_run(r)) vr.push_back(&r);
    auto band = [&](const std::vector<const json*>& parts, const char* key) {
      json mean = json::array(), sd = json::array();
      const size_t n = parts.empty() ? 0 : (*parts[0])["multiple"].size();
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> x;
        for (const json* p : parts)
          if (i < (*p)[key].size() && (*p)[key][i].is_number()) x.push_back((*p)[key][i].get<double>());
        const bool all = x.size() == parts.size();
        mean.push_back(all ? num_or_null(stats::mean(x)) : json(nullptr));
        sd.push_back(all && x.size() > 1 ? num_or_null(stats::sample_sd(x)) : json(nullptr));
      }
      return json{{"mean", mean}, {"sd", sd}};
    };
    std::vector<const json*> lens;
    for (const json* r : vr)
      if (r->contains("lengths") && (*r)["lengths"].is_object()) lens.push_back(&(*r)["lengths"]);
    s["lengths"] = nullptr;
    if (!lens.empty())
      s["lengths"] = {{"multiple", (*lens[0])["multiple"]}, {"loss", band(lens, "loss")}, {"loss_beyond_train", band(lens, "loss_beyond_train")}};
    json tsum = json::object();
    if (!vr.empty() && (*vr[0]).contains("tasks") && (*vr[0])["tasks"].is_object())
      for (const auto& [name, first] : (*vr[0])["tasks"].items()) {
        std::vector<const json*> parts;
        for (const json* r : vr)
          if ((*r)["tasks"].contains(name)) parts.push_back(&(*r)["tasks"][name]);
        tsum[name] = {{"multiple", first["multiple"]}, {"token_accuracy", band(parts, "token_accuracy")},
                      {"strict_accuracy", band(parts, "strict_accuracy")}, {"answer_logprob", band(parts, "answer_logprob")}};
      }
    s["tasks"] = tsum;
    summary.push_back(s);
  }
  results["summary"] = summary;
  // Only where the grid has [primary] / [budget]: other documents keep their keys.
  results.erase("primary_comparisons");
  results.erase("compute_gains");
  results.erase("task_accuracy");
  results.erase("length_did");
  if (json p = compare::primary_comparisons(results); !p.is_null()) results["primary_comparisons"] = p;
  if (json gains = compare::compute_gains(results); !gains.is_null()) results["compute_gains"] = gains;
  if (json tasks = compare::task_accuracy(results); !tasks.is_null()) results["task_accuracy"] = tasks;
  if (json did = compare::length_did(results); !did.is_null()) results["length_did"] = did;
}

}  // namespace attnlab
