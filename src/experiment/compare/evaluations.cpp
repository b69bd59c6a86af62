#include "experiment/compare/evaluations.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace attnlab::compare {

using nlohmann::json;

namespace {

std::vector<double> downsample(const json& arr, size_t max_points, std::vector<double>* xs) {
  std::vector<double> out;
  const size_t n = arr.size();
  if (n == 0) return out;
  const size_t stride = n <= max_points ? 1 : (n + max_points - 1) / max_points;
  for (size_t i = 0; i < n; i += stride) {
    out.push_back(arr[i].is_number() ? arr[i].get<double>() : NAN);
    if (xs) xs->push_back(double(i));
  }
  return out;
}

}  // namespace

// The parts of an analysis document (docs/analysis.md) the report draws.
json compact_analysis(const json& a) {
  json c = json::object();
  json sim = json::array();
  for (const auto& l : a["attention"]["layers"]) {
    auto m = [&](const char* k) { return l.contains(k) && l[k].is_object() ? l[k]["mean"] : json(nullptr); };
    sim.push_back({{"layer", l["layer"]}, {"xsa", l["xsa"]}, {"cos_yv", m("cos_yv")}, {"self", m("self")}, {"vsim", m("vsim")}});
  }
  c["similarity"] = sim;
  c["goat"] = nullptr;
  if (a.contains("goat") && a["goat"].is_object()) {
    json g = json::array();
    for (const auto& l : a["goat"]["layers"]) {
      json heads = json::array();
      std::vector<double> xs;
      for (const auto& h : l["kv_heads"]) {
        xs.clear();
        heads.push_back(downsample(h["rel"], 256, &xs));
      }
      // downsample's x values are indices, i.e. Δ.
      g.push_back({{"layer", l["layer"]}, {"delta", xs}, {"rel", heads}});
    }
    c["goat"] = json{{"T_train", a["goat"]["T_train"]}, {"layers", g}};
  }
  c["depth"] = nullptr;
  if (a.contains("depth") && a["depth"].is_object()) {
    json streams = json::array();
    for (const auto& s : a["depth"]["streams"]) {
      json rows = json::array();
      for (const auto& r : s["rows"]) rows.push_back({{"label", r["label"]}, {"weights", r["weights"]}});
      streams.push_back(rows);
    }
    c["depth"] = json{{"kind", a["depth"]["kind"]}, {"columns", a["depth"]["columns"]}, {"streams", streams}};
  }
  c["loss"] = a["loss"];
  return c;
}

// The parts of a length report (docs/long-context.md) the table and the report use: per length,
// the multiple of T_train, the loss over all positions and over positions ≥ T_train (null: not
// applicable, learned positions beyond T_train).
json compact_lengths(const json& r) {
  json out{{"train_len", r["train_len"]}, {"token_budget", r["token_budget"]}, {"multiple", json::array()}, {"loss", json::array()},
           {"loss_beyond_train", json::array()}};
  // Per length, the loss of each position bucket [i·bucket, (i+1)·bucket) (null: no such length or
  // no tokens there): the length difference-in-differences test them (compare/inference.h).
  json bucket_loss = json::array();
  for (const auto& l : r["lengths"]) {
    out["multiple"].push_back(l["multiple"]);
    out["loss"].push_back(l["loss"]);
    out["loss_beyond_train"].push_back(l["loss_beyond_train"]);
    json b = nullptr;
    if (l.contains("buckets") && l["buckets"].is_array()) {
      b = json::array();
      for (const auto& x : l["buckets"]) b.push_back(x.contains("loss") ? x["loss"] : json(nullptr));
    }
    bucket_loss.push_back(b);
  }
  if (r.contains("bucket") && r["bucket"].is_number()) {
    out["bucket"] = r["bucket"];
    out["bucket_loss"] = bucket_loss;
  }
  return out;
}

