// The gains in compute of a results document (docs/compare.md "Gains in compute"): the [budget]
// variant's final validation loss at k × the grid's tokens (k = 1: its own runs) fitted by least
// squares as a line in log tokens, L(k) = a + b·ln k, and each other variant's mean loss L_v read
// off that line as the tokens the budget variant needs to match it: ln k_v = (L_v − a)/b. Three
// budgets cannot determine a power law a + b·D^(−c) and its curvature; a line in ln D is the
// two-parameter local fit (its residuals are reported). Interval: per seed s (the same data order
// for every run) the line's intercept a_s and slope b_s and u_s = L_{v,s} − a_s; ln k_v = ū/b̄ (the
// inversion of the line fitted to the means), with the delta-method interval of that ratio over the
// seeds and t_{0.975, n−1} (stats::ratio_of_means), exponentiated.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab::compare {

using nlohmann::json;

json compute_gains(const json& results) {
  const json& g = results["grid"];
  if (!g.contains("budget") || !g["budget"].is_object()) return nullptr;
  const std::string base = g["budget"]["variant"].get<std::string>();
  const auto loss = loss_by_variant_and_seed(results);
  // The budget variant's losses by factor and seed; k = 1 is its grid runs.
  std::map<double, std::map<uint64_t, double>> by_factor;
  by_factor[1.0] = loss.count(base) ? loss.at(base) : std::map<uint64_t, double>{};
  for (const auto& f : g["budget"]["factors"]) by_factor[f.get<double>()];
  double tokens = results.value("tokens_per_run", 0.0);  // of the first run; the budget variant's own where it has one
  for (const auto& r : results["runs"]) {
    if (r["variant"] != base || !r["val_loss"].is_number() || !r["seed"].is_number_unsigned()) continue;
    if (is_budget_run(r)) by_factor[r["budget_factor"].get<double>()][r["seed"].get<uint64_t>()] = r["val_loss"].get<double>();
    else if (r.contains("tokens") && r["tokens"].is_number()) tokens = r["tokens"].get<double>();
  }
  // The seeds with every budget: the fit's.
  std::set<uint64_t> complete;
  for (const auto& [seed, x] : by_factor[1.0]) complete.insert(seed);
  for (const auto& [k, runs] : by_factor)
    for (auto it = complete.begin(); it != complete.end();) it = runs.count(*it) ? std::next(it) : complete.erase(it);
  std::vector<double> x, y;
  json points = json::array();
  for (const auto& [k, runs] : by_factor) {
    std::vector<double> all, fitted;
    for (const auto& [seed, l] : runs) {
      all.push_back(l);
      if (complete.count(seed)) fitted.push_back(l);
    }
    points.push_back({{"factor", k}, {"tokens", k * tokens}, {"n", all.size()}, {"mean", num_or_null(stats::mean(all))},
                      {"sd", num_or_null(stats::sample_sd(all))}, {"values", all}});
    if (!fitted.empty()) {
      x.push_back(std::log(k));
      y.push_back(stats::mean(fitted));
    }
  }
  const double lo_factor = by_factor.begin()->first, hi_factor = by_factor.rbegin()->first;
  json out{{"variant", base}, {"tokens_per_run", tokens}, {"points", points}, {"seeds", std::vector<uint64_t>(complete.begin(), complete.end())},
           {"range", json::array({lo_factor, hi_factor})}, {"fit", nullptr}, {"gains", json::array()}};
  const stats::LineFit fit = complete.empty() ? stats::LineFit{} : stats::least_squares_line(x, y);
  if (!fit.valid) {
    out["note"] = "no seed has every budget run finished yet";
    return out;
  }
  // Per seed: the line's intercept (the fitted loss at k = 1) and slope.
  std::map<uint64_t, std::pair<double, double>> line_of_seed;
  std::vector<double> slopes;
  for (uint64_t seed : complete) {
    std::vector<double> ys;
    for (const auto& [k, runs] : by_factor) ys.push_back(runs.at(seed));
    const stats::LineFit f = stats::least_squares_line(x, ys);
    line_of_seed[seed] = {f.intercept, f.slope};
    slopes.push_back(f.slope);
  }
  json slope_ci = nullptr;
  if (slopes.size() >= 2) {
    const double se = stats::sample_sd(slopes) / std::sqrt(double(slopes.size()));
    const double q = stats::t_quantile(0.975, double(slopes.size() - 1));
    if (se > 0) slope_ci = json::array({fit.slope - q * se, fit.slope + q * se});
  }
  json fitted = json::array();
  for (double xi : x) fitted.push_back(fit.intercept + fit.slope * xi);
  out["fit"] = {{"intercept", fit.intercept}, {"slope", fit.slope}, {"slope_ci95", slope_ci}, {"r2", num_or_null(fit.r2)},
                {"fitted", fitted}, {"residuals", fit.residuals}};
  if (!(fit.slope < 0)) {
    out["note"] = "the budget variant's loss does not fall with tokens over the swept range: no gains";
    return out;
  }
  const double ln_lo = std::log(lo_factor), ln_hi = std::log(hi_factor);
  for (const auto& v : g["variants"]) {
    const std::string name = v["name"].get<std::string>();
    if (name == base || !loss.count(name)) continue;
    std::vector<double> u, b, l;
    for (const auto& [seed, lv] : loss.at(name))
      if (line_of_seed.count(seed)) {
        u.push_back(lv - line_of_seed[seed].first);
        b.push_back(line_of_seed[seed].second);
        l.push_back(lv);
      }
    if (u.empty()) continue;
    const stats::Ratio r = stats::ratio_of_means(u, b);
    const bool beyond = r.ratio < ln_lo || r.ratio > ln_hi;
    out["gains"].push_back({{"variant", name}, {"n", r.n}, {"loss", stats::mean(l)}, {"ln_factor", r.ratio},
                            {"factor", std::exp(r.ratio)}, {"se_ln_factor", r.valid ? json(r.se) : json(nullptr)},
                            {"ci95", r.valid ? json::array({std::exp(r.lo), std::exp(r.hi)}) : json(nullptr)},
                            {"extrapolated", beyond},
                            {"interval_extrapolated", r.valid && (r.lo < ln_lo || r.hi > ln_hi)}});
  }
  return out;
}

}  // namespace attnlab::compare
