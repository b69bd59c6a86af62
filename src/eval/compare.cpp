#include "eval/compare.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/timer.h"
#include "data/files.h"
#include "data/shard.h"
#include "eval/analyze.h"
#include "eval/long_context.h"
#include "eval/report.h"
#include "eval/stats.h"
#include "eval/tasks.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/version.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace attnlab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

std::string parse_string(const std::string& v, const std::string& where, const std::string& key) {
  const std::string s = trim(v);
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') fail(where, ": ", key, " must be a quoted string, got ", s);
  return s.substr(1, s.size() - 2);
}

// A one-line array of quoted strings or of integers: ["a", "b"] or [1, 2].
std::vector<std::string> parse_array(const std::string& v, const std::string& where, const std::string& key) {
  const std::string s = trim(v);
  if (s.size() < 2 || s.front() != '[' || s.back() != ']') fail(where, ": ", key, " must be a one-line array [ ... ], got ", s);
  std::vector<std::string> out;
  size_t i = 1;
  const size_t end = s.size() - 1;
  while (i < end) {
    while (i < end && (s[i] == ' ' || s[i] == '\t' || s[i] == ',')) ++i;
    if (i >= end) break;
    if (s[i] == '"') {
      const size_t close = s.find('"', i + 1);
      if (close == std::string::npos || close >= end) fail(where, ": ", key, ": unterminated string in ", s);
      out.push_back(s.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      size_t j = i;
      while (j < end && s[j] != ',') ++j;
      out.push_back(trim(s.substr(i, j - i)));
      i = j;
    }
  }
  return out;
}

long long parse_int(const std::string& v, const std::string& where, const std::string& key) {
  size_t used = 0;
  long long x = 0;
  try { x = std::stoll(trim(v), &used); } catch (...) { used = 0; }
  if (used == 0 || used != trim(v).size()) fail(where, ": ", key, " must be an integer, got ", v);
  return x;
}

bool parse_bool(const std::string& v, const std::string& where, const std::string& key) {
  const std::string s = trim(v);
  if (s == "true") return true;
  if (s == "false") return false;
  fail(where, ": ", key, " must be true or false, got ", s);
  return false;
}

std::string fmt_eta(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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
  for (const auto& l : r["lengths"]) {
    out["multiple"].push_back(l["multiple"]);
    out["loss"].push_back(l["loss"]);
    out["loss_beyond_train"].push_back(l["loss_beyond_train"]);
  }
  return out;
}

// A task report per length: strict and per-token accuracy and the answer's log-probability, the
// needle's cells averaged over its depths (each depth has the same number of samples).
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
  return out;
}

int64_t checkpoint_step(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  auto it = f.metadata().find("step");
  if (it == f.metadata().end()) return -1;
  return std::stoll(it->second);
}

// The checkpoint with the most steps in a run directory ("" when none).
std::string latest_checkpoint(const fs::path& dir, int64_t* step) {
  std::string best;
  int64_t best_step = -1;
  if (!fs::exists(dir)) return best;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 12 || name.substr(name.size() - 12) != ".safetensors") continue;
    if (name != "model.safetensors" && name.rfind("step_", 0) != 0) continue;
    int64_t s = -1;
    try { s = checkpoint_step(e.path().string()); } catch (const std::exception&) { continue; }  // torn or foreign file
    if (s > best_step) { best_step = s; best = e.path().string(); }
  }
  if (step) *step = best_step;
  return best;
}

// Removes the trainer's step_NNNNNN.safetensors in `dir` with a step below `keep` (all of them for
// keep < 0): a run keeps at most its latest periodic checkpoint, and none once finished.
void prune_step_checkpoints(const fs::path& dir, int64_t keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() != 23 || name.substr(11) != ".safetensors") continue;
    const long long s = std::atoll(name.substr(5, 6).c_str());
    if (keep < 0 || s < keep) fs::remove(e.path(), ec);
  }
}

std::string sets_text(const std::vector<std::string>& sets) {
  std::string s;
  for (const auto& x : sets) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  data_files::write_file_atomically(path, {content}, "compare output");
}

