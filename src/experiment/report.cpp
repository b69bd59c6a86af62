#include "experiment/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "experiment/compare.h"
#include "experiment/compare/inference.h"
#include "experiment/stats.h"

namespace attnlab {

using nlohmann::json;

namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string f(double v, const char* fmt = "%.4g") {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

struct Series {
  std::string name, color;
  std::vector<double> x, y, lo, hi;  // lo/hi empty: no band
  bool dashed = false;
};

std::vector<double> ticks(double lo, double hi, int target = 6, bool integer = false) {
  std::vector<double> t;
  if (!(hi > lo)) { t.push_back(lo); return t; }
  const double raw = (hi - lo) / target, p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = p;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) if (m * p >= raw) { step = m * p; break; }
  if (integer) step = std::max(1.0, std::round(step));
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

// A line plot with optional bands, axes, ticks and a legend, as one <svg>.
std::string line_plot(const std::string& title, const std::string& xlabel, const std::string& ylabel, const std::vector<Series>& given,
                      int W = 760, int H = 380, bool integer_x = false, double fixed_y0 = NAN, double fixed_y1 = NAN) {
  // The series come from a results.json, which may be damaged or hand-edited: x and y of unequal
  // length are cut to the shorter, a band of another length is dropped (fuzz_results found a read
  // past the end of y, issue 28).
  std::vector<Series> ss = given;
  for (Series& s : ss) {
    const size_t n = std::min(s.x.size(), s.y.size());
    s.x.resize(n);
    s.y.resize(n);
    if (s.lo.size() != n || s.hi.size() != n) s.lo.clear(), s.hi.clear();
  }
  const double L = 70, R = 170, T = 34, B = 50;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : ss)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]); x1 = std::max(x1, s.x[i]);
      const double lo = s.lo.empty() || !std::isfinite(s.lo[i]) ? s.y[i] : s.lo[i], hi = s.hi.empty() || !std::isfinite(s.hi[i]) ? s.y[i] : s.hi[i];
      y0 = std::min(y0, lo); y1 = std::max(y1, hi);
    }
  if (!std::isfinite(x0)) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) { y0 -= 0.5; y1 += 0.5; }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  if (std::isfinite(fixed_y0) && std::isfinite(fixed_y1)) { y0 = fixed_y0; y1 = fixed_y1; }  // e.g. accuracies: [0, 1]
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return T + (y1 - std::clamp(y, y0, y1)) / (y1 - y0) * (H - T - B); };  // a band past a fixed range is cut at the frame
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  for (double t : ticks(x0, x1, 6, integer_x)) {
    o << "<line x1=\"" << f(X(t)) << "\" x2=\"" << f(X(t)) << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\"#eee\"/>";
    o << "<text x=\"" << f(X(t)) << "\" y=\"" << H - B + 16 << "\" text-anchor=\"middle\" font-size=\"11\">" << f(t, "%g") << "</text>\n";
  }
  for (double t : ticks(y0, y1)) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << f(Y(t)) << "\" y2=\"" << f(Y(t)) << "\" stroke=\"#eee\"/>";
    o << "<text x=\"" << L - 6 << "\" y=\"" << f(Y(t) + 4) << "\" text-anchor=\"end\" font-size=\"11\">" << f(t, "%g") << "</text>\n";
  }
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\"" << H - T - B << "\" fill=\"none\" stroke=\"#444\"/>\n";
  o << "<text x=\"" << f((L + W - R) / 2) << "\" y=\"" << H - 12 << "\" text-anchor=\"middle\" font-size=\"12\">" << esc(xlabel) << "</text>\n";
  o << "<text transform=\"translate(16," << f((T + H - B) / 2) << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << esc(ylabel)
    << "</text>\n";
  int li = 0;
  for (const auto& s : ss) {
    if (!s.lo.empty()) {
      std::string pts;
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.hi[i])) pts += f(X(s.x[i])) + "," + f(Y(s.hi[i])) + " ";
      for (size_t i = s.x.size(); i-- > 0;)
        if (std::isfinite(s.lo[i])) pts += f(X(s.x[i])) + "," + f(Y(s.lo[i])) + " ";
      o << "<polygon class=\"band\" points=\"" << pts << "\" fill=\"" << s.color << "\" fill-opacity=\"0.18\" stroke=\"none\"/>\n";
    }
    std::string d;
    bool pen = false;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) { pen = false; continue; }
      d += (pen ? "L" : "M") + f(X(s.x[i])) + " " + f(Y(s.y[i])) + " ";
      pen = true;
    }
    o << "<path class=\"curve\" d=\"" << d << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.8\""
      << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << "/>\n";
    if (s.x.size() <= 40)
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i])) o << "<circle cx=\"" << f(X(s.x[i])) << "\" cy=\"" << f(Y(s.y[i])) << "\" r=\"2.5\" fill=\"" << s.color << "\"/>";
    const double ly = T + 10 + 18 * li++;
    o << "\n<line x1=\"" << W - R + 12 << "\" x2=\"" << W - R + 32 << "\" y1=\"" << f(ly) << "\" y2=\"" << f(ly) << "\" stroke=\"" << s.color
      << "\" stroke-width=\"3\"/><text x=\"" << W - R + 38 << "\" y=\"" << f(ly + 4) << "\" font-size=\"12\">" << esc(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// A heatmap of values in [0, 1] (null cells grey), with row and column labels and the values.
std::string heatmap(const std::string& title, const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                    const std::vector<std::vector<double>>& v) {
  const int cw = std::max(34, std::min(60, 560 / std::max<int>(1, (int)cols.size()))), ch = 20, L = 80, T = 48;
  const int W = L + cw * (int)cols.size() + 20, H = T + ch * (int)rows.size() + 14;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"4\" y=\"16\" font-size=\"13\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  for (size_t c = 0; c < cols.size(); ++c)
    o << "<text x=\"" << L + cw * c + cw / 2 << "\" y=\"" << T - 6 << "\" text-anchor=\"middle\" font-size=\"10\">" << esc(cols[c]) << "</text>";
  for (size_t r = 0; r < rows.size(); ++r) {
    o << "\n<text x=\"" << L - 4 << "\" y=\"" << T + ch * r + 14 << "\" text-anchor=\"end\" font-size=\"11\">" << esc(rows[r]) << "</text>";
    for (size_t c = 0; c < cols.size(); ++c) {
      const double x = c < v[r].size() ? v[r][c] : NAN;
      std::string fill = "#ddd";
      if (std::isfinite(x)) {
        const double t = std::clamp(x, 0.0, 1.0);
        char b[16];
        std::snprintf(b, sizeof b, "#%02x%02x%02x", int(255 - 225 * t), int(255 - 160 * t), int(255 - 75 * t));
        fill = b;
      }
      o << "<rect x=\"" << L + cw * c << "\" y=\"" << T + ch * r << "\" width=\"" << cw - 1 << "\" height=\"" << ch - 1 << "\" fill=\"" << fill << "\"/>";
      if (std::isfinite(x))
        o << "<text x=\"" << L + cw * c + cw / 2 << "\" y=\"" << T + ch * r + 14 << "\" text-anchor=\"middle\" font-size=\"10\" fill=\""
          << (x > 0.6 ? "white" : "black") << "\">" << f(x, "%.2f") << "</text>";
    }
  }
  o << "\n</svg>\n";
  return o.str();
}

std::vector<double> nums(const json& a) {
  std::vector<double> v;
  for (const auto& x : a) v.push_back(x.is_number() ? x.get<double>() : NAN);
  return v;
}

// Mean ± sd over seeds of a curve given per run as [[step, value], ...], on the steps all runs share.
Series seed_band(const std::string& name, const std::string& color, const std::vector<const json*>& curves, int smooth) {
  Series s;
  s.name = name;
  s.color = color;
  std::map<long long, std::vector<double>> at;
  for (const json* c : curves) {
    std::vector<double> vals;
    std::vector<long long> steps;
    for (const auto& e : *c) { steps.push_back(e[0].get<long long>()); vals.push_back(e[1].is_number() ? e[1].get<double>() : NAN); }
    for (size_t i = 0; i < vals.size(); ++i) {
      double acc = 0; int n = 0;  // trailing moving average of `smooth` points
      for (size_t j = i + 1 >= (size_t)smooth ? i + 1 - smooth : 0; j <= i; ++j) { acc += vals[j]; ++n; }
      at[steps[i]].push_back(acc / n);
    }
  }
  for (const auto& [step, v] : at) {
    if (v.size() != curves.size()) continue;
    const double m = stats::mean(v), sd = v.size() > 1 ? stats::sample_sd(v) : 0;
    s.x.push_back(double(step)); s.y.push_back(m); s.lo.push_back(m - sd); s.hi.push_back(m + sd);
  }
  return s;
}

// Mean ± sd over seeds of per-run arrays that share an x axis (the length multiples): runs[i] holds
// {x: [...], y: [...]} in `xkey`/`ykey`; points null in any run are left out.
Series across_seeds(const std::string& name, const std::string& color, const std::vector<const json*>& runs, const char* xkey,
                    const char* ykey) {
  Series s;
  s.name = name;
  s.color = color;
  if (runs.empty()) return s;
  const std::vector<double> x = nums((*runs[0])[xkey]);
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> v;
    for (const json* r : runs) {
      const json& ys = (*r)[ykey];
      if (i < ys.size() && ys[i].is_number()) v.push_back(ys[i].get<double>());
    }
    if (v.size() != runs.size()) continue;
    const double m = stats::mean(v), sd = v.size() > 1 ? stats::sample_sd(v) : 0;
    s.x.push_back(x[i]); s.y.push_back(m); s.lo.push_back(m - sd); s.hi.push_back(m + sd);
  }
  return s;
}

