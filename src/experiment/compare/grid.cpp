// The grid file of `attnlab compare` (docs/compare.md "The grid file"): the config's TOML subset
// (parse_config_text) with the config's value parsers (model/config_values.h), so a grid and a
// config accept the same values and fail with the same messages.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "attnlab/printable.h"
#include "experiment/compare.h"
#include "experiment/compare/common.h"
#include "experiment/compare/plan.h"
#include "experiment/tasks.h"
#include "model/config.h"
#include "model/config_values.h"

namespace attnlab {

using config_values::parse_bool;
using config_values::parse_float;
using config_values::parse_int;
using config_values::parse_quoted;
using config_values::parse_string_list;

namespace {
constexpr long long kMaxInt = std::numeric_limits<int>::max();
constexpr long long kMaxSeed = 1LL << 62;  // train.seed's range (model/config.cpp)
constexpr double kMaxBudgetFactor = 1000;

// One entry of [primary] comparisons: "A < B", "A > B" or "A vs B", then optionally "by EFFECT".
// The variant names are checked once every variant is known (validate_primary).
GridComparison parse_comparison(const std::string& key, const std::string& text, const std::string& where) {
  std::string spaced;  // "a<b" reads as "a < b"
  for (char c : text) {
    if (c == '<' || c == '>') spaced += std::string(" ") + c + " ";
    else spaced += c;
  }
  std::istringstream words(spaced);
  std::vector<std::string> w;
  for (std::string x; words >> x;) w.push_back(x);
  const bool shape = (w.size() == 3 || (w.size() == 5 && w[3] == "by")) && (w[1] == "<" || w[1] == ">" || w[1] == "vs");
  if (!shape)
    fail(where, ": ", key, ": \"", text, "\": expected \"A < B\" (A's loss is lower), \"A > B\" or \"A vs B\" (either way), "
         "optionally followed by \"by EFFECT\" (a loss difference, e.g. \"xsa < rope by 0.01\")");
  GridComparison c;
  c.a = w[0];
  c.b = w[2];
  c.alternative = w[1] == "<" ? stats::Alternative::less : w[1] == ">" ? stats::Alternative::greater : stats::Alternative::two_sided;
  if (w.size() == 5) {
    c.effect = parse_float(key, w[4], where, 0, std::numeric_limits<double>::max());
    if (!(c.effect > 0)) fail(where, ": ", key, ": \"", text, "\": the effect must be positive (a loss difference in nats per token)");
  }
  return c;
}

// [tasks.needle] depths: fractions in [0, 1], each once; at most kMaxNeedleDepths (the evaluation's
// sample streams give each (length, depth) cell its own stream of samples up to that many depths).
std::vector<double> parse_depths(const std::string& key, const Assignment& a) {
  std::vector<double> depths;
  for (const auto& text : parse_string_list(key, a.value, a.origin)) {
    const double d = parse_float(key, text, a.origin, 0, 1);
    if (std::find(depths.begin(), depths.end(), d) != depths.end()) fail(a.origin, ": ", key, " gives ", text, " twice");
    depths.push_back(d);
  }
  if (depths.empty()) fail(a.origin, ": ", key, " is empty (leave it out for the default 0.1, 0.3, 0.5, 0.7, 0.9)");
  if ((int)depths.size() > tasks::kMaxNeedleDepths)
    fail(a.origin, ": ", key, " gives ", depths.size(), " depths; at most ", tasks::kMaxNeedleDepths);
  return depths;
}

// Every name a variant, no variant with itself, no pair twice (in either order or direction).
void validate_primary(const Grid& g, const std::map<std::string, size_t>& index, const std::string& where) {
  std::string known;
  for (const auto& v : g.variants) known += (known.empty() ? "" : ", ") + v.name;
  std::map<std::pair<std::string, std::string>, std::string> seen;
  for (const auto& c : g.primary) {
    const std::string text = comparison_text(c);
    for (const std::string* name : {&c.a, &c.b})
      if (!index.count(*name))
        fail(where, ": primary.comparisons: \"", text, "\": '", *name, "' is not a variant (variants: ", known, ")");
    if (c.a == c.b) fail(where, ": primary.comparisons: \"", text, "\" compares ", c.a, " with itself");
    const auto pair = std::minmax(c.a, c.b);
    if (seen.count(pair))
      fail(where, ": primary.comparisons: \"", text, "\" compares ", c.a, " and ", c.b, " a second time (first as \"", seen[pair],
           "\"); give each pair once");
    seen[pair] = text;
  }
}

}  // namespace

namespace compare {
// The k × steps of every budget factor must be whole, distinct steps, none the grid's own.
void check_budget_steps(const GridBudget& b, int steps, const std::string& where) {
  std::map<long long, double> by_steps{{steps, 1.0}};
  for (double k : b.factors) {
    const long long s = std::llround(k * steps);
    if (s < 1) fail(where, ": budget.factors: ", k, " × ", steps, " steps is less than one step");
    if (by_steps.count(s))
      fail(where, ": budget.factors: ", k, " and ", by_steps[s], " both give ", s, " steps of ", steps, "; give factors whose steps differ");
    by_steps[s] = k;
  }
}
}  // namespace compare

std::string comparison_text(const GridComparison& c) {
  const char* op = c.alternative == stats::Alternative::less ? " < " : c.alternative == stats::Alternative::greater ? " > " : " vs ";
  std::string t = c.a + op + c.b;
  if (c.effect > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " by %g", c.effect);
    t += buf;
  }
  return t;
}

