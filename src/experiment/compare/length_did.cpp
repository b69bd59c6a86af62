// The length sweep's difference-in-differences (docs/compare.md "Length difference-in-differences"):
// does a variant's gap to another grow or shrink with the evaluated length? For each comparison A − B
// (the grid's [primary] comparisons, else every variant against the baseline), each length L > 1×
// and each position range (all positions, then each position bucket of the length report), per seed
//   DiD_s = (A_s(L, range) − B_s(L, range)) − (A_s(1×) − B_s(1×)),
// 1× over all its positions (its only bucket). A seed fixes the data order and the scored tokens of
// every variant, so the DiD is paired by seed: its mean with the t-interval on n − 1 degrees of
// freedom, the two-sided t-test p and the exact sign-flip p (experiment/stats.h). A level effect (a
// gap that is the same at every length) gives DiD ≈ 0. These are secondary tests: there are many
// (lengths × ranges × comparisons) and none is adjusted for the others.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "experiment/compare/common.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab::compare {

using nlohmann::json;

namespace {

// The compact length report of every finished run of `variant` that has one, by seed.
std::map<uint64_t, const json*> lengths_by_seed(const json& results, const std::string& variant) {
  std::map<uint64_t, const json*> out;
  for (const auto& r : results["runs"])
    if (!is_budget_run(r) && r["variant"] == variant && r.contains("seed") && r["seed"].is_number_unsigned() && r.contains("lengths") &&
        r["lengths"].is_object())
      out[r["seed"].get<uint64_t>()] = &r["lengths"];
  return out;
}

// The loss of a length report at length index i: all positions (bucket < 0) or bucket j.
json loss_at(const json& l, size_t i, int bucket) {
  if (bucket < 0) return i < l["loss"].size() ? l["loss"][i] : json(nullptr);
  if (!l.contains("bucket_loss") || i >= l["bucket_loss"].size() || !l["bucket_loss"][i].is_array()) return nullptr;
  const json& b = l["bucket_loss"][i];
  return (size_t)bucket < b.size() ? b[bucket] : json(nullptr);
}


}  // namespace