Grid parse_grid_text(const std::string& text, const std::string& origin) {
  Grid g;
  bool baseline_given = false;
  std::map<std::string, size_t> index, task_index;
  for (const auto& a : parse_config_text(text, origin)) {
    const std::string& k = a.key;
    if (k == "name") g.name = parse_string(a.value, a.origin, k);
    else if (k == "preset") g.preset = parse_string(a.value, a.origin, k);
    else if (k == "set") g.sets = parse_array(a.value, a.origin, k);
    else if (k == "baseline") { g.baseline = parse_string(a.value, a.origin, k); baseline_given = true; }
    else if (k == "steps") g.steps = (int)parse_int(a.value, a.origin, k);
    else if (k == "ckpt_every") g.ckpt_every = (int)parse_int(a.value, a.origin, k);
    else if (k == "analyze") g.analyze = parse_bool(a.value, a.origin, k);
    else if (k == "analyze_sequences") g.analyze_sequences = (int)parse_int(a.value, a.origin, k);
    else if (k == "seeds") {
      g.seeds.clear();
      for (const auto& s : parse_array(a.value, a.origin, k)) {
        const long long v = parse_int(s, a.origin, k);
        if (v < 0) fail(a.origin, ": seeds must be non-negative, got ", v);
        g.seeds.push_back((uint64_t)v);
      }
    } else if (k == "lengths") {
      g.lengths = parse_string(a.value, a.origin, k);
    } else if (k == "length_tokens") {
      g.length_tokens = (int)parse_int(a.value, a.origin, k);
      if (g.length_tokens < 1) fail(a.origin, ": length_tokens must be positive");
    } else if (k.rfind("tasks.", 0) == 0) {
      const size_t dot = k.find('.', 6);
      if (dot == std::string::npos) fail(a.origin, ": a task's settings go in a [tasks.NAME] table, got ", k);
      const std::string name = k.substr(6, dot - 6), field = k.substr(dot + 1);
      if (name != "passkey" && name != "needle" && name != "mqar")
        fail(a.origin, ": unknown task '", name, "' (passkey, needle or mqar)");
      if (!task_index.count(name)) {
        task_index[name] = g.tasks.size();
        g.tasks.push_back({});
        g.tasks.back().name = name;
      }
      GridTask& t = g.tasks[task_index[name]];
      if (field == "set") t.sets = parse_array(a.value, a.origin, k);
      else if (field == "steps") t.steps = (int)parse_int(a.value, a.origin, k);
      else if (field == "lengths") t.lengths = parse_string(a.value, a.origin, k);
      else if (field == "samples") t.samples = (int)parse_int(a.value, a.origin, k);
      else fail(a.origin, ": unknown task key '", field, "' (known: set, steps, lengths, samples)");
      if (t.steps < 1) fail(a.origin, ": ", k, " must be at least 1");
      if (t.samples < 1) fail(a.origin, ": ", k, " must be at least 1");
      for (const auto& s : t.sets)
        if (s.rfind("model.vocab_size", 0) == 0) fail(a.origin, ": ", k, ": the task fixes model.vocab_size");
    } else if (k.rfind("variants.", 0) == 0 && k.size() > 13 && k.substr(k.size() - 4) == ".set") {
      const std::string name = k.substr(9, k.size() - 13);
      for (char c : name)
        if (!(std::isalnum((unsigned char)c) || c == '-' || c == '_' || c == '+'))
          fail(a.origin, ": variant name '", name, "' may use letters, digits, '-', '_' and '+' only");
      if (index.count(name)) fail(a.origin, ": variant '", name, "' is defined twice");
      index[name] = g.variants.size();
      g.variants.push_back({name, parse_array(a.value, a.origin, k)});
    } else {
      fail(a.origin, ": unknown grid key '", k,
           "' (known: name, preset, set, steps, seeds, baseline, ckpt_every, analyze, analyze_sequences, lengths, length_tokens, "
           "[variants.NAME] set, [tasks.NAME] set/steps/lengths/samples)");
    }
  }
  if (g.variants.empty()) fail(origin, ": no variants (add e.g. [variants.rope] set = [\"attn.pos=rope\"])");
  if (g.seeds.empty()) fail(origin, ": seeds is empty");
  if (std::set<uint64_t>(g.seeds.begin(), g.seeds.end()).size() != g.seeds.size()) fail(origin, ": seeds repeat a value");
  if (!baseline_given) g.baseline = g.variants[0].name;
  if (!index.count(g.baseline)) fail(origin, ": baseline '", g.baseline, "' is not a variant");
  if (g.steps < 0) fail(origin, ": steps must be positive");
  if (g.analyze_sequences < 1) fail(origin, ": analyze_sequences must be at least 1");
  if (!g.preset.empty() && !preset_config_text(g.preset)) fail(origin, ": unknown preset '", g.preset, "' (tiny, small or bench)");
  return g;
}

