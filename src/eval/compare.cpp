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
#include "core/timer.h"
#include "data/shard.h"
#include "eval/analyze.h"
#include "eval/report.h"
#include "eval/stats.h"
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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write ", tmp);
    f << content;
    f.flush();
    if (!f.good()) fail("cannot write ", tmp);
  }
  fs::rename(tmp, path);
}

Grid parse_grid_text(const std::string& text, const std::string& origin) {
  Grid g;
  bool baseline_given = false;
  std::map<std::string, size_t> index;
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
           "' (known: name, preset, set, steps, seeds, baseline, ckpt_every, analyze, analyze_sequences, [variants.NAME] set)");
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
  std::map<std::string, json> params;
  for (const auto& r : results["runs"]) {
    const std::string v = r["variant"].get<std::string>();
    if (r["val_loss"].is_number()) loss[v].push_back(r["val_loss"].get<double>());
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
    }
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
    << "Δ = variant − baseline (`" << g["baseline"].get<std::string>() << "`) with Welch's t-test and its 95% interval.\n\n";
  o << "| variant | settings | parameters | tok/s | val loss (mean ± sd, n) | Δ vs baseline | 95% interval | p |\n";
  o << "|---|---|---:|---:|---:|---:|---:|---:|\n";
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
    std::string d = "baseline", ci = "", p = "";
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
    std::snprintf(buf, sizeof buf, "| %s | `%s` | %s | %s | %s | %s | %s | %s |\n", v.c_str(), settings[v].c_str(), params.c_str(),
                  num(s["tokens_per_s"]["mean"], "%.0f").c_str(), loss.c_str(), d.c_str(), ci.c_str(), p.c_str());
    o << buf;
  }
  o << "\nWith few seeds per variant the Welch degrees of freedom are small and the interval is wide (t_0.975 = 12.7 at 1 degree "
       "of freedom, 4.3 at 2): treat the p-values as rough.\n";
  return o.str();
}