json length_did(const json& results) {
  const json& g = results["grid"];
  bool any = false;
  for (const auto& r : results["runs"]) any |= !is_budget_run(r) && r.contains("lengths") && r["lengths"].is_object();
  if (!any) return nullptr;
  // The comparisons: [primary]'s, else each variant against the baseline.
  std::vector<std::array<std::string, 3>> pairs;  // text, a, b
  const bool primary = g.contains("primary") && g["primary"].is_object() && !g["primary"]["comparisons"].empty();
  if (primary) {
    for (const auto& c : g["primary"]["comparisons"]) pairs.push_back({c["text"].get<std::string>(), c["a"].get<std::string>(), c["b"].get<std::string>()});
  } else {
    const std::string base = g["baseline"].get<std::string>();
    for (const auto& v : g["variants"])
      if (v["name"] != base) pairs.push_back({v["name"].get<std::string>() + " − " + base, v["name"].get<std::string>(), base});
  }
  json out{{"reference_multiple", 1}, {"comparisons_from", primary ? "primary" : "baseline"}, {"comparisons", json::array()}};
  int tests = 0;
  std::string note;
  for (const auto& [text, a, b] : pairs) {
    const auto la = lengths_by_seed(results, a), lb = lengths_by_seed(results, b);
    std::vector<std::pair<const json*, const json*>> seeds;  // both variants, the same lengths
    for (const auto& [seed, x] : la)
      if (lb.count(seed) && (*x)["multiple"] == (*lb.at(seed))["multiple"]) seeds.push_back({x, lb.at(seed)});
    json cj{{"comparison", text}, {"a", a}, {"b", b}, {"rows", json::array()}};
    if (seeds.empty()) {
      out["comparisons"].push_back(cj);
      continue;
    }
    const json& first = *seeds[0].first;
    const json& multiple = first["multiple"];
    size_t i1 = multiple.size();
    for (size_t i = 0; i < multiple.size(); ++i)
      if (multiple[i].is_number() && multiple[i].get<double>() == 1.0) i1 = i;
    if (i1 == multiple.size()) {
      note = "the sweep has no 1× length (lengths = \"1,...\"): no difference-in-differences";
      out["comparisons"].push_back(cj);
      continue;
    }
    const int width = first.contains("bucket") && first["bucket"].is_number() ? first["bucket"].get<int>() : 0;
    const int train_len = first.contains("train_len") && first["train_len"].is_number() ? first["train_len"].get<int>() : 0;
    if (width > 0) out["bucket"] = width;
    for (size_t i = 0; i < multiple.size(); ++i) {
      if (!multiple[i].is_number() || multiple[i].get<double>() <= 1.0) continue;
      const double m = multiple[i].get<double>();
      const long long length = std::llround(m * train_len);
      size_t buckets = 0;
      for (const auto& [x, y] : seeds)
        if (x->contains("bucket_loss") && i < (*x)["bucket_loss"].size() && (*x)["bucket_loss"][i].is_array())
          buckets = std::max(buckets, (*x)["bucket_loss"][i].size());
      for (int bucket = -1; bucket < (int)buckets; ++bucket) {
        std::vector<double> da, db, at1, atL;  // per seed: A's and B's change from 1×, and the gaps
        for (const auto& [x, y] : seeds) {
          const json a1 = loss_at(*x, i1, -1), b1 = loss_at(*y, i1, -1), aL = loss_at(*x, i, bucket), bL = loss_at(*y, i, bucket);
          if (!a1.is_number() || !b1.is_number() || !aL.is_number() || !bL.is_number()) continue;
          da.push_back(aL.get<double>() - a1.get<double>());
          db.push_back(bL.get<double>() - b1.get<double>());
          at1.push_back(a1.get<double>() - b1.get<double>());
          atL.push_back(aL.get<double>() - bL.get<double>());
        }
        if (da.empty()) continue;
        json row{{"multiple", m}, {"n", da.size()}};
        if (bucket < 0) {
          row["positions"] = "all";
          row["start"] = nullptr;
          row["end"] = nullptr;
        } else {
          const long long start = (long long)bucket * width, end = std::min(length, start + width);
          std::string range = "[";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
          range += std::to_string(start) + ", " + std::to_string(end) + ")";
          row["positions"] = range;
          row["start"] = start;
          row["end"] = end;
        }
        std::vector<double> did(da.size());
        for (size_t s = 0; s < da.size(); ++s) did[s] = da[s] - db[s];
        const stats::Paired pd = stats::paired(da, db);
        const stats::SignFlip sf = stats::sign_flip(did, stats::Alternative::two_sided);
        row["diff_at_1"] = num_or_null(stats::mean(at1));
        row["diff_at_length"] = num_or_null(stats::mean(atL));
        row["did"] = num_or_null(pd.diff);
        row["values"] = did;
        row["sd"] = pd.valid ? json(pd.sd) : json(nullptr);
        row["t"] = pd.valid ? json(pd.t) : json(nullptr);
        row["df"] = pd.valid ? json(pd.df) : json(nullptr);
        row["p"] = pd.valid ? json(pd.p) : json(nullptr);
        row["ci95"] = pd.valid ? json::array({pd.lo, pd.hi}) : json(nullptr);
        row["sign_flip_p"] = sf.valid ? json(sf.p) : json(nullptr);
        row["sign_flip_p_min"] = sf.valid ? json(sf.p_min) : json(nullptr);
        tests += pd.valid;
        cj["rows"].push_back(row);
      }
    }
    out["comparisons"].push_back(cj);
  }
  out["tests"] = tests;
  if (!note.empty()) out["note"] = note;
  return out;
}

TextTable length_did_table(const json& did) {
  TextTable t{{"comparison", "length", "positions", "n", "Δ at 1×", "Δ at length", "DiD", "95% interval", "p (t)", "p (sign-flip)"},
              {false, true, false, true, true, true, true, true, true, true},
              {}};
  for (const auto& c : did["comparisons"])
    for (const auto& r : c["rows"]) {
      char m[32];
      std::snprintf(m, sizeof m, "%g×", r["multiple"].get<double>());
      std::string ci = "–";
      if (r["ci95"].is_array()) {
        ci = "[";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
        ci += num(element(r["ci95"], 0), "%+.4f");
        ci += ", ";
        ci += num(element(r["ci95"], 1), "%+.4f");
        ci += "]";
      }
      t.rows.push_back({c["comparison"].get<std::string>(), m, r["positions"].get<std::string>(), std::to_string(r["n"].get<int>()),
                        num(r["diff_at_1"], "%+.4f"), num(r["diff_at_length"], "%+.4f"), num(r["did"], "%+.4f"), ci, pval(r["p"]),
                        pval(r["sign_flip_p"])});
    }
  return t;
}

}  // namespace attnlab::compare