Grid parse_grid_file(const std::string& path) { return parse_grid_text(read_text(path), path); }

void summarize_results(json& results) {
  std::vector<std::string> order;
  for (const auto& v : results["grid"]["variants"]) order.push_back(v["name"].get<std::string>());
  const std::string base = results["grid"]["baseline"].get<std::string>();
  std::map<std::string, std::vector<double>> loss, tps;
  std::map<std::string, std::map<uint64_t, double>> loss_by_seed;
  std::map<std::string, json> params;
  for (const auto& r : results["runs"]) {
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
      if (r["variant"].get<std::string>() == v) vr.push_back(&r);
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
}

std::string results_markdown(const json& results) {
  std::ostringstream o;
  const auto& g = results["grid"];
  char buf[512];
  o << "# attnlab compare: " << g["name"].get<std::string>() << "\n\n";
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
  // The length sweep and the tasks, when the grid has them.
  auto cell = [](const json& band, size_t i, const char* fmt) {
    char b[64];
    if (!band["mean"][i].is_number()) return std::string("–");
    std::snprintf(b, sizeof b, fmt, band["mean"][i].get<double>());
    std::string out = b;
    if (band["sd"][i].is_number()) {
      std::snprintf(b, sizeof b, fmt, band["sd"][i].get<double>());
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
    }
  o << "\nWith few seeds per variant the Welch degrees of freedom are small and the interval is wide (t_0.975 = 12.7 at 1 degree "
       "of freedom, 4.3 at 2): treat the p-values as rough.\n";
  return o.str();
}

namespace {

// The assignments of one run: the preset, the grid's sets, the variant's sets, then `extra`.
std::vector<Assignment> run_assignments(const Grid& grid, const GridVariant& v) {
  std::vector<Assignment> as;
  if (!grid.preset.empty()) as = parse_config_text(preset_config_text(grid.preset), "preset " + grid.preset);
  for (const auto& s : grid.sets) as.push_back(parse_override(s));
  for (const auto& s : v.sets) {
    Assignment a = parse_override(s);
    a.origin = "variant " + v.name + ": " + s;
    as.push_back(a);
  }
  return as;
}

std::string quoted(const fs::path& p) {
  std::string q = "\"";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
  q += p.string();
  q += '"';
  return q;
}

struct TaskRun {
  const GridTask* task;
  std::shared_ptr<const tasks::Task> gen;
  Config cfg;
  fs::path dir;
};

struct Run {
  const GridVariant* v;
  uint64_t seed;
  std::string id;
  Config cfg;
  std::vector<TaskRun> tasks;
};

// A run's configuration as compared between invocations: everything but where it writes and its
// wall-clock limit.
json run_config_json(const Config& c) {
  json j = c.to_json();  // flat: {"model.d_model": 256, ...}
  j.erase("train.out_dir");
  j.erase("train.time_limit");
  return j;
}

// "" when equal, else the differing keys ("train.steps, model.d_model").
std::string config_differences(const json& a, const json& b) {
  if (a == b) return "";
  std::set<std::string> keys;
  for (const auto& [k, v] : b.items())
    if (!a.contains(k) || a[k] != v) keys.insert(k);
  for (const auto& [k, v] : a.items())
    if (!b.contains(k)) keys.insert(k);
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// Trains (or finishes, or skips when already finished) one model in `dir` with `data` (nullptr: the
// config's shards) and returns the step it reached; the trainer's own checkpoints make a stop at
// any step resumable. on_step/on_eval are passed through.
int64_t train_in(const Config& cfg, const fs::path& dir, TrainOptions to, TrainData* data, bool resume_allowed, bool* interrupted) {
  int64_t ck_step = -1;
  const std::string ck = latest_checkpoint(dir, &ck_step);
  if (!ck.empty() && ck_step >= 0) {
    if (!resume_allowed) fail("compare: ", dir.string(), " holds checkpoints: pass --resume");
    // The checkpoint must come from this run's configuration: a grid file edited between
    // invocations (other steps, lr, model, ...) must not silently continue an older run.
    const std::string diff = config_differences(run_config_json(read_checkpoint_config(ck)), run_config_json(cfg));
    if (!diff.empty())
      fail("compare: ", ck, " was trained with another configuration than this grid gives the run (", diff,
           "): the grid file changed since; delete ", dir.string(), " to retrain this run, or restore the grid file");
    if (ck_step >= cfg.train.steps) return ck_step;  // trained already
    to.resume = ck;
  }
  const TrainSummary ts = data ? train(cfg, to, *data) : train(cfg, to);
  *interrupted = ts.interrupted;
  return ts.steps;
}

}  // namespace

bool run_compare(const Grid& grid, const CompareOptions& opts) {
  const fs::path out(opts.out);
  const fs::path runs_dir = out / "runs";
  if (opts.summarize_only) {
    if (!fs::is_directory(runs_dir)) fail("compare --summarize: ", runs_dir.string(), " does not exist (no runs to summarize)");
  } else if (!opts.resume && fs::exists(runs_dir) && !fs::is_empty(runs_dir)) {
    fail("compare: ", runs_dir.string(), " already holds runs: pass --resume to continue that grid, or choose another --out");
  }
  fs::create_directories(runs_dir);
  // One training compare per output directory (each run's trainer also locks its own run
  // directory). A summary only reads finished runs and renames its documents into place, so it
  // may run beside a compare that is still training.
  DirLock lock;
  if (!opts.summarize_only) lock = DirLock::acquire(out.string(), "compare --out", "attnlab compare");

  // Seed-major order (every variant with the first seed, then every variant with the next): a grid
  // stopped part-way has whole rounds of seeds to compare.
  std::vector<Run> runs;
  for (uint64_t seed : grid.seeds)
    for (const auto& v : grid.variants) {
      std::vector<Assignment> as = run_assignments(grid, v);
      const std::string id = v.name + "_s" + std::to_string(seed);
      const Config probe = resolve_config(as);
      const int steps = grid.steps > 0 ? grid.steps : probe.train.steps;
      int ckpt = grid.ckpt_every > 0 ? grid.ckpt_every : probe.train.ckpt_every;
      if (ckpt <= 0) ckpt = probe.train.eval_every > 0 ? probe.train.eval_every : std::max(1, steps / 4);
      as.push_back({"train.steps", std::to_string(steps), "compare"});
      as.push_back({"train.seed", std::to_string(seed), "compare"});
      as.push_back({"train.ckpt_every", std::to_string(ckpt), "compare"});
      as.push_back({"train.time_limit", "0", "compare"});
      as.push_back({"train.out_dir", quoted(runs_dir / id), "compare"});
      Run run{&v, seed, id, resolve_config(as), {}};
      if (!grid.lengths.empty()) parse_lengths(grid.lengths, run.cfg.model.seq_len);  // a bad entry fails before any training
      for (const auto& t : grid.tasks) {
        std::vector<Assignment> ts = run_assignments(grid, v);
        for (const auto& s : t.sets) {
          Assignment a = parse_override(s);
          a.origin = "task " + t.name + ": " + s;
          ts.push_back(a);
        }
        const Config tprobe = resolve_config(ts);
        tasks::TaskParams tp;
        tp.name = t.name;
        auto gen = std::shared_ptr<const tasks::Task>(tasks::Task::make(tp, tprobe.model.seq_len));
        const fs::path tdir = runs_dir / id / ("task_" + t.name);
        ts.push_back({"model.vocab_size", std::to_string(gen->vocab_size()), "compare task"});
        ts.push_back({"train.steps", std::to_string(t.steps), "compare task"});
        ts.push_back({"train.seed", std::to_string(seed), "compare task"});
        ts.push_back({"train.ckpt_every", std::to_string(std::max(1, t.steps / 4)), "compare task"});
        ts.push_back({"train.eval_every", "0", "compare task"});  // validated once after training, below
        ts.push_back({"train.time_limit", "0", "compare task"});
        ts.push_back({"train.out_dir", quoted(tdir), "compare task"});
        TaskRun tr{&t, gen, resolve_config(ts), tdir};
        parse_lengths(t.lengths, tr.cfg.model.seq_len);
        run.tasks.push_back(std::move(tr));
      }
      runs.push_back(std::move(run));
    }
  const size_t tokens_per_step = (size_t)runs[0].cfg.train.batch_size * runs[0].cfg.model.seq_len * runs[0].cfg.train.grad_accum;
  for (const auto& r : runs) {
    const size_t t = (size_t)r.cfg.train.batch_size * r.cfg.model.seq_len * r.cfg.train.grad_accum;
    if (t != tokens_per_step || r.cfg.train.steps != runs[0].cfg.train.steps)
      std::printf("compare: warning: %s trains %zu tokens, %s %zu: not equal tokens\n", r.id.c_str(), t * r.cfg.train.steps,
                  runs[0].id.c_str(), tokens_per_step * runs[0].cfg.train.steps);
  }

  const size_t N = runs.size();
  // The ETA counts training steps still to do, at the rate measured in this invocation per kind
  // (the language model and each task; a task not yet measured is assumed to cost what the
  // language model costs per token). Evaluations are not counted.
  auto tokens_of = [](const Config& c) { return double(c.train.batch_size) * c.model.seq_len * c.train.grad_accum; };
  std::map<std::string, int64_t> steps_left;   // "" = the language model, else the task's name
  std::map<std::string, double> sec_per_step;  // measured
  std::map<std::string, std::pair<double, int64_t>> measured;
  for (const auto& r : runs) {
    if (fs::exists(runs_dir / r.id / "result.json")) continue;
    steps_left[""] += r.cfg.train.steps;
    for (const auto& t : r.tasks) steps_left[t.task->name] += t.cfg.train.steps;
  }
  auto grid_eta = [&]() {
    const double lm = sec_per_step.count("") ? sec_per_step[""] : NAN;
    double s = steps_left[""] * lm;
    for (const auto& t : runs[0].tasks) {
      const std::string& n = t.task->name;
      const double rate = sec_per_step.count(n) ? sec_per_step[n] : lm * tokens_of(t.cfg) / tokens_of(runs[0].cfg);
      s += steps_left[n] * rate;
    }
    return s;
  };
  // What a run's evaluations were (checked when a finished run is skipped): a grid whose
  // analyze, lengths or tasks changed must not mix runs evaluated differently.
  json grid_evals{{"analyze", grid.analyze}, {"analyze_sequences", grid.analyze ? grid.analyze_sequences : 0},
                  {"lengths", grid.lengths}, {"length_tokens", grid.lengths.empty() ? 0 : grid.length_tokens}, {"tasks", json::array()}};
  for (const auto& t : grid.tasks)
    grid_evals["tasks"].push_back({{"name", t.name}, {"sets", t.sets}, {"steps", t.steps}, {"lengths", t.lengths}, {"samples", t.samples}});
  int finished_here = 0;
  const bool tty = ::isatty(fileno(stdout));

  for (size_t i = 0; i < N; ++i) {
    const Run& run = runs[i];
    const fs::path dir = runs_dir / run.id;
    const std::string result_path = (dir / "result.json").string();
    if (fs::exists(result_path)) {
      const json done = json::parse(read_text(result_path));
      const std::string diff = done.contains("config") ? config_differences(done["config"], run_config_json(run.cfg)) : "no config recorded";
      if (!diff.empty())
        fail("compare: ", result_path, " is the result of another configuration than this grid gives the run (", diff,
             "): the grid file changed since; delete ", dir.string(), " to redo this run, or restore the grid file");
      if (!done.contains("evals") || done["evals"] != grid_evals)
        fail("compare: ", result_path, " was evaluated with other grid settings (analyze, lengths, tasks) than the grid file now gives (",
             done.contains("evals") ? done["evals"].dump() : std::string("none recorded"), " against ", grid_evals.dump(),
             "): delete ", dir.string(), " to redo this run, or restore the grid file");
      if (!opts.quiet && !opts.summarize_only) std::printf("[run %zu/%zu] %s: skipped (already done: %s)\n", i + 1, N, run.id.c_str(), result_path.c_str());
      std::fflush(stdout);
      continue;
    }
    if (opts.summarize_only) continue;  // not finished: left out of the summary
    if (opts.stop_after_runs >= 0 && finished_here >= opts.stop_after_runs) {
      std::printf("compare: stopped after %d run(s) (--stop-after-runs); continue with --resume\n", finished_here);
      return false;
    }
    const Config& cfg = run.cfg;
    const int steps = cfg.train.steps;
    fs::create_directories(dir);
    const std::string progress_path = (dir / "progress.json").string();

    // The curve of a run stopped mid-way, up to its latest checkpoint.
    json progress{{"train", json::array()}, {"val", json::array()}};
    {
      int64_t ck_step = -1;
      const std::string ck = latest_checkpoint(dir, &ck_step);
      if (!ck.empty() && ck_step >= 0) {
        if (!opts.resume) fail("compare: ", dir.string(), " holds checkpoints: pass --resume");
        if (fs::exists(progress_path)) {
          const json old = json::parse(read_text(progress_path));
          for (const auto& e : old["train"]) if (e[0].get<int64_t>() <= ck_step) progress["train"].push_back(e);
          for (const auto& e : old["val"]) if (e[0].get<int64_t>() <= ck_step) progress["val"].push_back(e);
        }
        if ((int64_t)progress["train"].size() != ck_step)
          fail("compare: ", progress_path, " has ", progress["train"].size(), " steps of curve, the checkpoint ", ck, " is at step ",
               ck_step, " (delete ", dir.string(), " to retrain this run)");
        steps_left[""] -= ck_step;
        if (!opts.quiet)
          std::printf("[run %zu/%zu] %s: %s %s (step %lld)\n", i + 1, N, run.id.c_str(), ck_step >= steps ? "trained already:" : "resuming from",
                      ck.c_str(), (long long)ck_step);
      }
    }

    // One progress callback for the language model and the tasks: `what` is "" or the task name.
    Timer print_timer;
    bool printed = false;
    auto progress_line = [&](const std::string& what, int64_t step, int total, double loss, double tps, double tokens_per_step_run) {
      auto& m = measured[what];
      m.first += tokens_per_step_run / tps;
      m.second += 1;
      sec_per_step[what] = m.first / m.second;
      --steps_left[what];
      if (opts.quiet) return;
      if (step == total || print_timer.seconds() >= (tty ? 0.5 : 5.0) || !printed) {
        print_timer = Timer();
        printed = true;
        const std::string label = what.empty() ? run.id : run.id + " " + what;
        std::printf("%s[run %zu/%zu] %s: step %lld/%d (%.0f%%) | loss %.4f | %.0f tok/s | run ETA %s | grid ETA %s%s", tty ? "\r\033[K" : "",
                    i + 1, N, label.c_str(), (long long)step, total, 100.0 * step / total, loss, tps,
                    fmt_eta((total - step) * sec_per_step[what]).c_str(), fmt_eta(grid_eta()).c_str(), tty ? "" : "\n");
        std::fflush(stdout);
      }
    };

    TrainOptions to;
    to.quiet = true;
    if (opts.stop_after_steps >= 0) to.stop_after = opts.stop_after_steps;
    const double tokens_per_step_run = tokens_of(cfg);
    const int ckpt_every = cfg.train.ckpt_every;
    to.on_step = [&](int64_t step, double loss, double tps) {
      // The trainer wrote step_(step−1) after the previous step: the older ones are not needed.
      if (ckpt_every > 0 && step > 1 && (step - 1) % ckpt_every == 0) prune_step_checkpoints(dir, step - 1);
      progress["train"].push_back(json::array({step, num_or_null(loss), tps}));
      write_file_atomic(progress_path, progress.dump());
      progress_line("", step, steps, loss, tps, tokens_per_step_run);
    };
    to.on_eval = [&](int64_t step, double vl, size_t) {
      if (step % std::max(1, cfg.train.eval_every) != 0 && step != steps) return;  // an interruption's extra evaluation
      auto& val = progress["val"];
      if (!val.empty() && val.back()[0].get<int64_t>() == step) val.erase(val.size() - 1);
      val.push_back(json::array({step, num_or_null(vl)}));
    };
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), sets_text(run.v->sets).c_str());
      std::fflush(stdout);
    }
    bool interrupted = false;
    const int64_t reached = train_in(cfg, dir, to, nullptr, opts.resume, &interrupted);
    write_file_atomic(progress_path, progress.dump());
    if (tty && !opts.quiet && printed) std::printf("\n");
    if (reached < steps) {
      std::printf("compare: %s stopped at step %lld of %d%s; continue with `attnlab compare GRID --out %s --resume`\n", run.id.c_str(),
                  (long long)reached, steps, interrupted ? " (interrupted)" : "", opts.out.c_str());
      return false;
    }

    // The final model on the whole validation shard, and the diagnostics.
    const std::string model_path = (dir / "model.safetensors").string();
    auto load_model = [&]() {
      auto m = std::make_unique<GPT<float>>(cfg);
      load_checkpoint(model_path, *m, nullptr, nullptr);
      return m;
    };
    auto status = [&](const std::string& what) {
      if (opts.quiet) return;
      std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), what.c_str());
      std::fflush(stdout);
    };
    Shard val = Shard::open(cfg.data.val);
    status("validation loss on the whole validation shard");
    auto model = load_model();
    model->plan(cfg.train.batch_size, cfg.model.seq_len);
    const EvalResult ev = evaluate(*model, val, 0);
    const size_t n_params = model->num_params();
    model.reset();
    json result{{"variant", run.v->name}, {"seed", run.seed}, {"id", run.id}, {"sets", run.v->sets},
                {"steps", steps}, {"tokens", (long long)(tokens_per_step_run * steps)}, {"params", n_params},
                {"val_loss", num_or_null(ev.mean())}, {"val_tokens", ev.count}};
    double secs = 0;
    json train_curve = json::array();
    for (const auto& e : progress["train"]) {
      secs += tokens_per_step_run / e[2].get<double>();
      train_curve.push_back(json::array({e[0], e[1]}));
    }
    result["train_seconds"] = secs;
    result["tokens_per_s"] = secs > 0 ? tokens_per_step_run * steps / secs : 0.0;
    result["curve"] = {{"train", train_curve}, {"val", progress["val"]}};
    result["config"] = run_config_json(cfg);
    result["evals"] = grid_evals;
    result["analysis"] = nullptr;
    if (grid.analyze) {
      status("analyze (" + std::to_string(grid.analyze_sequences) + " sequences)");
      auto am = load_model();
      const int T = cfg.model.seq_len;
      const auto seqs = draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 0);
      const std::string& kind = cfg.residual.kind;
      const auto corrupt = kind == "dar" || kind == "hyper" || kind == "mhc"
                               ? draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 1) : std::vector<int32_t>{};
      AnalyzeOptions ao;
      ao.bootstrap = 200;
      ao.rescue_by_depth = false;
      json a = analyze(*am, seqs, corrupt, grid.analyze_sequences, T, ao);
      a["checkpoint"] = model_path;
      a["data"] = cfg.data.val;
      write_file_atomic((dir / "analysis.json").string(), a.dump(1) + "\n");
      result["analysis"] = compact_analysis(a);
    }
    result["lengths"] = nullptr;
    if (!grid.lengths.empty()) {
      status("validation loss at lengths " + grid.lengths + " × T_train (" + std::to_string(grid.length_tokens) + " tokens each)");
      LengthEvalOptions lo;
      lo.lengths = parse_lengths(grid.lengths, cfg.model.seq_len);
      lo.token_budget = (size_t)grid.length_tokens;
      const LengthEvalReport rep = evaluate_lengths([&] { return load_model(); }, val, lo);
      json lj = length_report_json(rep);
      write_file_atomic((dir / "lengths.json").string(), lj.dump(1) + "\n");
      result["lengths"] = compact_lengths(lj);
    }
    result["tasks"] = json::object();
    for (const TaskRun& t : run.tasks) {
      const std::string& name = t.task->name;
      int64_t tck = -1;
      if (!latest_checkpoint(t.dir, &tck).empty() && tck > 0) steps_left[name] -= std::min<int64_t>(tck, t.cfg.train.steps);
      status("task " + name + ": training (" + std::to_string(t.cfg.train.steps) + " steps, " + sets_text(t.task->sets) + ")");
      fs::create_directories(t.dir);
      tasks::TaskTrainData data(t.gen, t.cfg.train.batch_size, t.cfg.model.seq_len, t.cfg.train.seed);
      TrainOptions tto;
      tto.quiet = true;
      if (opts.stop_after_steps >= 0) tto.stop_after = opts.stop_after_steps;
      const double ttok = tokens_of(t.cfg);
      printed = false;
      tto.on_step = [&](int64_t step, double loss, double tps) { progress_line(name, step, t.cfg.train.steps, loss, tps, ttok); };
      const int64_t treached = train_in(t.cfg, t.dir, tto, &data, opts.resume, &interrupted);
      if (tty && !opts.quiet && printed) std::printf("\n");
      if (treached < t.cfg.train.steps) {
        std::printf("compare: %s task %s stopped at step %lld of %d%s; continue with `attnlab compare GRID --out %s --resume`\n", run.id.c_str(),
                    name.c_str(), (long long)treached, t.cfg.train.steps, interrupted ? " (interrupted)" : "", opts.out.c_str());
        return false;
      }
      prune_step_checkpoints(t.dir, -1);
      status("task " + name + ": evaluation at lengths " + t.task->lengths + " × " + std::to_string(t.cfg.model.seq_len) + " (" +
             std::to_string(t.task->samples) + " samples each)");
      const std::string tmodel = (t.dir / "model.safetensors").string();
      tasks::TaskEvalOptions eo;
      eo.lengths = parse_lengths(t.task->lengths, t.cfg.model.seq_len);
      eo.samples = t.task->samples;
      eo.seed = 1;
      const auto rep = tasks::evaluate_task(
          *t.gen,
          [&] {
            auto m = std::make_unique<GPT<float>>(t.cfg);
            load_checkpoint(tmodel, *m, nullptr, nullptr);
            return m;
          },
          eo);
      // The weighted validation loss on the task's fixed validation batches (the same whichever
      // invocation trained the model).
      double task_val = NAN;
      {
        GPT<float> m(t.cfg);
        load_checkpoint(tmodel, m, nullptr, nullptr);
        m.plan(t.cfg.train.batch_size, t.cfg.model.seq_len);
        task_val = data.validate(m, t.cfg.train.eval_batches).mean();
      }
      json tj = tasks::task_report_json(rep);
      write_file_atomic((t.dir / "eval.json").string(), tj.dump(1) + "\n");
      json c = compact_task(tj);
      c["steps"] = t.cfg.train.steps;
      c["seq_len"] = t.cfg.model.seq_len;
      c["val_loss"] = num_or_null(task_val);
      result["tasks"][name] = c;
    }
    write_file_atomic(result_path, result.dump(1) + "\n");
    prune_step_checkpoints(dir, -1);  // model.safetensors stays
    ++finished_here;
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: done, val loss %.4f (whole shard, %zu tokens), %.0f tok/s, %zu parameters\n", i + 1, N, run.id.c_str(),
                  ev.mean(), ev.count, result["tokens_per_s"].get<double>(), n_params);
      std::fflush(stdout);
    }
  }

  // Every run is done: the grid's documents.
  json grid_j{{"name", grid.name}, {"preset", grid.preset}, {"sets", grid.sets}, {"steps", runs[0].cfg.train.steps},
              {"seeds", grid.seeds}, {"baseline", grid.baseline}, {"analyze", grid.analyze},
              {"lengths", grid.lengths.empty() ? json(nullptr) : json(grid.lengths)}, {"length_tokens", grid.length_tokens}};
  json tasks_j = json::array();
  for (const auto& t : grid.tasks)
    tasks_j.push_back({{"name", t.name}, {"sets", t.sets}, {"steps", t.steps}, {"lengths", t.lengths}, {"samples", t.samples}});
  grid_j["tasks"] = tasks_j;
  json variants = json::array();
  for (const auto& v : grid.variants) variants.push_back({{"name", v.name}, {"sets", v.sets}});
  grid_j["variants"] = variants;
  json results{{"schema", kCompareSchema}, {"version", kCompareVersion}, {"attnlab_version", version()}, {"grid", grid_j},
               {"tokens_per_step", tokens_per_step}, {"tokens_per_run", (long long)tokens_per_step * runs[0].cfg.train.steps}};
  json all = json::array();
  long long val_tokens = 0;
  size_t done = 0;
  for (const auto& r : runs) done += fs::exists(runs_dir / r.id / "result.json");
  if (done < N) {
    results["partial"] = {{"runs_done", done}, {"runs_total", N}};
    if (done == 0) fail("compare --summarize: no run of ", opts.out, " has finished yet");
  }
  for (const auto& r : runs) {
    if (!fs::exists(runs_dir / r.id / "result.json")) continue;  // --summarize of an unfinished grid
    json one = json::parse(read_text((runs_dir / r.id / "result.json").string()));
    val_tokens = one["val_tokens"].get<long long>();
    all.push_back(one);
  }
  results["val_tokens"] = val_tokens;
  results["runs"] = all;
  summarize_results(results);
  write_file_atomic((out / "results.json").string(), results.dump(1) + "\n");
  write_file_atomic((out / "results.md").string(), results_markdown(results));
  if (opts.report) write_file_atomic((out / "report.html").string(), render_report_html(results));
  if (!opts.quiet) {
    std::printf("\n%s", results_markdown(results).c_str());
    std::printf("\nwrote %s, %s%s\n", (out / "results.json").string().c_str(), (out / "results.md").string().c_str(),
                opts.report ? (", " + (out / "report.html").string()).c_str() : "");
  }
  return true;
}

}  // namespace attnlab