bool run_compare(const Grid& grid, const CompareOptions& opts) {
  const fs::path out(opts.out);
  const fs::path runs_dir = out / "runs";
  if (!opts.resume && fs::exists(runs_dir) && !fs::is_empty(runs_dir))
    fail("compare: ", runs_dir.string(), " already holds runs: pass --resume to continue that grid, or choose another --out");
  fs::create_directories(runs_dir);

  struct Run { const GridVariant* v; uint64_t seed; std::string id; Config cfg; };
  std::vector<Run> runs;
  for (const auto& v : grid.variants)
    for (uint64_t seed : grid.seeds) {
      std::vector<Assignment> as;
      if (!grid.preset.empty()) as = parse_config_text(preset_config_text(grid.preset), "preset " + grid.preset);
      for (const auto& s : grid.sets) as.push_back(parse_override(s));
      for (const auto& s : v.sets) {
        Assignment a = parse_override(s);
        a.origin = "variant " + v.name + ": " + s;
        as.push_back(a);
      }
      const std::string id = v.name + "_s" + std::to_string(seed);
      const Config probe = resolve_config(as);
      const int steps = grid.steps > 0 ? grid.steps : probe.train.steps;
      int ckpt = grid.ckpt_every > 0 ? grid.ckpt_every : probe.train.ckpt_every;
      if (ckpt <= 0) ckpt = probe.train.eval_every > 0 ? probe.train.eval_every : std::max(1, steps / 4);
      as.push_back({"train.steps", std::to_string(steps), "compare"});
      as.push_back({"train.seed", std::to_string(seed), "compare"});
      as.push_back({"train.ckpt_every", std::to_string(ckpt), "compare"});
      as.push_back({"train.time_limit", "0", "compare"});
      std::string out_dir = "\"";  // built by appends: GCC 12's -Wrestrict misfires on "x" + std::string&&
      out_dir += (runs_dir / id).string();
      out_dir += '"';
      as.push_back({"train.out_dir", out_dir, "compare"});
      runs.push_back({&v, seed, id, resolve_config(as)});
    }
  const size_t tokens_per_step = (size_t)runs[0].cfg.train.batch_size * runs[0].cfg.model.seq_len * runs[0].cfg.train.grad_accum;
  for (const auto& r : runs) {
    const size_t t = (size_t)r.cfg.train.batch_size * r.cfg.model.seq_len * r.cfg.train.grad_accum;
    if (t != tokens_per_step || r.cfg.train.steps != runs[0].cfg.train.steps)
      std::printf("compare: warning: %s trains %zu tokens, %s %zu: not equal tokens\n", r.id.c_str(), t * r.cfg.train.steps,
                  runs[0].id.c_str(), tokens_per_step * runs[0].cfg.train.steps);
  }

  const size_t N = runs.size();
  // Steps still to train (for the ETA): unfinished runs' remaining steps.
  int64_t steps_left = 0;
  for (const auto& r : runs)
    if (!fs::exists(runs_dir / r.id / "result.json")) steps_left += r.cfg.train.steps;
  double sec_per_step = 0;  // measured in this invocation
  int64_t steps_done_here = 0;
  double seconds_here = 0;
  int finished_here = 0;
  bool tty = ::isatty(fileno(stdout));

  for (size_t i = 0; i < N; ++i) {
    const Run& run = runs[i];
    const fs::path dir = runs_dir / run.id;
    const std::string result_path = (dir / "result.json").string();
    if (fs::exists(result_path)) {
      if (!opts.quiet) std::printf("[run %zu/%zu] %s: skipped (already done: %s)\n", i + 1, N, run.id.c_str(), result_path.c_str());
      std::fflush(stdout);
      continue;
    }
    if (opts.stop_after_runs >= 0 && finished_here >= opts.stop_after_runs) {
      std::printf("compare: stopped after %d run(s) (--stop-after-runs); continue with --resume\n", finished_here);
      return false;
    }
    const Config& cfg = run.cfg;
    const int steps = cfg.train.steps;
    fs::create_directories(dir);
    const std::string progress_path = (dir / "progress.json").string();

    // Resume a run stopped mid-way from its latest checkpoint, with its curve up to that step.
    json progress{{"train", json::array()}, {"val", json::array()}};
    TrainOptions to;
    to.quiet = true;
    int64_t start_step = 0;
    {
      int64_t ck_step = -1;
      const std::string ck = latest_checkpoint(dir, &ck_step);
      if (!ck.empty() && ck_step >= 0) {
        if (!opts.resume) fail("compare: ", dir.string(), " holds checkpoints: pass --resume");
        to.resume = ck;
        start_step = ck_step;
        if (fs::exists(progress_path)) {
          const json old = json::parse(read_text(progress_path));
          for (const auto& e : old["train"]) if (e[0].get<int64_t>() <= ck_step) progress["train"].push_back(e);
          for (const auto& e : old["val"]) if (e[0].get<int64_t>() <= ck_step) progress["val"].push_back(e);
        }
        if ((int64_t)progress["train"].size() != ck_step)
          fail("compare: ", progress_path, " has ", progress["train"].size(), " steps of curve, the checkpoint ", ck, " is at step ",
               ck_step, " (delete ", dir.string(), " to retrain this run)");
        if (!opts.quiet) std::printf("[run %zu/%zu] %s: resuming from %s (step %lld)\n", i + 1, N, run.id.c_str(), ck.c_str(), (long long)ck_step);
      }
    }
    steps_left -= start_step;
    if (opts.stop_after_steps >= 0) to.stop_after = opts.stop_after_steps;

    Timer print_timer;
    int64_t last_printed = -1;
    const double tokens_per_step_run = double(cfg.train.batch_size) * cfg.model.seq_len * cfg.train.grad_accum;
    const int ckpt_every = cfg.train.ckpt_every;
    to.on_step = [&](int64_t step, double loss, double tps) {
      // The trainer wrote step_(step−1) after the previous step: the older ones are not needed.
      if (ckpt_every > 0 && step > 1 && (step - 1) % ckpt_every == 0) prune_step_checkpoints(dir, step - 1);
      progress["train"].push_back(json::array({step, loss, tps}));
      write_file_atomic(progress_path, progress.dump());
      const double dt = tokens_per_step_run / tps;
      seconds_here += dt;
      ++steps_done_here;
      --steps_left;
      sec_per_step = seconds_here / steps_done_here;
      if (opts.quiet) return;
      if (step == steps || print_timer.seconds() >= (tty ? 0.5 : 5.0) || last_printed < 0) {
        print_timer = Timer();
        last_printed = step;
        std::printf("%s[run %zu/%zu] %s: step %lld/%d (%.0f%%) | loss %.4f | %.0f tok/s | run ETA %s | grid ETA %s%s", tty ? "\r\033[K" : "",
                    i + 1, N, run.id.c_str(), (long long)step, steps, 100.0 * step / steps, loss, tps,
                    fmt_eta((steps - step) * sec_per_step).c_str(), fmt_eta(steps_left * sec_per_step).c_str(), tty ? "" : "\n");
        std::fflush(stdout);
      }
    };
    to.on_eval = [&](int64_t step, double vl, size_t) {
      if (step % std::max(1, cfg.train.eval_every) != 0 && step != steps) return;  // an interruption's extra evaluation
      auto& val = progress["val"];
      if (!val.empty() && val.back()[0].get<int64_t>() == step) val.erase(val.size() - 1);
      val.push_back(json::array({step, vl}));
    };
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: %s\n", i + 1, N, run.id.c_str(), sets_text(run.v->sets).c_str());
      std::fflush(stdout);
    }
    const TrainSummary ts = train(cfg, to);
    write_file_atomic(progress_path, progress.dump());
    if (tty && !opts.quiet) std::printf("\n");
    if (ts.steps < steps) {
      std::printf("compare: %s stopped at step %lld of %d%s; continue with `attnlab compare GRID --out %s --resume`\n", run.id.c_str(),
                  (long long)ts.steps, steps, ts.interrupted ? " (interrupted)" : "", opts.out.c_str());
      return false;
    }

    // The final model on the whole validation shard, and the diagnostics.
    const std::string model_path = (dir / "model.safetensors").string();
    GPT<float> model(cfg);
    load_checkpoint(model_path, model, nullptr, nullptr);
    model.plan(cfg.train.batch_size, cfg.model.seq_len);
    Shard val = Shard::open(cfg.data.val);
    const EvalResult ev = evaluate(model, val, 0);
    json result{{"variant", run.v->name}, {"seed", run.seed}, {"id", run.id}, {"sets", run.v->sets},
                {"steps", steps}, {"tokens", (long long)(tokens_per_step_run * steps)}, {"params", model.num_params()},
                {"val_loss", ev.mean()}, {"val_tokens", ev.count}};
    double secs = 0;
    json train_curve = json::array();
    for (const auto& e : progress["train"]) {
      secs += tokens_per_step_run / e[2].get<double>();
      train_curve.push_back(json::array({e[0], e[1]}));
    }
    result["train_seconds"] = secs;
    result["tokens_per_s"] = secs > 0 ? tokens_per_step_run * steps / secs : 0.0;
    result["curve"] = {{"train", train_curve}, {"val", progress["val"]}};
    result["analysis"] = nullptr;
    if (grid.analyze) {
      if (!opts.quiet) { std::printf("[run %zu/%zu] %s: analyze (%d sequences)\n", i + 1, N, run.id.c_str(), grid.analyze_sequences); std::fflush(stdout); }
      GPT<float> am(cfg);
      load_checkpoint(model_path, am, nullptr, nullptr);
      const int T = cfg.model.seq_len;
      const auto seqs = draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 0);
      const std::string& kind = cfg.residual.kind;
      const auto corrupt = kind == "dar" || kind == "hyper" || kind == "mhc"
                               ? draw_windows(val.tokens(), val.size(), grid.analyze_sequences, T + 1, 1) : std::vector<int32_t>{};
      AnalyzeOptions ao;
      ao.bootstrap = 200;
      ao.rescue_by_depth = false;
      json a = analyze(am, seqs, corrupt, grid.analyze_sequences, T, ao);
      a["checkpoint"] = model_path;
      a["data"] = cfg.data.val;
      write_file_atomic((dir / "analysis.json").string(), a.dump(1) + "\n");
      result["analysis"] = compact_analysis(a);
    }
    write_file_atomic(result_path, result.dump(1) + "\n");
    prune_step_checkpoints(dir, -1);  // model.safetensors stays
    ++finished_here;
    if (!opts.quiet) {
      std::printf("[run %zu/%zu] %s: done, val loss %.4f (whole shard, %zu tokens), %.0f tok/s, %zu parameters\n", i + 1, N, run.id.c_str(),
                  ev.mean(), ev.count, result["tokens_per_s"].get<double>(), model.num_params());
      std::fflush(stdout);
    }
  }

  // Every run is done: the grid's documents.
  json grid_j{{"name", grid.name}, {"preset", grid.preset}, {"sets", grid.sets}, {"steps", runs[0].cfg.train.steps},
              {"seeds", grid.seeds}, {"baseline", grid.baseline}, {"analyze", grid.analyze}};
  json variants = json::array();
  for (const auto& v : grid.variants) variants.push_back({{"name", v.name}, {"sets", v.sets}});
  grid_j["variants"] = variants;
  json results{{"schema", kCompareSchema}, {"version", kCompareVersion}, {"attnlab_version", version()}, {"grid", grid_j},
               {"tokens_per_step", tokens_per_step}, {"tokens_per_run", (long long)tokens_per_step * runs[0].cfg.train.steps}};
  json all = json::array();
  long long val_tokens = 0;
  for (const auto& r : runs) {
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
