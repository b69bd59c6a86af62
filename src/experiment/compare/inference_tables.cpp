// The primary comparisons and gains in compute of a results document as text tables
// (compare/inference.h), laid out by results.md and report.html alike.
#include <cmath>
#include <cstdio>

#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"

namespace attnlab::compare {

using nlohmann::json;

namespace {

// Built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&.
std::string interval(const json& c, const char* format, const char* suffix = "") {
  if (!c.is_array()) return "–";
  std::string s = "[";
  s += num(c[0], format);
  s += suffix;
  s += ", ";
  s += num(c[1], format);
  s += suffix;
  s += "]";
  return s;
}

}  // namespace

TextTable primary_table(const json& primary) {
  char b[160];
  std::snprintf(b, sizeof b, "seeds for %.0f%% power", 100 * primary.value("power", 0.8));
  TextTable t{{"comparison", "test (n)", "Δ = A − B", "95% interval", "p (t)", "Holm p (t)", "p (sign-flip)", "smallest p possible",
               "Holm p (sign-flip)", b},
              {false, false, true, true, true, true, true, true, true, false},
              {}};
  for (const auto& c : primary["comparisons"]) {
    const std::string test = c["test"].get<std::string>() + " (" +
                             (c["test"] == "paired" ? std::to_string(c["n_paired"].get<int>())
                                                    : std::to_string(c["n_a"].get<int>()) + ", " + std::to_string(c["n_b"].get<int>())) + ")";
    const json& plan = c["plan"];
    std::string seeds;
    if (plan["seeds"].is_number()) {
      seeds = (plan["reached"].get<bool>() ? "" : "> ") + std::to_string(plan["seeds"].get<long long>()) + " (at " +
              num(plan["effect"], "%.4f") + ", " + (plan["effect_source"] == "observed" ? "observed" : "stated") + "; sd " +
              num(plan["sd"], "%.4f") + ")";
    } else {
      seeds = "– (" + plan.value("note", std::string("no plan")) + ")";
    }
    t.rows.push_back({c["comparison"].get<std::string>(), test, num(c["diff"], "%+.4f"), interval(c["ci95"], "%+.4f"), pval(c["p"]),
                      pval(c["p_holm"]), pval(c["sign_flip"]["p"]), pval(c["sign_flip"]["p_min"]), pval(c["sign_flip"]["p_holm"]), seeds});
  }
  return t;
}

TextTable budget_points_table(const json& gains) {
  TextTable t{{"k", "tokens", "loss (mean ± sd, n)", "line", "residual"}, {true, true, true, true, true}, {}};
  const json& fit = gains["fit"];
  size_t i = 0;
  for (const auto& p : gains["points"]) {
    std::string loss = num(p["mean"], "%.4f");
    if (p["sd"].is_number()) loss += " ± " + num(p["sd"], "%.4f");
    loss += " (" + std::to_string(p["n"].get<int>()) + ")";
    const bool fitted = fit.is_object() && i < fit["fitted"].size();
    t.rows.push_back({num(p["factor"], "%g") + "×", num(p["tokens"], "%.0f"), loss, fitted ? num(element(fit["fitted"], i), "%.4f") : "–",
                      fitted ? num(element(fit["residuals"], i), "%+.4f") : "–"});
    ++i;
  }
  return t;
}

TextTable gains_table(const json& gains) {
  const std::string base = gains["variant"].get<std::string>();
  TextTable t{{"variant", "loss (mean, n)", "matches " + base + " at", "95% interval"}, {false, true, true, true}, {}};
  char range[96];
  std::snprintf(range, sizeof range, "%g–%g×", element(gains["range"], 0).get<double>(), element(gains["range"], 1).get<double>());
  for (const auto& g : gains["gains"]) {
    std::string at = num(g["factor"], "%.2f") + "× the tokens";
    if (g["extrapolated"].get<bool>()) at += std::string(" (extrapolated: outside the swept ") + range + ")";
    std::string ci = interval(g["ci95"], "%.2f", "×");
    if (g["interval_extrapolated"].get<bool>() && !g["extrapolated"].get<bool>()) ci += " (reaches outside the swept range)";
    t.rows.push_back({g["variant"].get<std::string>(), num(g["loss"], "%.4f") + " (" + std::to_string(g["n"].get<int>()) + ")", at, ci});
  }
  return t;
}

std::string gains_fit_text(const json& gains) {
  const json& fit = gains["fit"];
  if (!fit.is_object()) return gains.value("note", std::string("no fit"));
  std::string seeds;
  for (const auto& s : gains["seeds"]) seeds += (seeds.empty() ? "" : ", ") + std::to_string(s.get<uint64_t>());
  char b[256];
  std::snprintf(b, sizeof b, "L(k) = %.4f %s %.4f·ln k over the means of seeds %s (r² = %s)", fit["intercept"].get<double>(),
                fit["slope"].get<double>() < 0 ? "−" : "+", std::fabs(fit["slope"].get<double>()), seeds.c_str(), num(fit["r2"], "%.4f").c_str());
  std::string text = b;
  if (fit["slope_ci95"].is_array()) text += "; the slope's 95% interval over seeds " + interval(fit["slope_ci95"], "%.4f");
  if (gains.contains("note")) text += "; " + gains["note"].get<std::string>();
  return text;
}

}  // namespace attnlab::compare