// A text table of compare/inference.h as an HTML table with `id`.
std::string html_table(const std::string& id, const compare::TextTable& t) {
  std::string h = "<table id=\"" + id + "\">\n<tr>";
  for (const auto& x : t.header) h += "<th>" + esc(x) + "</th>";
  h += "</tr>\n";
  for (const auto& row : t.rows) {
    h += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) h += (i < t.numeric.size() && t.numeric[i] ? "<td class=\"n\">" : "<td>") + esc(row[i]) + "</td>";
    h += "</tr>\n";
  }
  return h + "</table>\n";
}

// The language model's curves and table (a task-only grid has neither).
void language_model_section(std::ostringstream& o, const json& results, const std::vector<std::string>& order,
                            std::map<std::string, std::string>& color, std::map<std::string, std::vector<const json*>>& runs_of) {
  const auto& g = results["grid"];
  std::vector<Series> val, tr;
  for (const auto& v : order) {
    std::vector<const json*> vc, tc;
    for (const json* r : runs_of[v]) { vc.push_back(&(*r)["curve"]["val"]); tc.push_back(&(*r)["curve"]["train"]); }
    if (vc.empty()) continue;
    val.push_back(seed_band(v, color[v], vc, 1));
    tr.push_back(seed_band(v, color[v], tc, 10));
  }
  o << "<figure id=\"fig-val-loss\" class=\"figure\">\n" << line_plot("Validation loss (train.eval_batches) — mean ± sd over seeds", "step", "loss (nats/token)", val)
    << "<figcaption>Periodic validation loss during training; the line is the mean over seeds and the band ± one sample standard "
       "deviation. The final numbers in the table are on the whole validation shard.</figcaption>\n</figure>\n";
  o << "<figure id=\"fig-train-loss\" class=\"figure\">\n" << line_plot("Training loss (10-step moving average) — mean ± sd over seeds", "step", "loss (nats/token)", tr)
    << "<figcaption>Training loss per optimizer step, smoothed over the last 10 steps, mean ± sd over seeds.</figcaption>\n</figure>\n";

  // The table.
  std::map<std::string, std::string> settings;
  for (const auto& v : g["variants"]) {
    std::string s;
    for (const auto& x : v["sets"]) s += (s.empty() ? "" : "; ") + x.get<std::string>();
    settings[v["name"]] = s;
  }
  o << "<h2>Results</h2>\n<table id=\"results-table\">\n<tr><th>variant</th><th>settings</th><th>parameters</th><th>tok/s</th>"
       "<th>val loss (mean ± sd, n)</th><th>Δ vs baseline</th><th>95% interval</th><th>p (Welch)</th><th>paired Δ (n)</th><th>p (paired)</th><th>per seed</th></tr>\n";
  for (const auto& s : results["summary"]) {
    const std::string v = s["variant"];
    auto num = [](const json& x, const char* fm) { return x.is_number() ? f(x.get<double>(), fm) : std::string("–"); };
    o << "<tr><td><span style=\"color:" << color[v] << "\">■</span> " << esc(v) << "</td><td><code>" << esc(settings[v]) << "</code></td><td class=\"n\">"
      << (s["params"].is_number() ? std::to_string(s["params"].get<long long>()) : "–") << "</td><td class=\"n\">"
      << num(s["tokens_per_s"]["mean"], "%.0f") << "</td><td class=\"n\">" << num(s["val_loss"]["mean"], "%.4f");
    if (s["val_loss"]["sd"].is_number()) o << " ± " << num(s["val_loss"]["sd"], "%.4f");
    o << " (" << s["n"].get<int>() << ")</td>";
    if (s["vs_baseline"].is_null()) {
      o << "<td>baseline</td><td></td><td></td><td></td><td></td>";
    } else {
      const auto& b = s["vs_baseline"];
      o << "<td class=\"n\">" << num(b["diff"], "%+.4f") << "</td><td class=\"n\">"
        << (b["ci95"].is_array() ? "[" + num(element(b["ci95"], 0), "%+.4f") + ", " + num(element(b["ci95"], 1), "%+.4f") + "]" : "–") << "</td><td class=\"n\">"
        << num(b["p"], b["p"].is_number() && b["p"].get<double>() < 1e-3 ? "%.1e" : "%.3f") << "</td>";
      if (b.contains("paired")) {
        const auto& q = b["paired"];
        o << "<td class=\"n\">" << num(q["diff"], "%+.4f") << " (" << q["n"].get<int>() << ")</td><td class=\"n\">"
          << num(q["p"], q["p"].is_number() && q["p"].get<double>() < 1e-3 ? "%.1e" : "%.3f") << "</td>";
      } else {
        o << "<td>–</td><td>–</td>";
      }
    }
    std::string per;
    for (const auto& x : s["val_loss"]["values"]) per += (per.empty() ? "" : ", ") + f(x.get<double>(), "%.4f");
    o << "<td class=\"n\">" << per << "</td></tr>\n";
  }
  o << "</table>\n<p style=\"font-size:13px;color:#555\">Δ = mean(variant) − mean(baseline) of the final validation loss on the whole "
       "validation shard; Welch's unequal-variance t-test, Welch–Satterthwaite degrees of freedom, two-sided p. Paired: the mean of "
       "the per-seed differences to the baseline's run of the same seed (same data order) and its t-test on n − 1 degrees of "
       "freedom. With few seeds the intervals are wide.</p>\n";
}

}  // namespace

