// The synthetic tasks' strict accuracy with its uncertainty (docs/compare.md "Task accuracy"): per
// variant and length the solved samples pooled over the seeds, k of n = samples × seeds, with the
// Wilson score interval, the difference to the baseline with Newcombe's hybrid score interval, and
// for the needle the same per depth ("NIAH by depth"). Pooling treats every scored sample as one
// Bernoulli trial: the interval is the evaluation's sampling error for these trained models, not the
// spread between seeds (the mean ± sd over seeds of the task tables shows that).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab::compare {

using nlohmann::json;

namespace {

constexpr double kAlpha = 0.05;

json proportion_json(const stats::Proportion& p, int seeds) {
  if (!p.valid) return nullptr;
  return {{"solved", p.successes}, {"samples", p.n}, {"seeds", seeds}, {"accuracy", p.p}, {"ci95", {p.lo, p.hi}}};
}

// x[i] (and x[i][d] for d ≥ 0), or null where there is no such entry.
json element_at(const json& x, size_t i, int d) {
  if (!x.is_array() || i >= x.size()) return nullptr;
  if (d < 0) return x[i];
  return x[i].is_array() && (size_t)d < x[i].size() ? x[i][d] : json(nullptr);
}

// The solved and scored samples of every part at length index i (and depth index d ≥ 0), summed;
// false when a part lacks them there.
bool pooled(const std::vector<const json*>& parts, const char* solved_key, const char* scored_key, size_t i, int d, long long* k,
            long long* n) {
  *k = *n = 0;
  for (const json* p : parts) {
    if (!p->contains(solved_key) || !p->contains(scored_key)) return false;
    const json s = element_at((*p)[solved_key], i, d), m = element_at((*p)[scored_key], i, d);
    if (!s.is_number_integer() || !m.is_number_integer()) return false;
    *k += s.get<long long>();
    *n += m.get<long long>();
  }
  return !parts.empty();
}


std::string interval(const json& c, const char* format) {
  if (!c.is_array()) return "–";
  std::string s = "[";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
  s += num(c[0], format);
  s += ", ";
  s += num(c[1], format);
  s += "]";
  return s;
}

std::string multiple_text(const json& m) {
  char b[32];
  std::snprintf(b, sizeof b, "%g×", m.get<double>());
  return b;
}

}  // namespace