std::string budget_run_id(const std::string& variant, double factor, uint64_t seed) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "@%gx_s", factor);
  return variant + buf + std::to_string(seed);
}

Grid parse_grid_text(const std::string& text, const std::string& origin) {
  Grid g;
  bool baseline_given = false;
  std::string primary_where, budget_where, budget_factors_where;  // the lines of [primary] comparisons, [budget], budget.factors
  std::map<std::string, size_t> index, task_index;
  // The keys only a language model uses, in file order with their lines: errors in a task-only grid.
  std::vector<std::pair<std::string, std::string>> lm_keys;
  std::string language_model_where;
  // A `set` list gives each configuration key once (a second value would silently win).
  auto sets_of = [](const std::string& k, const Assignment& a) {
    std::vector<std::string> sets = parse_string_list(k, a.value, a.origin);
    std::map<std::string, std::string> seen;
    for (const auto& text : sets) {
      const std::string key = parse_override(text).key;
      if (seen.count(key)) fail(a.origin, ": ", k, " gives ", key, " twice (", seen[key], ", ", text, "); give it once");
      seen[key] = text;
    }
    return sets;
  };
  for (const auto& a : parse_config_text(text, origin, /*keys_once=*/true)) {
    const std::string& k = a.key;
    for (const char* lm : {"steps", "ckpt_every", "analyze", "analyze_sequences", "lengths", "length_tokens"})
      if (k == lm) lm_keys.push_back({k, a.origin});
    for (const char* table : {"primary", "budget"}) {
      std::string header = "[";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
      header += table;
      header += "]";
      if (k.rfind(std::string(table) + ".", 0) == 0 &&
          std::none_of(lm_keys.begin(), lm_keys.end(), [&](const auto& e) { return e.first == header; }))
        lm_keys.push_back({header, a.origin});
    }
    if (k == "language_model") {
      g.language_model = parse_bool(k, a.value, a.origin);
      language_model_where = a.origin;
    } else if (k == "name") g.name = parse_quoted(k, a.value, a.origin);
    else if (k == "preset") g.preset = parse_quoted(k, a.value, a.origin);
    else if (k == "set") g.sets = sets_of(k, a);
    else if (k == "baseline") { g.baseline = parse_quoted(k, a.value, a.origin); baseline_given = true; }
    else if (k == "steps") g.steps = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);  // 0 is not "the preset's": leave it out
    else if (k == "ckpt_every") g.ckpt_every = (int)parse_int(k, a.value, a.origin, 0, kMaxInt);
    else if (k == "analyze") g.analyze = parse_bool(k, a.value, a.origin);
    else if (k == "analyze_sequences") g.analyze_sequences = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
    else if (k == "seeds") {
      g.seeds.clear();
      for (const auto& s : parse_string_list(k, a.value, a.origin)) g.seeds.push_back((uint64_t)parse_int(k, s, a.origin, 0, kMaxSeed));
    } else if (k == "lengths") {
      g.lengths = parse_quoted(k, a.value, a.origin);
      g.lengths_origin = a.origin + ": lengths";
    } else if (k == "length_tokens") {
      g.length_tokens = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
    } else if (k.rfind("primary.", 0) == 0) {
      const std::string field = k.substr(8);
      if (field == "comparisons") {
        primary_where = a.origin;
        for (const auto& text : parse_string_list(k, a.value, a.origin)) g.primary.push_back(parse_comparison(k, text, a.origin));
        if (g.primary.empty()) fail(a.origin, ": ", k, " is empty (leave [primary] out for none)");
      } else if (field == "effect") {
        g.primary_effect = parse_float(k, a.value, a.origin, 0, std::numeric_limits<double>::max());
        if (!(g.primary_effect > 0)) fail(a.origin, ": ", k, " must be positive (a loss difference in nats per token)");
      } else if (field == "alpha") {
        g.primary_alpha = parse_float(k, a.value, a.origin, 1e-6, 0.5);
      } else if (field == "power") {
        g.primary_power = parse_float(k, a.value, a.origin, 0.05, 0.999);
      } else {
        fail(a.origin, ": unknown [primary] key ", printable(field), " (known: comparisons, effect, alpha, power)");
      }
      if (primary_where.empty()) primary_where = a.origin;
    } else if (k.rfind("budget.", 0) == 0) {
      const std::string field = k.substr(7);
      if (budget_where.empty()) budget_where = a.origin;
      if (field == "variant") {
        g.budget.variant = parse_quoted(k, a.value, a.origin);
        budget_where = a.origin;
      } else if (field == "factors") {
        budget_factors_where = a.origin;
        std::set<double> seen;
        for (const auto& text : parse_string_list(k, a.value, a.origin)) {
          const double f = parse_float(k, text, a.origin, 0, kMaxBudgetFactor);
          if (!(f > 0)) fail(a.origin, ": ", k, " = ", text, ": a factor must be positive");
          if (!seen.insert(f).second) fail(a.origin, ": ", k, " gives ", text, " twice");
          if (f != 1) g.budget.factors.push_back(f);  // 1 is the grid's own runs
        }
        if (g.budget.factors.empty()) fail(a.origin, ": ", k, " needs a factor other than 1 (1 is the grid's own runs), e.g. [0.5, 2]");
      } else {
        fail(a.origin, ": unknown [budget] key ", printable(field), " (known: variant, factors)");
      }
    } else if (k.rfind("tasks.", 0) == 0) {
      const size_t dot = k.find('.', 6);
      if (dot == std::string::npos) fail(a.origin, ": a task's settings go in a [tasks.NAME] table, got ", k);
      const std::string name = k.substr(6, dot - 6), field = k.substr(dot + 1);
      if (name != "passkey" && name != "needle" && name != "mqar")
        fail(a.origin, ": unknown task ", printable(name), " (passkey, needle or mqar)");
      if (!task_index.count(name)) {
        task_index[name] = g.tasks.size();
        g.tasks.push_back({});
        g.tasks.back().name = name;
      }
      GridTask& t = g.tasks[task_index[name]];
      if (field == "set") t.sets = sets_of(k, a);
      else if (field == "steps") t.steps = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
      else if (field == "lengths") {
        t.lengths = parse_quoted(k, a.value, a.origin);
        t.lengths_origin = a.origin + ": " + k;
      }
      else if (field == "samples") t.samples = (int)parse_int(k, a.value, a.origin, 1, kMaxInt);
      else if (name == "mqar" && field == "keys") t.mqar_keys = (int)parse_int(k, a.value, a.origin, 2, tasks::kMqarMaxKeys);
      else if (name == "mqar" && field == "kv_pairs") t.kv_pairs = (int)parse_int(k, a.value, a.origin, 1, tasks::kMqarMaxKeys);
      else if (name == "mqar" && field == "queries") t.queries = (int)parse_int(k, a.value, a.origin, 1, tasks::kMqarMaxKeys);
      else if (name == "needle" && field == "depths") t.depths = parse_depths(k, a);
      else if (field == "keys" || field == "kv_pairs" || field == "queries" || field == "depths")
        fail(a.origin, ": ", k, ": ", field, " is a key of [tasks.", field == "depths" ? "needle" : "mqar", "] only");
      else
        fail(a.origin, ": unknown task key ", printable(field), " (known: set, steps, lengths, samples; [tasks.mqar] also keys, kv_pairs, queries; "
             "[tasks.needle] also depths)");
      // The shape's own order, where both sides are given (the defaults are checked per cell, plan_runs).
      if (t.mqar_keys > 0 && t.kv_pairs > t.mqar_keys)
        fail(a.origin, ": ", k, ": kv_pairs = ", t.kv_pairs, " exceeds keys = ", t.mqar_keys, " (each pair has its own key)");
      if (t.kv_pairs > 0 && t.queries > t.kv_pairs)
        fail(a.origin, ": ", k, ": queries = ", t.queries, " exceeds kv_pairs = ", t.kv_pairs, " (each query asks one pair)");
      for (const auto& s : t.sets)
        if (s.rfind("model.vocab_size", 0) == 0) fail(a.origin, ": ", k, ": the task fixes model.vocab_size");
    } else if (k.rfind("variants.", 0) == 0 && k.size() > 13 && k.substr(k.size() - 4) == ".set") {
      const std::string name = k.substr(9, k.size() - 13);
      for (char c : name)
        if (!(std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '+'))
          fail(a.origin, ": variant name ", printable(name), " may use letters, digits, '-', '_' and '+' only");
      index[name] = g.variants.size();
      g.variants.push_back({name, sets_of(k, a)});
    } else {
      fail(a.origin, ": unknown grid key ", printable(k),
           " (known: name, preset, set, language_model, steps, seeds, baseline, ckpt_every, analyze, analyze_sequences, lengths, length_tokens, "
           "[variants.NAME] set, [tasks.NAME] set/steps/lengths/samples, [primary] comparisons/effect/alpha/power, [budget] variant/factors)");
    }
  }
  if (g.variants.empty()) fail(origin, ": no variants (add e.g. [variants.rope] set = [\"attn.pos=rope\"])");
  if (!g.language_model) {  // checked before the keys' own cross-checks: they name what to remove
    if (g.tasks.empty())
      fail(language_model_where, ": language_model = false, but the grid has no [tasks.NAME] table: it would train nothing "
           "(add e.g. [tasks.passkey] steps = 200, or leave language_model out)");
    if (!lm_keys.empty())
      fail(lm_keys[0].second, ": ", lm_keys[0].first, " is for the language model, which this grid does not train (language_model = false at ",
           language_model_where, "); remove it (a task's own steps, lengths and samples go in its [tasks.NAME] table)");
  }
  if (g.seeds.empty()) fail(origin, ": seeds is empty");
  if (std::set<uint64_t>(g.seeds.begin(), g.seeds.end()).size() != g.seeds.size()) fail(origin, ": seeds repeat a value");
  if (!baseline_given) g.baseline = g.variants[0].name;
  if (!index.count(g.baseline)) fail(origin, ": baseline '", g.baseline, "' is not a variant");
  if (!primary_where.empty() && g.primary.empty()) fail(primary_where, ": [primary] has no comparisons (add comparisons = [\"A < B\", ...])");
  validate_primary(g, index, primary_where);
  if (!budget_where.empty()) {
    if (budget_factors_where.empty()) fail(budget_where, ": [budget] has no factors (add factors = [0.5, 2]: runs at k × steps)");
    if (g.budget.variant.empty()) g.budget.variant = g.baseline;
    if (!index.count(g.budget.variant)) fail(budget_where, ": budget.variant '", g.budget.variant, "' is not a variant");
    if (g.steps > 0) compare::check_budget_steps(g.budget, g.steps, budget_factors_where);
  }
  if (!g.preset.empty() && !preset_config_text(g.preset)) fail(origin, ": unknown preset '", g.preset, "' (tiny, small or bench)");
  return g;
}

Grid parse_grid_file(const std::string& path) { return parse_grid_text(compare::read_text(path), path); }

}  // namespace attnlab