// A task report per length: strict and per-token accuracy and the answer's log-probability, the
// needle's cells averaged over its depths (each depth has the same number of samples); the counts
// behind the strict accuracy (solved of scored samples, summed over depths) and, for the needle,
// the same per depth: the Wilson intervals pool them over seeds (compare/inference.h).
json compact_task(const json& r) {
  std::vector<double> mult;
  std::map<double, std::vector<const json*>> at;
  for (const auto& c : r["cells"]) {
    const double m = c["multiple"].get<double>();
    if (!at.count(m)) mult.push_back(m);
    at[m].push_back(&c);
  }
  json out{{"train_len", r["train_len"]}, {"samples", r["samples"]}, {"multiple", json::array()}, {"strict_accuracy", json::array()},
           {"token_accuracy", json::array()}, {"answer_logprob", json::array()}};
  for (double m : mult) {
    out["multiple"].push_back(m);
    for (const char* k : {"strict_accuracy", "token_accuracy", "answer_logprob"}) {
      double sum = 0;
      bool ok = true;
      for (const json* c : at[m]) {
        if (!(*c)[k].is_number()) { ok = false; break; }
        sum += (*c)[k].get<double>();
      }
      out[k].push_back(ok ? json(sum / double(at[m].size())) : json(nullptr));
    }
  }
  // The counts, where the report has them (every applicable cell does).
  std::vector<double> depths;
  for (const auto& c : r["cells"])
    if (c.contains("depth") && c["depth"].is_number() && std::find(depths.begin(), depths.end(), c["depth"].get<double>()) == depths.end())
      depths.push_back(c["depth"].get<double>());
  auto counted = [](const json& c) { return c.value("applicable", false) && c.contains("solved") && c.contains("samples"); };
  json solved = json::array(), scored = json::array(), solved_d = json::array(), scored_d = json::array();
  for (double m : mult) {
    long long k = 0, n = 0;
    bool ok = true;
    json sd = json::array(), nd = json::array();
    for (const json* c : at[m]) {
      if (!counted(*c)) { ok = false; break; }
      k += (*c)["solved"].get<long long>();
      n += (*c)["samples"].get<long long>();
    }
    for (double d : depths) {
      const json* cell = nullptr;
      for (const json* c : at[m])
        if (c->contains("depth") && (*c)["depth"].get<double>() == d) cell = c;
      sd.push_back(cell && counted(*cell) ? (*cell)["solved"] : json(nullptr));
      nd.push_back(cell && counted(*cell) ? (*cell)["samples"] : json(nullptr));
    }
    solved.push_back(ok ? json(k) : json(nullptr));
    scored.push_back(ok ? json(n) : json(nullptr));
    solved_d.push_back(sd);
    scored_d.push_back(nd);
  }
  out["solved"] = solved;
  out["scored"] = scored;
  if (!depths.empty()) {
    out["depths"] = depths;
    out["solved_by_depth"] = solved_d;
    out["scored_by_depth"] = scored_d;
  }
  return out;
}

void complete_from_run_files(json& run, const std::filesystem::path& dir) {
  auto read = [](const std::filesystem::path& p) -> json {
    if (!std::filesystem::exists(p)) return nullptr;
    try {
      std::ifstream f(p);
      return json::parse(f);
    } catch (const json::exception&) {
      return nullptr;  // an unreadable report adds nothing (the run's own numbers stay)
    }
  };
  if (run.contains("lengths") && run["lengths"].is_object() && !run["lengths"].contains("bucket_loss")) {
    const json lj = read(dir / "lengths.json");
    if (lj.is_object() && lj.contains("lengths")) {
      const json c = compact_lengths(lj);
      if (c.contains("bucket_loss") && c["multiple"] == run["lengths"]["multiple"]) {
        run["lengths"]["bucket"] = c["bucket"];
        run["lengths"]["bucket_loss"] = c["bucket_loss"];
      }
    }
  }
  if (run.contains("tasks") && run["tasks"].is_object())
    for (auto it = run["tasks"].begin(); it != run["tasks"].end(); ++it) {
      json& t = it.value();
      if (!t.is_object() || t.contains("solved") || !t.contains("multiple")) continue;
      const json tj = read(dir / ("task_" + it.key()) / "eval.json");
      if (!tj.is_object() || !tj.contains("cells")) continue;
      const json c = compact_task(tj);
      if (c["multiple"] != t["multiple"]) continue;
      for (const char* k : {"solved", "scored", "depths", "solved_by_depth", "scored_by_depth"})
        if (c.contains(k)) t[k] = c[k];
    }
}

}  // namespace attnlab::compare