std::string render_report_html(const json& results) {
  const auto& g = results["grid"];
  std::vector<std::string> order;
  for (const auto& v : g["variants"]) order.push_back(v["name"].get<std::string>());
  std::map<std::string, std::string> color;
  for (size_t i = 0; i < order.size(); ++i) color[order[i]] = kColors[i % 10];
  std::map<std::string, std::vector<const json*>> runs_of;
  for (const auto& r : results["runs"])
    if (!compare::is_budget_run(r)) runs_of[r["variant"].get<std::string>()].push_back(&r);

  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>attnlab compare: " << esc(g["name"].get<std::string>())
    << "</title>\n<style>\nbody{font-family:sans-serif;margin:24px;max-width:1150px;color:#222}\n"
       "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #bbb;padding:4px 8px;font-size:13px}\n"
       "td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f2f2f2}\n"
       "figure{margin:18px 0}figcaption{font-size:13px;color:#555;max-width:760px}code{background:#f4f4f4}\n"
       ".grid{display:flex;flex-wrap:wrap;gap:12px}\n</style>\n</head>\n<body>\n";
  o << "<h1>attnlab compare: " << esc(g["name"].get<std::string>()) << "</h1>\n<p>preset <code>" << esc(g["preset"].get<std::string>())
    << "</code>";
  for (const auto& s : g["sets"]) o << ", <code>" << esc(s.get<std::string>()) << "</code>";
  const bool language_model = g.value("language_model", true);
  if (language_model) o << "; " << g["steps"].get<int>() << " steps, " << results["tokens_per_run"].get<long long>() << " tokens per run";
  else o << "; a task-only grid (<code>language_model = false</code>): no language model, the task models only";
  o << "; seeds";
  for (const auto& s : g["seeds"]) o << " " << s.get<uint64_t>();
  o << "; baseline <code>" << esc(g["baseline"].get<std::string>()) << "</code>; attnlab " << esc(results.value("attnlab_version", "?")) << ".</p>\n";
  if (results.contains("partial"))
    o << "<p id=\"partial\"><strong>Partial:</strong> " << results["partial"]["runs_done"].get<long long>() << " of "
      << results["partial"]["runs_total"].get<long long>() << " runs finished; the seeds per variant are in the table's n.</p>\n";

  if (language_model) language_model_section(o, results, order, color, runs_of);

  // The primary comparisons and the gains in compute, where the grid has them (docs/compare.md).
  if (results.contains("primary_comparisons") && results["primary_comparisons"].is_object()) {
    const json& pc = results["primary_comparisons"];
    o << "<h2>Primary comparisons</h2>\n" << html_table("primary-table", compare::primary_table(pc))
      << "<p style=\"font-size:13px;color:#555\">The comparisons the grid names in <code>[primary]</code>. Δ = mean loss of A − "
         "mean loss of B with its two-sided 95% interval; <code>A &lt; B</code> and <code>A &gt; B</code> are tested one-sided, "
         "<code>A vs B</code> two-sided. p (t): paired t-test by seed when both finished the same seeds, else Welch. p (sign-flip): "
         "exact permutation test over all 2<sup>n</sup> sign patterns of the per-seed differences; n seeds cannot give less than "
         "1/2<sup>n</sup> one-sided, 2/2<sup>n</sup> two-sided";
    if (pc.contains("sign_flip_min_seeds"))
      o << " (so it can reject at α only from " << pc["sign_flip_min_seeds"]["one_sided"].get<int>() << " seeds one-sided, "
        << pc["sign_flip_min_seeds"]["two_sided"].get<int>() << " two-sided, after Holm)";
    o << ". Holm-adjusted over these " << pc["comparisons"].size() << " comparison" << (pc["comparisons"].size() == 1 ? "" : "s")
      << "; the table above is not adjusted (secondary). Seeds: the smallest n at which "
         "the paired t-test has " << f(100 * pc["power"].get<double>(), "%.0f") << "% power at α = " << f(pc["alpha"].get<double>(), "%g")
      << " (noncentral t), from the sd of the observed per-seed differences, at the effect shown.</p>\n";
  }
  if (results.contains("compute_gains") && results["compute_gains"].is_object()) {
    const json& cg = results["compute_gains"];
    const std::string base = cg["variant"].get<std::string>();
    o << "<h2>Gains in compute</h2>\n<p style=\"font-size:13px;color:#555\"><code>" << esc(base)
      << "</code> trained at k × the grid's tokens per run; least-squares line of its final loss in ln(tokens): "
      << esc(compare::gains_fit_text(cg)) << ". A line in log tokens, not a power law (a few budgets cannot determine its "
         "curvature).</p>\n" << html_table("budget-table", compare::budget_points_table(cg));
    if (!cg["gains"].empty())
      o << html_table("gains-table", compare::gains_table(cg)) << "<p style=\"font-size:13px;color:#555\">Each variant's mean loss "
        << "read off the line: the tokens <code>" << esc(base) << "</code> needs to match it, in multiples of this grid's. Interval: "
           "delta method for the ratio of the per-seed means over seeds, t<sub>0.975, n−1</sub>. Outside the swept range the line "
           "is extrapolated.</p>\n";
  }

  // Length extrapolation: loss against the evaluated length, mean ± sd over seeds.
  {
    std::vector<Series> all, beyond;
    for (const auto& v : order) {
      std::vector<const json*> ls;
      for (const json* r : runs_of[v])
        if (r->contains("lengths") && (*r)["lengths"].is_object()) ls.push_back(&(*r)["lengths"]);
      if (ls.empty() || ls.size() != runs_of[v].size()) continue;
      all.push_back(across_seeds(v, color[v], ls, "multiple", "loss"));
      beyond.push_back(across_seeds(v, color[v], ls, "multiple", "loss_beyond_train"));
    }
    if (!all.empty()) {
      o << "<h2>Length extrapolation (attnlab eval --lengths)</h2>\n<figure id=\"fig-lengths\" class=\"figure\">\n<div class=\"grid\">"
        << line_plot("Validation loss at L × T_train, all positions", "L / T_train", "loss (nats/token)", all, 560, 320)
        << line_plot("Validation loss at positions ≥ T_train", "L / T_train", "loss (nats/token)", beyond, 560, 320)
        << "</div><figcaption>Each model read BOS-prefixed blocks of L tokens (the same token budget, "
        << (g.contains("length_tokens") ? std::to_string(g["length_tokens"].get<long long>()) : std::string("?"))
        << " tokens, at every length) through its KV cache; mean ± sd over seeds. A model that extrapolates keeps its loss flat "
           "(or lower) beyond T_train. Learned positions are undefined beyond T_train and have no points there.</figcaption>\n</figure>\n";
    }
  }
  if (results.contains("length_did") && results["length_did"].is_object()) {
    const json& did = results["length_did"];
    o << "<h2>Length difference-in-differences</h2>\n";
    if (did.contains("note")) o << "<p>" << esc(did["note"].get<std::string>()) << ".</p>\n";
    o << html_table("length-did-table", compare::length_did_table(did))
      << "<p style=\"font-size:13px;color:#555\">Per seed, DiD = (A − B at length L, those positions) − (A − B at 1×, all "
         "positions), for " << (did.value("comparisons_from", std::string()) == "primary" ? "each primary comparison" : "each variant A against the baseline B")
      << "; the mean over seeds with its t-interval, the two-sided t-test p and the exact sign-flip p. A level effect (the same gap at "
         "every length) gives DiD ≈ 0. Secondary: these " << did.value("tests", 0)
      << " tests (lengths × position ranges × comparisons) are not adjusted for multiple comparisons.</p>\n";
  }

  // Synthetic tasks: accuracy and answer log-probability against length.
  if (g.contains("tasks") && g["tasks"].is_array()) {
    for (const auto& t : g["tasks"]) {
      const std::string name = t["name"].get<std::string>();
      std::vector<Series> acc, lp, strict;
      for (const auto& v : order) {
        std::vector<const json*> ts;
        for (const json* r : runs_of[v])
          if (r->contains("tasks") && (*r)["tasks"].contains(name)) ts.push_back(&(*r)["tasks"][name]);
        if (ts.empty() || ts.size() != runs_of[v].size()) continue;
        acc.push_back(across_seeds(v, color[v], ts, "multiple", "token_accuracy"));
        strict.push_back(across_seeds(v, color[v], ts, "multiple", "strict_accuracy"));
        lp.push_back(across_seeds(v, color[v], ts, "multiple", "answer_logprob"));
      }
      if (acc.empty()) continue;
      std::string sets;
      for (const auto& x : t["sets"]) sets += (sets.empty() ? "" : ", ") + x.get<std::string>();
      o << "<h2>Task: " << esc(name) << "</h2>\n<figure id=\"fig-task-" << esc(name) << "\" class=\"figure\">\n<div class=\"grid\">"
        << line_plot(name + ": per-token answer accuracy", "L / T_train", "accuracy", acc, 560, 320, false, 0, 1)
        << line_plot(name + ": whole answers right (strict)", "L / T_train", "accuracy", strict, 560, 320, false, 0, 1)
        << line_plot(name + ": answer log-probability", "L / T_train", "log p(answer)", lp, 560, 320)
        << "</div><figcaption>Each variant trained on " << esc(name) << " for " << t["steps"].get<int>() << " steps (<code>" << esc(sets)
        << "</code>, the run's seed), then evaluated on " << t["samples"].get<int>()
        << " fresh samples per length (needle: per length and depth, averaged over depths); mean ± sd over seeds.</figcaption>\n</figure>\n";
      if (results.contains("task_accuracy") && results["task_accuracy"].is_object())
        for (const auto& ta : results["task_accuracy"]["tasks"]) {
          if (ta["task"] != name) continue;
          o << html_table("task-accuracy-" + name, compare::task_accuracy_table(ta))
            << "<p style=\"font-size:13px;color:#555\">Strict accuracy pooled over the seeds (k solved of n = samples × seeds) with "
               "the Wilson 95% score interval; Δ vs baseline with Newcombe's hybrid score interval. Pooling treats each sample as "
               "an independent trial: the interval is the evaluation's sampling error for these models, not the spread between "
               "seeds.</p>\n";
          if (ta.contains("depths"))
            o << "<h3>NIAH by depth</h3>\n" << html_table("task-depth-" + name, compare::depth_accuracy_table(ta));
        }
    }
  }

  // Analysis figures, from the first seed of each variant that has them.
  std::map<std::string, const json*> an;
  for (const auto& v : order)
    for (const json* r : runs_of[v])
      if (r->contains("analysis") && (*r)["analysis"].is_object()) { an[v] = &(*r)["analysis"]; break; }
  if (!an.empty()) {
    o << "<h2>Diagnostics (attnlab analyze, first seed of each variant)</h2>\n";
    std::vector<Series> cos, self;
    for (const auto& v : order) {
      if (!an.count(v)) continue;
      Series a, b;
      a.name = b.name = v;
      a.color = b.color = color[v];
      for (const auto& l : (*an[v])["similarity"]) {
        a.x.push_back(l["layer"].get<double>()); b.x.push_back(l["layer"].get<double>());
        a.y.push_back(l["cos_yv"].is_number() ? l["cos_yv"].get<double>() : NAN);
        b.y.push_back(l["self"].is_number() ? l["self"].get<double>() : NAN);
      }
      cos.push_back(a);
      self.push_back(b);
    }
    o << "<figure id=\"fig-similarity\" class=\"figure\">\n<div class=\"grid\">" << line_plot("cos(y, v) by layer (§8.1, before XSA)", "layer", "mean cos(y_t, v_t)", cos, 560, 320, true)
      << line_plot("self weight a_tt by layer (§8.1)", "layer", "mean a_tt", self, 560, 320, true)
      << "</div><figcaption>The similarity bias XSA removes: the cosine between each head's output (before XSA) and the token's own "
         "value, and the attention weight of a token on itself, mean over heads, sequences and positions.</figcaption>\n</figure>\n";
    bool any_goat = false;
    for (const auto& [v, a] : an) any_goat |= (*a)["goat"].is_object();
    if (any_goat) {
      o << "<figure id=\"fig-goat\" class=\"figure\">\n<div class=\"grid\">";
      for (const auto& v : order) {
        if (!an.count(v) || !(*an[v])["goat"].is_object()) continue;
        const auto& layers = (*an[v])["goat"]["layers"];
        if (layers.empty()) continue;
        const auto& l = layers.back();
        std::vector<Series> hs;
        int h = 0;
        for (const auto& rel : l["rel"]) {
          Series s;
          s.name = "kv head " + std::to_string(h);
          s.color = kColors[h++ % 10];
          s.x = nums(l["delta"]);
          s.y = nums(rel);
          hs.push_back(s);
        }
        o << line_plot(v + ": GOAT prior rel(Δ), layer " + std::to_string(l["layer"].get<int>()) + " (§8.2)", "Δ (tokens)", "rel(Δ) (logit)", hs, 560, 320);
      }
      o << "</div><figcaption>GOAT's learned relative prior rel(Δ) on the last GOAT layer, per KV head, up to 8·T_train.</figcaption>\n</figure>\n";
    }
    bool any_depth = false;
    for (const auto& [v, a] : an) any_depth |= (*a)["depth"].is_object();
    if (any_depth) {
      o << "<figure id=\"fig-depth\" class=\"figure\">\n<div class=\"grid\">";
      for (const auto& v : order) {
        if (!an.count(v) || !(*an[v])["depth"].is_object()) continue;
        const auto& d = (*an[v])["depth"];
        std::vector<std::string> cols;
        for (const auto& c : d["columns"]) cols.push_back(c.get<std::string>());
        int si = 0;
        for (const auto& stream : d["streams"]) {
          std::vector<std::string> rows;
          std::vector<std::vector<double>> vals;
          for (const auto& r : stream) { rows.push_back(r["label"].get<std::string>()); vals.push_back(nums(r["weights"])); }
          o << heatmap(v + ": depth map (" + d["kind"].get<std::string>() + ", stream " + std::to_string(si++) + ", §8.3)", rows, cols, vals);
        }
      }
      o << "</div><figcaption>Mean depth-attention weight of each read (row) on each history entry and the partial block state "
           "(column); grey: no such candidate.</figcaption>\n</figure>\n";
    }
  }
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace attnlab
