// results.md of `attnlab compare`: the summary of a results document as markdown tables.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "experiment/compare.h"
#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"

namespace attnlab {

using nlohmann::json;
using compare::sets_text;

namespace {

void write_table(std::ostringstream& o, const compare::TextTable& t) {
  o << "|";
  for (const auto& h : t.header) o << " " << h << " |";
  o << "\n|";
  for (bool n : t.numeric) o << (n ? "---:|" : "---|");
  o << "\n";
  for (const auto& row : t.rows) {
    o << "|";
    for (const auto& c : row) o << " " << c << " |";
    o << "\n";
  }
}

// docs/compare.md "Primary comparisons": the table and what its numbers mean.
void primary_section(std::ostringstream& o, const json& primary) {
  const size_t m = primary["comparisons"].size();
  char buf[640];
  o << "\n## Primary comparisons\n\n" << (m == 1 ? std::string("The comparison") : "The " + std::to_string(m) + " comparisons")
    << " the grid names in `[primary]`, fixed before the runs. Δ = mean loss of A − mean loss of B (negative: A is lower), "
       "with its two-sided 95% interval. `A < B` tests Δ < 0 and `A > B` tests Δ > 0 one-sided; `A vs B` is two-sided. "
       "p (t): the paired t-test on the per-seed differences when A and B finished the same seeds (n − 1 degrees of freedom), "
       "Welch's t-test otherwise. p (sign-flip): the exact permutation test of the per-seed differences, every one of the 2^n "
       "sign patterns enumerated; it assumes nothing of their distribution, but n seeds cannot give less than 1/2^n one-sided "
       "or 2/2^n two-sided (the column \"smallest p possible\"). "
    << (m == 1 ? std::string("With one primary comparison Holm's adjustment leaves p as it is")
               : "Both p-values are Holm-adjusted over these " + std::to_string(m) + " comparisons (each kind on its own)")
    << "; the per-variant table above (every variant against the baseline) is not adjusted: read it as secondary.\n\n";
  write_table(o, compare::primary_table(primary));
  if (primary.contains("sign_flip_min_seeds")) {
    std::snprintf(buf, sizeof buf,
                  "\nThe sign-flip test can reject at α = %g%s only from %d seeds one-sided and %d two-sided (%s ≤ α).\n",
                  primary["alpha"].get<double>(), m == 1 ? "" : " after Holm", primary["sign_flip_min_seeds"]["one_sided"].get<int>(),
                  primary["sign_flip_min_seeds"]["two_sided"].get<int>(), m == 1 ? "1/2^n, 2/2^n" : "Holm's first step: m/2^n, 2m/2^n");
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "\nSeeds for %.0f%% power: the smallest n whose paired t-test at α = %g (one-sided for `<` and `>`, two-sided for `vs`; "
                "not Holm-adjusted) has that power, P(T' > t_{1−α, n−1}) one-sided and P(|T'| > t_{1−α/2, n−1}) two-sided, with T' "
                "noncentral t on n − 1 degrees of freedom and noncentrality δ·√n/s_d: ",
                100 * primary["power"].get<double>(), primary["alpha"].get<double>());
  o << buf
    << "s_d the sd of the observed per-seed differences, δ the effect shown (the observed |Δ| unless the grid states one with "
       "`by` or `[primary] effect`). A plan at the observed effect is a rough guide: s_d from few seeds is itself uncertain, "
       "and an observed effect is biased upward when it was selected for being large.\n";
}

// docs/compare.md "Gains in compute": the budget sweep, its fit and each variant's gain.
void gains_section(std::ostringstream& o, const json& gains) {
  const std::string base = gains["variant"].get<std::string>();
  o << "\n## Gains in compute\n\n`" << base << "` trained at k × this grid's tokens per run (`[budget]`), final validation loss "
    << "on the whole shard; a least-squares line in log tokens through the per-k means of the seeds that have every budget: "
    << compare::gains_fit_text(gains) << ". A line in ln(tokens), not a power law a + b·D^(−c): a few budgets cannot "
    << "determine its curvature; the residuals show how straight the points lie.\n\n";
  write_table(o, compare::budget_points_table(gains));
  if (gains["gains"].empty()) return;
  o << "\nEach variant's mean loss L_v read off the line: it matches `" << base << "` trained at k_v = exp((L_v − a)/b) × the "
    << "tokens (k_v > 1: the variant is worth more tokens of `" << base << "`). Interval: per seed s the line's a_s, b_s and "
    << "u_s = L_{v,s} − a_s; ln k_v = mean(u)/mean(b), with its delta-method standard error over the seeds and t_{0.975, n−1}, "
    << "exponentiated. Outside the swept range the line is extrapolated, and marked so.\n\n";
  write_table(o, compare::gains_table(gains));
}

// docs/compare.md "Task accuracy": the pooled strict accuracy with its score intervals, and the needle by depth.
void task_accuracy_section(std::ostringstream& o, const json& task) {
  o << "\nStrict accuracy pooled over the seeds: k solved of n = samples × seeds, with the Wilson 95% score interval; "
       "Δ vs baseline with Newcombe's hybrid score interval (method 10). Pooling treats each sample as an independent trial: the "
       "interval is the evaluation's sampling error for these trained models, not the spread between seeds (mean ± sd above).\n\n";
  write_table(o, compare::task_accuracy_table(task));
  if (task.contains("depths")) {
    o << "\n### NIAH by depth\n\nStrict accuracy per depth of the needle (pooled over seeds) with its Wilson 95% interval.\n\n";
    write_table(o, compare::depth_accuracy_table(task));
  }
}

// docs/compare.md "Length difference-in-differences".
void length_did_section(std::ostringstream& o, const json& did) {
  o << "\n## Length difference-in-differences\n\n";
  if (did.contains("note")) o << did["note"].get<std::string>() << ".\n\n";
  const bool primary = did.value("comparisons_from", std::string()) == "primary";
  o << "For each " << (primary ? "primary comparison A − B" : "variant A against the baseline B") << ", length L > 1× and position "
    << "range (all positions, then each bucket of " << did.value("bucket", 0) << " positions), per seed "
    << "DiD = (A − B at L, those positions) − (A − B at 1×, all positions); mean over seeds with its t-interval (n − 1 degrees "
       "of freedom), the two-sided t-test p and the exact sign-flip p. A gap that is the same at every length (a level effect) "
       "gives DiD ≈ 0. **Secondary tests**: these "
    << did.value("tests", 0) << " tests (lengths × position ranges × comparisons) are not adjusted for multiple comparisons; "
       "expect about 1 in 20 below 0.05 by chance.\n\n";
  write_table(o, compare::length_did_table(did));
}

// The language model's table: final validation loss per variant, its tests against the baseline.
void loss_section(std::ostringstream& o, const json& results) {
  const auto& g = results["grid"];
  char buf[512];
  o << "Base: preset `" << g["preset"].get<std::string>() << "`";
  if (!g["sets"].empty()) o << ", `" << sets_text(g["sets"].get<std::vector<std::string>>()) << "`";
  o << "; " << g["steps"].get<int>() << " steps × " << results["tokens_per_step"].get<long long>() << " tokens per step; seeds";
  for (const auto& s : g["seeds"]) o << " " << s.get<uint64_t>();
  o << ". Validation loss on the whole validation shard (" << results["val_tokens"].get<long long>() << " tokens), mean ± sd over seeds; "
    << "Δ = variant − baseline (`" << g["baseline"].get<std::string>() << "`) with Welch's t-test and its 95% interval; "
    << "the paired columns difference each seed's run against the baseline's run of the same seed (same data order) and test "
    << "those differences (paired t, n − 1 degrees of freedom).\n\n";
  if (results.contains("partial"))
    o << "**Partial**: " << results["partial"]["runs_done"].get<long long>() << " of " << results["partial"]["runs_total"].get<long long>()
      << " runs finished (`attnlab compare --summarize`); n per variant is in the table.\n\n";
  o << "| variant | settings | parameters | tok/s | val loss (mean ± sd, n) | Δ vs baseline | 95% interval | p | paired Δ ± sd (n) | paired 95% interval | paired p |\n";
  o << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  std::map<std::string, std::string> settings;
  for (const auto& v : g["variants"]) settings[v["name"]] = sets_text(v["sets"].get<std::vector<std::string>>());
  for (const auto& s : results["summary"]) {
    const std::string v = s["variant"];
    auto num = [](const json& x, const char* f) {
      char b[64];
      if (!x.is_number()) return std::string("–");
      std::snprintf(b, sizeof b, f, x.get<double>());
      return std::string(b);
    };
    std::string loss = num(s["val_loss"]["mean"], "%.4f");
    if (s["val_loss"]["sd"].is_number()) loss += " ± " + num(s["val_loss"]["sd"], "%.4f");
    loss += " (" + std::to_string(s["n"].get<int>()) + ")";
    std::string d = "baseline", ci = "", p = "", pd = "", pci = "", pp = "";
    auto interval = [&](const json& c) {
      return c.is_array() ? "[" + num(c[0], "%+.4f") + ", " + num(c[1], "%+.4f") + "]" : std::string("–");
    };
    auto pval = [&](const json& x) { return x.is_number() ? num(x, x.get<double>() < 1e-3 ? "%.1e" : "%.3f") : std::string("–"); };
    if (!s["vs_baseline"].is_null() && s["vs_baseline"].contains("paired")) {
      const json& q = s["vs_baseline"]["paired"];
      pd = num(q["diff"], "%+.4f");
      if (q["sd"].is_number()) pd += " ± " + num(q["sd"], "%.4f");
      pd += " (" + std::to_string(q["n"].get<int>()) + ")";
      pci = interval(q["ci95"]);
      pp = pval(q["p"]);
    }
    if (!s["vs_baseline"].is_null()) {
      d = num(s["vs_baseline"]["diff"], "%+.4f");
      ci = "–";
      if (s["vs_baseline"]["ci95"].is_array()) {
        ci = "[";
        ci += num(s["vs_baseline"]["ci95"][0], "%+.4f");
        ci += ", ";
        ci += num(s["vs_baseline"]["ci95"][1], "%+.4f");
        ci += "]";
      }
      p = s["vs_baseline"]["p"].is_number() ? num(s["vs_baseline"]["p"], s["vs_baseline"]["p"].get<double>() < 1e-3 ? "%.1e" : "%.3f")
                                             : "–";
    }
    const std::string params = s["params"].is_number() ? std::to_string(s["params"].get<long long>()) : "–";
    std::snprintf(buf, sizeof buf, "| %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v.c_str(), settings[v].c_str(),
                  params.c_str(), num(s["tokens_per_s"]["mean"], "%.0f").c_str(), loss.c_str(), d.c_str(), ci.c_str(), p.c_str(),
                  pd.c_str(), pci.c_str(), pp.c_str());
    o << buf;
  }
}

// A task-only grid (docs/compare.md "Task-only grids"): its settings; there is no loss table.
void task_only_section(std::ostringstream& o, const json& results) {
  const auto& g = results["grid"];
  o << "Task-only grid (`language_model = false`): every cell trained and evaluated its task models only. Base: preset `"
    << g["preset"].get<std::string>() << "`";
  if (!g["sets"].empty()) o << ", `" << sets_text(g["sets"].get<std::vector<std::string>>()) << "`";
  o << "; seeds";
  for (const auto& s : g["seeds"]) o << " " << s.get<uint64_t>();
  o << "; baseline `" << g["baseline"].get<std::string>() << "`; variants:\n\n";
  for (const auto& v : g["variants"])
    o << "- " << v["name"].get<std::string>() << ": `" << sets_text(v["sets"].get<std::vector<std::string>>()) << "`\n";
  if (results.contains("partial"))
    o << "\n**Partial**: " << results["partial"]["runs_done"].get<long long>() << " of "
      << results["partial"]["runs_total"].get<long long>() << " runs finished (`attnlab compare --summarize`).\n";
}

}  // namespace

std::string results_markdown(const json& results) {
  std::ostringstream o;
  const auto& g = results["grid"];
  char buf[512];
  o << "# attnlab compare: " << g["name"].get<std::string>() << "\n\n";
  if (g.value("language_model", true)) loss_section(o, results);
  else task_only_section(o, results);
  if (results.contains("primary_comparisons") && results["primary_comparisons"].is_object())
    primary_section(o, results["primary_comparisons"]);
  if (results.contains("compute_gains") && results["compute_gains"].is_object()) gains_section(o, results["compute_gains"]);
  // The length sweep and the tasks, when the grid has them.
  auto cell = [](const json& band, size_t i, const char* fmt) {
    char b[64];
    if (!element(band["mean"], i).is_number()) return std::string("–");
    std::snprintf(b, sizeof b, fmt, element(band["mean"], i).get<double>());
    std::string out = b;
    if (element(band["sd"], i).is_number()) {
      std::snprintf(b, sizeof b, fmt, element(band["sd"], i).get<double>());
      out += std::string(" ± ") + b;
    }
    return out;
  };
  auto mult_header = [&](const json& m, const char* what) {
    std::string h = "| variant |", sep = "|---|";
    for (const auto& x : m) {
      std::snprintf(buf, sizeof buf, " %s %g× |", what, x.get<double>());
      h += buf;
      sep += "---:|";
    }
    o << h << "\n" << sep << "\n";
  };
  const json* first_len = nullptr;
  for (const auto& s : results["summary"])
    if (s.contains("lengths") && s["lengths"].is_object()) { first_len = &s; break; }
  if (first_len) {
    o << "\n## Length extrapolation\n\nValidation loss at L × T_train (" << g.value("length_tokens", 0)
      << " tokens scored at every length), all positions; mean ± sd over seeds.\n\n";
    mult_header((*first_len)["lengths"]["multiple"], "loss");
    for (const auto& s : results["summary"]) {
      if (!s["lengths"].is_object()) continue;
      std::string row = "| " + s["variant"].get<std::string>() + " |";
      for (size_t i = 0; i < s["lengths"]["multiple"].size(); ++i) row += " " + cell(s["lengths"]["loss"], i, "%.4f") + " |";
      o << row << "\n";
    }
  }
  if (results.contains("length_did") && results["length_did"].is_object()) length_did_section(o, results["length_did"]);
  if (g.contains("tasks"))
    for (const auto& t : g["tasks"]) {
      const std::string name = t["name"];
      const json* first = nullptr;
      for (const auto& s : results["summary"])
        if (s.contains("tasks") && s["tasks"].contains(name)) { first = &s; break; }
      if (!first) continue;
      o << "\n## Task: " << name << "\n\n" << t["steps"].get<int>() << " training steps (`" << sets_text(t["sets"].get<std::vector<std::string>>())
        << "`), " << t["samples"].get<int>() << " samples per length; per-token answer accuracy, strict (whole-answer) accuracy and the "
        << "answer's log-probability, mean ± sd over seeds.\n\n";
      const json& m = (*first)["tasks"][name]["multiple"];
      std::string h = "| variant |", sep = "|---|";
      for (const auto& x : m) {
        std::snprintf(buf, sizeof buf, " token acc %g× | strict %g× | log p %g× |", x.get<double>(), x.get<double>(), x.get<double>());
        h += buf;
        sep += "---:|---:|---:|";
      }
      o << h << "\n" << sep << "\n";
      for (const auto& s : results["summary"]) {
        if (!s.contains("tasks") || !s["tasks"].contains(name)) continue;
        const json& ts = s["tasks"][name];
        std::string row = "| " + s["variant"].get<std::string>() + " |";
        for (size_t i = 0; i < ts["multiple"].size(); ++i)
          row += " " + cell(ts["token_accuracy"], i, "%.3f") + " | " + cell(ts["strict_accuracy"], i, "%.3f") + " | " +
                 cell(ts["answer_logprob"], i, "%.2f") + " |";
        o << row << "\n";
      }
      if (results.contains("task_accuracy") && results["task_accuracy"].is_object())
        for (const auto& ta : results["task_accuracy"]["tasks"])
          if (ta["task"] == name) task_accuracy_section(o, ta);
    }
  if (g.value("language_model", true))
    o << "\nWith few seeds per variant the Welch degrees of freedom are small and the interval is wide (t_0.975 = 12.7 at 1 degree "
         "of freedom, 4.3 at 2): treat the p-values as rough.\n";
  return o.str();
}

}  // namespace attnlab