json task_accuracy(const json& results) {
  const json& g = results["grid"];
  if (!g.contains("tasks") || !g["tasks"].is_array() || g["tasks"].empty()) return nullptr;
  const std::string base = g["baseline"].get<std::string>();
  json tasks = json::array();
  for (const auto& t : g["tasks"]) {
    const std::string name = t["name"].get<std::string>();
    json entry{{"task", name}, {"multiple", nullptr}, {"variants", json::array()}};
    // The parts of each variant (its runs' compact task reports), in the grid's order.
    std::vector<std::pair<std::string, std::vector<const json*>>> by_variant;
    for (const auto& v : g["variants"]) {
      const std::string vn = v["name"].get<std::string>();
      std::vector<const json*> parts;
      for (const auto& r : results["runs"])
        if (!is_budget_run(r) && r["variant"] == vn && r.contains("tasks") && r["tasks"].is_object() && r["tasks"].contains(name))
          parts.push_back(&r["tasks"][name]);
      if (parts.empty()) continue;
      if (entry["multiple"].is_null()) entry["multiple"] = (*parts[0])["multiple"];
      if (!entry.contains("depths") && parts[0]->contains("depths")) entry["depths"] = (*parts[0])["depths"];
      // Runs evaluated at other lengths or depths (not a grid of one evaluation) are not pooled.
      std::vector<const json*> same;
      for (const json* p : parts)
        if ((*p)["multiple"] == entry["multiple"] && (!entry.contains("depths") || (p->contains("depths") && (*p)["depths"] == entry["depths"])))
          same.push_back(p);
      by_variant.push_back({vn, same});
    }
    if (entry["multiple"].is_null()) continue;
    const size_t lengths = entry["multiple"].size();
    const size_t depths = entry.contains("depths") ? entry["depths"].size() : 0;
    auto strict_at = [&](const std::vector<const json*>& parts, size_t i) {
      long long k = 0, n = 0;
      return pooled(parts, "solved", "scored", i, -1, &k, &n) ? stats::wilson(k, n, kAlpha) : stats::wilson(0, 0, kAlpha);
    };
    const std::vector<const json*>* base_parts = nullptr;
    for (const auto& [vn, parts] : by_variant)
      if (vn == base) base_parts = &parts;
    for (const auto& [vn, parts] : by_variant) {
      json vj{{"variant", vn}, {"seeds", parts.size()}, {"strict", json::array()}};
      for (size_t i = 0; i < lengths; ++i) vj["strict"].push_back(proportion_json(strict_at(parts, i), (int)parts.size()));
      if (vn == base || !base_parts) {
        vj["vs_baseline"] = nullptr;
      } else {
        vj["vs_baseline"] = json::array();
        for (size_t i = 0; i < lengths; ++i) {
          const stats::ProportionDifference d = stats::newcombe_difference(strict_at(parts, i), strict_at(*base_parts, i), kAlpha);
          vj["vs_baseline"].push_back(d.valid ? json{{"diff", d.diff}, {"ci95", {d.lo, d.hi}}} : json(nullptr));
        }
      }
      if (depths > 0) {
        json by_depth = json::array();
        for (size_t i = 0; i < lengths; ++i) {
          json row = json::array();
          for (size_t d = 0; d < depths; ++d) {
            long long k = 0, n = 0;
            row.push_back(pooled(parts, "solved_by_depth", "scored_by_depth", i, (int)d, &k, &n)
                              ? proportion_json(stats::wilson(k, n, kAlpha), (int)parts.size()) : json(nullptr));
          }
          by_depth.push_back(row);
        }
        vj["by_depth"] = by_depth;
      }
      entry["variants"].push_back(vj);
    }
    tasks.push_back(entry);
  }
  if (tasks.empty()) return nullptr;
  return {{"alpha", kAlpha}, {"tasks", tasks}};
}

TextTable task_accuracy_table(const json& task) {
  TextTable t{{"variant", "length", "solved / samples (seeds)", "strict accuracy", "Wilson 95%", "Δ vs baseline", "Newcombe 95%"},
              {false, true, true, true, true, true, true},
              {}};
  for (const auto& v : task["variants"])
    for (size_t i = 0; i < task["multiple"].size(); ++i) {
      const json& s = element(v["strict"], i);
      const json d = element(v["vs_baseline"], i);
      const std::string counts = s.is_object() ? std::to_string(s["solved"].get<long long>()) + " / " +
                                                     std::to_string(s["samples"].get<long long>()) + " (" +
                                                     std::to_string(s["seeds"].get<int>()) + ")"
                                               : "–";
      t.rows.push_back({v["variant"].get<std::string>(), multiple_text(element(task["multiple"], i)), counts,
                        s.is_object() ? num(s["accuracy"], "%.3f") : "–", s.is_object() ? interval(s["ci95"], "%.3f") : "–",
                        v["vs_baseline"].is_null() ? "baseline" : d.is_object() ? num(d["diff"], "%+.3f") : "–",
                        d.is_object() ? interval(d["ci95"], "%+.3f") : ""});
    }
  return t;
}

TextTable depth_accuracy_table(const json& task) {
  TextTable t{{"variant", "length"}, {false, true}, {}};
  if (!task.contains("depths")) return t;
  for (const auto& d : task["depths"]) {
    char b[48];
    std::snprintf(b, sizeof b, "depth %g", d.get<double>());
    t.header.push_back(b);
    t.numeric.push_back(true);
  }
  for (const auto& v : task["variants"])
    for (size_t i = 0; i < task["multiple"].size(); ++i) {
      std::vector<std::string> row{v["variant"].get<std::string>(), multiple_text(element(task["multiple"], i))};
      for (size_t d = 0; d < task["depths"].size(); ++d) {
        const json& c = v.contains("by_depth") ? element(element(v["by_depth"], i), d) : json(nullptr);
        row.push_back(c.is_object() ? num(c["accuracy"], "%.3f") + " " + interval(c["ci95"], "%.3f") : "–");
      }
      t.rows.push_back(row);
    }
  return t;
}

}  // namespace attnlab::compare
