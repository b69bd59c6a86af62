// The primary comparisons of a results document (docs/compare.md "Primary comparisons"): for each
// pair the grid's [primary] table names, the mean loss difference with its 95% interval and a
// t-test (paired by seed when both variants finished the same seeds, Welch otherwise), the exact
// sign-flip p of the per-seed differences with the smallest p those seeds allow, both p-values
// Holm-adjusted over the primary comparisons, and the seeds the paired t-test needs for the target
// power (src/experiment/stats.h has the math and its references).
#include <cmath>
#include <vector>

#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab::compare {

using nlohmann::json;

namespace {

stats::Alternative alternative_of(const std::string& direction) {
  if (direction == "<") return stats::Alternative::less;
  if (direction == ">") return stats::Alternative::greater;
  return stats::Alternative::two_sided;
}

json interval(bool valid, double lo, double hi) { return valid ? json::array({lo, hi}) : json(nullptr); }

// The seeds needed for `target` power of the paired t-test at `alpha`, from the sd of the observed
// per-seed differences, at the comparison's effect, else [primary] effect, else the observed
// difference (its size in the stated direction).
json seed_plan(const json& comparison, double grid_effect, const stats::Paired& pd, stats::Alternative alt, double alpha, double target) {
  double effect = 0;
  std::string source;
  if (comparison["effect"].is_number()) {
    effect = comparison["effect"].get<double>();
    source = "comparison";
  } else if (grid_effect > 0) {
    effect = grid_effect;
    source = "primary.effect";
  } else {
    source = "observed";
    if (pd.n > 0) effect = alt == stats::Alternative::less ? -pd.diff : alt == stats::Alternative::greater ? pd.diff : std::fabs(pd.diff);
  }
  const bool spread = pd.n >= 2 && pd.sd > 0;
  const stats::Tails tails = alt == stats::Alternative::two_sided ? stats::Tails::two : stats::Tails::one;
  json plan{{"effect", source == "observed" && pd.n == 0 ? json(nullptr) : json(effect)}, {"effect_source", source},
            {"sd", spread ? json(pd.sd) : json(nullptr)}, {"alpha", alpha}, {"power", target},
            {"tails", tails == stats::Tails::two ? 2 : 1}, {"seeds", nullptr}, {"power_at_seeds", nullptr}, {"reached", false}};
  if (!spread) {
    plan["note"] = "needs the per-seed differences of at least 2 seeds, not all equal";
  } else if (!(effect > 0)) {
    plan["note"] = "the observed difference is not in the stated direction: no effect to plan for (state one with 'by')";
  } else {
    const stats::SeedPlan sp = stats::paired_seeds_needed(effect, pd.sd, alpha, target, tails);
    plan["seeds"] = sp.n;
    plan["power_at_seeds"] = sp.power;
    plan["reached"] = sp.reached;
    if (!sp.reached) plan["note"] = "more seeds than the search's limit";
  }
  return plan;
}

}  // namespace

json primary_comparisons(const json& results) {
  const json& g = results["grid"];
  if (!g.contains("primary") || !g["primary"].is_object()) return nullptr;
  const json& primary = g["primary"];
  const double alpha = primary.value("alpha", 0.05), target = primary.value("power", 0.8);
  const double grid_effect = primary["effect"].is_number() ? primary["effect"].get<double>() : 0;
  const auto loss = loss_by_variant_and_seed(results);
  const std::map<uint64_t, double> none;
  json comparisons = json::array();
  std::vector<double> p_t, p_flip;
  for (const auto& c : primary["comparisons"]) {
    const std::string a = c["a"].get<std::string>(), b = c["b"].get<std::string>();
    const stats::Alternative alt = alternative_of(c["direction"].get<std::string>());
    const auto& la = loss.count(a) ? loss.at(a) : none;
    const auto& lb = loss.count(b) ? loss.at(b) : none;
    std::vector<double> all_a, all_b, pair_a, pair_b, d;
    for (const auto& [seed, x] : la) {
      all_a.push_back(x);
      if (lb.count(seed)) {
        pair_a.push_back(x);
        pair_b.push_back(lb.at(seed));
        d.push_back(x - lb.at(seed));
      }
    }
    for (const auto& [seed, x] : lb) all_b.push_back(x);
    const bool same_seeds = !d.empty() && d.size() == la.size() && d.size() == lb.size();
    json j{{"comparison", c["text"]}, {"a", a}, {"b", b}, {"direction", c["direction"]},
           {"n_a", la.size()}, {"n_b", lb.size()}, {"n_paired", d.size()}};
    const stats::Paired pd = stats::paired(pair_a, pair_b);
    double p = NAN;
    if (same_seeds) {
      j["test"] = "paired";
      j["diff"] = num_or_null(pd.diff);
      j["ci95"] = interval(pd.valid, pd.lo, pd.hi);
      j["t"] = pd.valid ? json(pd.t) : json(nullptr);
      j["df"] = pd.valid ? json(pd.df) : json(nullptr);
      if (pd.valid) p = stats::t_p_value(pd.t, pd.df, alt);
    } else {
      const stats::Welch w = stats::welch(all_a, all_b);
      j["test"] = "welch";
      j["diff"] = num_or_null(w.diff);
      j["ci95"] = interval(w.valid, w.lo, w.hi);
      j["t"] = w.valid ? json(w.t) : json(nullptr);
      j["df"] = w.valid ? json(w.df) : json(nullptr);
      if (w.valid) p = stats::t_p_value(w.t, w.df, alt);
    }
    j["p"] = num_or_null(p);
    p_t.push_back(p);
    const stats::SignFlip sf = stats::sign_flip(d, alt);
    j["sign_flip"] = {{"n", sf.n}, {"p", sf.valid ? json(sf.p) : json(nullptr)}, {"p_min", sf.n > 0 ? json(sf.p_min) : json(nullptr)}};
    p_flip.push_back(sf.valid ? sf.p : NAN);
    j["plan"] = seed_plan(c, grid_effect, pd, alt, alpha, target);
    comparisons.push_back(j);
  }
  // Holm over the primary comparisons, each kind of p on its own.
  const std::vector<double> holm_t = stats::holm_adjust(p_t), holm_flip = stats::holm_adjust(p_flip);
  for (size_t i = 0; i < comparisons.size(); ++i) {
    comparisons[i]["p_holm"] = num_or_null(holm_t[i]);
    comparisons[i]["sign_flip"]["p_holm"] = num_or_null(holm_flip[i]);
  }
  // The seeds the sign-flip test needs before it can reject at all: Holm's first step asks
  // m·p_min ≤ α, p_min = 1/2^n one-sided and 2/2^n two-sided.
  const double m = double(comparisons.size());
  const int one_sided = (int)std::ceil(std::log2(m / alpha) - 1e-9), two_sided = (int)std::ceil(std::log2(2 * m / alpha) - 1e-9);
  return {{"alpha", alpha}, {"power", target}, {"adjustment", "holm"},
          {"sign_flip_min_seeds", {{"one_sided", one_sided}, {"two_sided", two_sided}}}, {"comparisons", comparisons}};
}

}  // namespace attnlab::compare
