// The diagnostics of docs/mechanisms.md §8.1–§8.5 (analyze.h; the JSON schema and every definition
// are in docs/analysis.md). One observer (model/trace.h) sees each forward's attention layers and the
// residual kind's states and accumulates, in double, what §8 asks for; the GOAT prior of §8.2 comes
// from the parameters themselves, and the rescue gain of §8.5 from patched forwards (DAR, HC, mHC).
#include "experiment/analyze.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "model/version.h"

namespace attnlab {

using nlohmann::json;

namespace {

// JSON numbers must be finite: NaN (a statistic with no data) becomes null.
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}

// Mean, population standard deviation, min and max of per-head values: "per layer mean and head spread".
json spread(const std::vector<double>& heads) {
  double m = 0, mn = INFINITY, mx = -INFINITY;
  for (double x : heads) m += x, mn = std::min(mn, x), mx = std::max(mx, x);
  m /= heads.size();
  double v = 0;
  for (double x : heads) v += (x - m) * (x - m);
  return json{{"heads", nums(heads)}, {"mean", num(m)}, {"std", num(std::sqrt(v / heads.size()))}, {"min", num(mn)},
              {"max", num(mx)}};
}

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }

// Names of the §8.4 signals: sig("H0", r) = "H0.r" (built by appends: GCC 12 warns, wrongly, about
// `"literal" + std::string&&`).
std::string sig(const char* prefix, int a) {
  std::string s(prefix);
  s += '.';
  s += std::to_string(a);
  return s;
}
std::string sig(const char* prefix, int a, int b) {
  std::string s(prefix);
  s += std::to_string(a);
  s += '.';
  s += std::to_string(b);
  return s;
}

std::string spaced(const char* prefix, int a) {
  std::string s(prefix);
  s += ' ';
  s += std::to_string(a);
  return s;
}

std::string sublayer_label(int q, int S) {
  if (q == S + 1) return "read-out";
  std::string s(q % 2 == 1 ? "attn " : "mlp ");
  s += std::to_string((q - 1) / 2);
  return s;
}

// ---- §8.4: Gram accumulators in double for linear CKA over a fixed token sample ----
struct Signal {
  int dim = 0;
  std::vector<double> rows;  // this batch's sampled rows (n_b × dim)
  std::vector<double> sum;   // Σ x over all sampled tokens
  std::vector<double> gram;  // Σ xᵀx (dim × dim)
};
struct Pair {
  std::string a, b;
  std::vector<double> cross;  // Σ x_aᵀ x_b (dim_a × dim_b)
};

// G (p×q) += Xᵀ Y for X (n×p), Y (n×q), row-major; rows of G in parallel.
void gram_add(double* G, const double* X, const double* Y, size_t n, int p, int q) {
#pragma omp parallel for schedule(static)
  for (int a = 0; a < p; ++a) {
    double* g = G + (size_t)a * q;
    for (size_t r = 0; r < n; ++r) {
      const double x = X[r * p + a];
      const double* y = Y + r * q;
#pragma omp simd
      for (int b = 0; b < q; ++b) g[b] += x * y[b];
    }
  }
}

// CKA from the accumulated sums: C_ab = Σ x_aᵀx_b − n μ_aᵀμ_b.
double cka_from(const std::vector<double>& cross, const Signal& A, const Signal& B, const std::vector<double>& gA,
                const std::vector<double>& gB, double n) {
  auto centred_norm2 = [n](const std::vector<double>& G, const std::vector<double>& sa, const std::vector<double>& sb) {
    const int p = (int)sa.size(), q = (int)sb.size();
    double f = 0;
    for (int i = 0; i < p; ++i)
      for (int j = 0; j < q; ++j) {
        const double c = G[(size_t)i * q + j] - sa[i] * sb[j] / n;
        f += c * c;
      }
    return f;
  };
  const double xy = centred_norm2(cross, A.sum, B.sum);
  const double xx = std::sqrt(centred_norm2(gA, A.sum, A.sum)), yy = std::sqrt(centred_norm2(gB, B.sum, B.sum));
  return xx > 0 && yy > 0 ? xy / (xx * yy) : NAN;
}

// ---- §8.1/§8.2/§8.3 accumulation over the traced forwards ----
template <class T>
class Analyzer final : public ForwardObserver<T>, public ResidualInspector<T> {
 public:
  Analyzer(const Config& cfg, int B, int seq, const std::vector<char>& sampled, const AnalyzeOptions& opt)
      : cfg_(cfg), L_(cfg.model.n_layer), H_(cfg.model.n_head), S_(2 * cfg.model.n_layer), B_(B), T_(seq), opt_(opt),
        sampled_(sampled), depth_streams_(residual_kind(cfg.residual.kind).depth_streams(cfg)),
        parallel_streams_(residual_kind(cfg.residual.kind).parallel_streams(cfg)) {
    att_.assign((size_t)L_ * H_, {});
    for (int l = 0; l < L_; ++l)
      if (cfg.attn.goat_at(l)) goat_layer_ = l;  // §8.2: content against sink on the last GOAT layer
    if (goat_layer_ >= 0) cvs_.assign((size_t)4 * T_, 0.0);
  }

  bool accumulate = true;       // this forward's diagnostics count (the clean run)
  bool capture_reads = false;   // §8.5: copy every DAR read R^j (the corrupted run)
  std::map<std::pair<int, int>, std::vector<T>> captured;  // (q, j) → R̃^j
  size_t row0 = 0;              // global index of this batch's first token (for the CKA sample)

  // ---------------- §8.1 (and §8.2's content against sink) ----------------
  void attention(const AttentionView<T>& v) override {
    if (!accumulate) return;
    const int G = v.H / v.Hkv, Dh = v.Dh;
    // vsim (per KV head): mean over j < t of cos(v_t, v_j) = v̂_t·(Σ_{j<t} v̂_j)/t, by a prefix sum.
    std::vector<double> vsim((size_t)v.B * v.Hkv * v.seq, 0.0);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < v.B; ++b)
      for (int kv = 0; kv < v.Hkv; ++kv) {
        std::vector<double> pre(Dh, 0.0), hat(Dh);
        for (int t = 0; t < v.seq; ++t) {
          const T* x = v.v(b, t, kv);
          double n2 = 0;
          for (int d = 0; d < Dh; ++d) n2 += double(x[d]) * double(x[d]);
          const double inv = n2 > 0 ? 1 / std::sqrt(n2) : 0;
          double dot = 0;
          for (int d = 0; d < Dh; ++d) hat[d] = double(x[d]) * inv, dot += hat[d] * pre[d];
          vsim[((size_t)b * v.Hkv + kv) * v.seq + t] = t > 0 ? dot / t : NAN;
          for (int d = 0; d < Dh; ++d) pre[d] += hat[d];
        }
      }
#pragma omp parallel for schedule(static)
    for (int h = 0; h < v.H; ++h) {
      AttStats& a = att_[(size_t)v.layer * H_ + h];
      const int kv = h / G;
      std::vector<double> y(Dh);
      for (int b = 0; b < v.B; ++b)
        for (int t = 1; t < v.seq; ++t) {  // §8.1: positions t ≥ 1 (y_0 = v_0)
          const T *q = v.q(b, t, h), *k = v.k(b, t, kv), *vv = v.v(b, t, kv), *z = v.z(b, t, h);
          double qk = 0, vn2 = 0, zv = 0, zn2 = 0;
          for (int d = 0; d < Dh; ++d) {
            qk += double(q[d]) * double(k[d]);
            vn2 += double(vv[d]) * double(vv[d]);
            zv += double(z[d]) * double(vv[d]);
            zn2 += double(z[d]) * double(z[d]);
          }
          // a_tt = exp(ℓ_tt − lse_t); the ALiBi bias is 0 at distance 0.
          a.self += std::exp(double(v.scale) * qk - double(v.row_lse(b, h, t)));
          const double vn = std::sqrt(vn2);
          // y before XSA: y = z + γ·c·v̂ (§2.1, c saved by the kernel); y = z without XSA.
          double yv = zv, yn2 = zn2;
          if (v.xsa_gamma) {
            const double n = std::max(vn, kernels::kXsaEps), gc = double(v.xsa_gamma[h]) * double(v.xsa_c[((size_t)b * v.H + h) * v.seq + t]);
            yn2 = 0, yv = 0;
            for (int d = 0; d < Dh; ++d) {
              y[d] = double(z[d]) + gc * double(vv[d]) / n;
              yn2 += y[d] * y[d];
              yv += y[d] * double(vv[d]);
            }
            const double czv = zn2 > 0 && vn > 0 ? zv / (std::sqrt(zn2) * vn) : 0;
            a.cos_zv += czv;
            a.max_abs_cos_zv = std::max(a.max_abs_cos_zv, std::abs(czv));
            // |z·v̂|/‖y‖: what is left of the own-value direction relative to y, well conditioned
            // even where y ∥ v makes z (and so the cosine) pure rounding.
            if (yn2 > 0 && vn > 0) a.max_zv_rel = std::max(a.max_zv_rel, std::abs(zv) / (vn * std::sqrt(yn2)));
          }
          a.cos_yv += yn2 > 0 && vn > 0 ? yv / (std::sqrt(yn2) * vn) : 0;
          a.vsim += vsim[((size_t)b * v.Hkv + kv) * v.seq + t];
          a.count += 1;
        }
    }
    if (v.layer == goat_layer_) content_vs_sink(v);
  }

  // §8.2 [Code]: per query position i, over heads and sequences: the content logits' spread ω_i, p_0,
  // p_max and p_recent. Content logit = the first D_c lanes' product (q_c is packed already /sqrt(D_c)).
  void content_vs_sink(const AttentionView<T>& v) {
    const int G = v.H / v.Hkv, Dh = v.Dh, Dc = v.goat_shape->Dc(), W = opt_.recent_window;
#pragma omp parallel for schedule(dynamic, 4)
    for (int i = 0; i < v.seq; ++i) {
      double s_omega = 0, s_p0 = 0, s_pmax = 0, s_recent = 0;
      for (int b = 0; b < v.B; ++b)
        for (int h = 0; h < v.H; ++h) {
          const T* q = v.q(b, i, h);
          const double lse = double(v.row_lse(b, h, i));
          double cmin = INFINITY, cmax = -INFINITY, pmax = 0, recent = 0, p0 = 0;
          for (int j = 0; j <= i; ++j) {
            const T* k = v.k(b, j, h / G);
            double c = 0, rest = 0;
            for (int d = 0; d < Dc; ++d) c += double(q[d]) * double(k[d]);
            for (int d = Dc; d < Dh; ++d) rest += double(q[d]) * double(k[d]);
            cmin = std::min(cmin, c), cmax = std::max(cmax, c);
            double logit = double(v.scale) * (c + rest);
            if (v.alibi_slopes) logit -= double(v.alibi_slopes[h]) * (i - j);
            const double p = std::exp(logit - lse);
            if (j == 0) p0 = p;
            pmax = std::max(pmax, p);
            if (j > i - W) recent += p;
          }
          s_omega += cmax - cmin, s_p0 += p0, s_pmax += pmax, s_recent += recent;
        }
      cvs_[0 * T_ + i] += s_omega, cvs_[1 * T_ + i] += s_p0, cvs_[2 * T_ + i] += s_pmax, cvs_[3 * T_ + i] += s_recent;
    }
    cvs_count_ += double(v.B) * v.H;
  }

  ResidualInspector<T>* residual() override { return this; }

  // ---------------- §8.3 depth maps ----------------
  void depth_weights(int q, int stream, const T* a, int N, int n_cand, int n_entries) override {
    if (!accumulate) return;
    DepthRow& r = depth_[{stream, q}];
    if (r.sum.empty()) r.sum.assign(n_cand, 0.0), r.n_entries = n_entries;
    if (!a) {  // a single candidate, weight exactly 1 (entropy undefined: log N = 0)
      r.sum[0] += N;
      r.count += N;
      return;
    }
    double ent = 0;
    std::vector<double> sum(n_cand, 0.0);
    for (int i = 0; i < N; ++i) {
      const T* w = a + (size_t)i * n_cand;
      double e = 0;
      for (int c = 0; c < n_cand; ++c) {
        sum[c] += double(w[c]);
        if (w[c] > 0) e -= double(w[c]) * std::log(double(w[c]));
      }
      ent += e;
    }
    for (int c = 0; c < n_cand; ++c) r.sum[c] += sum[c];
    if (n_cand > 1) r.entropy += ent / std::log(double(n_cand));
    r.count += N;
  }

  // ---------------- §8.3 HC/mHC maps and the composite gain ----------------
  void stream_maps(int l, const T* maps, int N, int n) override {
    if (capture_reads) {  // §8.5 for HC/mHC: stream s's share of read l, pre_s·X_{l−1,s}, per token
      const int M = 2 * n + n * n, C = last_C_;
      for (int s = 0; s < n; ++s) {
        auto& buf = captured[{l, s}];
        buf.resize((size_t)N * C);
        for (int i = 0; i < N; ++i) {
          const T w = maps[(size_t)i * M + s];
          const T* x = last_X_ + ((size_t)i * n + s) * C;
          for (int c = 0; c < C; ++c) buf[(size_t)i * C + c] = w * x[c];
        }
      }
    }
    if (!accumulate) return;
    n_streams_ = n;
    const int M = 2 * n + n * n;
    MapRow& r = maps_[l];
    if (r.sum.empty()) r.sum.assign(M, 0.0);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < M; ++c) r.sum[c] += double(maps[(size_t)i * M + c]);
    r.count += N;
    // Per token: P ← res_l·P (P = res_1 at l = 1), in double; its gain at every depth.
    if (l == 1) prod_.assign((size_t)N * n * n, 0.0);
    std::vector<double> tmp(n * n);
    double gsum = 0, gmax = 0;
    for (int i = 0; i < N; ++i) {
      const T* res = maps + (size_t)i * M + 2 * n;
      double* P = prod_.data() + (size_t)i * n * n;
      if (l == 1) {
        for (int c = 0; c < n * n; ++c) P[c] = double(res[c]);
      } else {
        for (int s = 0; s < n; ++s)
          for (int u = 0; u < n; ++u) {
            double acc = 0;
            for (int k = 0; k < n; ++k) acc += double(res[s * n + k]) * P[k * n + u];
            tmp[s * n + u] = acc;
          }
        std::copy(tmp.begin(), tmp.end(), P);
      }
      const double g = composite_gain(P, n);
      gsum += g, gmax = std::max(gmax, g);
    }
    r.gain_sum += gsum;
    r.gain_max = std::max(r.gain_max, gmax);
  }

  // ---------------- §8.4 signals ----------------
  void history_entry(int r, int stream, const T* x, int N, int C) override {
    signal(depth_streams_ == 2 ? sig(stream == 0 ? "H0" : "H1", r) : sig("H", r), x, N, C, 1, 0);
  }
  void stream_read(int q, int j, const T* R, int N, int C) override {
    if (capture_reads) {
      auto& buf = captured[{q, j}];
      buf.assign(R, R + (size_t)N * C);
    }
    signal(sig(j == 0 ? "R0" : "R1", q), R, N, C, 1, 0);
  }
  void streams(int l, const T* X, int N, int n, int C) override {
    last_X_ = X, last_C_ = C;
    if (capture_reads && l == S_)  // §8.5: the read-out's share of stream s is X_s itself
      for (int s = 0; s < n; ++s) {
        auto& buf = captured[{S_ + 1, s}];
        buf.resize((size_t)N * C);
        for (int i = 0; i < N; ++i) std::copy(X + ((size_t)i * n + s) * C, X + ((size_t)i * n + s + 1) * C, buf.begin() + (size_t)i * C);
      }
    if (l == 0 || l % 2 != 0) return;  // the state after each layer (l = 2, 4, …, 2L)
    for (int s = 0; s < n; ++s) signal(sig("X", l, s), X, N, C, n, s);
  }
  // Gathers this batch's sampled rows of x (row i at x + (i·n_streams + stream)·C).
  void signal(const std::string& name, const T* x, int N, int C, int n_streams, int stream) {
    if (!accumulate) return;
    Signal& s = signals_[name];
    if (s.dim == 0) s.dim = C, s.sum.assign(C, 0.0), s.gram.assign((size_t)C * C, 0.0);
    s.rows.clear();
    for (int i = 0; i < N; ++i)
      if (sampled_[row0 + i]) {
        const T* r = x + ((size_t)i * n_streams + stream) * C;
        for (int c = 0; c < C; ++c) s.rows.push_back(double(r[c])), s.sum[c] += double(r[c]);
      }
  }
  // After each clean forward: Σ xᵀx of every signal and Σ x_aᵀx_b of every pair the kind needs.
  void end_batch() {
    if (signals_.empty()) return;
    if (pairs_.empty()) make_pairs();
    for (auto& [name, s] : signals_) gram_add(s.gram.data(), s.rows.data(), s.rows.data(), s.rows.size() / s.dim, s.dim, s.dim);
    for (Pair& p : pairs_) {
      const Signal &a = signals_.at(p.a), &b = signals_.at(p.b);
      if (p.cross.empty()) p.cross.assign((size_t)a.dim * b.dim, 0.0);
      gram_add(p.cross.data(), a.rows.data(), b.rows.data(), a.rows.size() / a.dim, a.dim, b.dim);
    }
    n_sampled_ += signals_.begin()->second.rows.size() / signals_.begin()->second.dim;
  }
  void make_pairs() {
    auto add = [&](const std::string& a, const std::string& b) {
      if (signals_.count(a) && signals_.count(b)) pairs_.push_back({a, b, {}});
    };
    const int M = n_entries();
    if (depth_streams_ == 2) {  // DAR
      for (int r = 0; r < M; ++r) add(sig("H0", r), sig("H1", r));
      for (int s = 0; s < 2; ++s)
        for (int r = 0; r < M; ++r)
          for (int r2 = r + 1; r2 < M; ++r2) add(sig(s == 0 ? "H0" : "H1", r), sig(s == 0 ? "H0" : "H1", r2));
      for (int q = 1; q <= S_ + 1; ++q) add(sig("R0", q), sig("R1", q));
    } else if (depth_streams_ == 1) {  // AttnRes
      for (int r = 0; r < M; ++r)
        for (int r2 = r + 1; r2 < M; ++r2) add(sig("H", r), sig("H", r2));
    } else {
      for (int l = 2; l <= S_; l += 2)
        for (int s = 0; s < n_streams_; ++s)
          for (int s2 = s + 1; s2 < n_streams_; ++s2)
            add(sig("X", l, s), sig("X", l, s2));
    }
  }
  int n_entries() const {
    if (depth_streams_ == 0) return 0;
    const int K = cfg_.residual.block_size;
    return 1 + (S_ + K - 1) / K;
  }
  double cka(const std::string& a, const std::string& b) const {
    if (a == b) return 1.0;
    for (const Pair& p : pairs_)
      if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) {
        const Signal &A = signals_.at(p.a), &B = signals_.at(p.b);
        return cka_from(p.cross, A, B, A.gram, B.gram, double(n_sampled_));
      }
    return NAN;
  }

  // ---------------- results ----------------
  json attention_json() const {
    json layers = json::array();
    for (int l = 0; l < L_; ++l) {
      std::vector<double> cyv(H_), self(H_), vsim(H_), czv(H_);
      double max_czv = 0, max_rel = 0;
      for (int h = 0; h < H_; ++h) {
        const AttStats& a = att_[(size_t)l * H_ + h];
        cyv[h] = a.cos_yv / a.count, self[h] = a.self / a.count, vsim[h] = a.vsim / a.count, czv[h] = a.cos_zv / a.count;
        max_czv = std::max(max_czv, a.max_abs_cos_zv);
        max_rel = std::max(max_rel, a.max_zv_rel);
      }
      const bool xsa = cfg_.attn.xsa_at(l);
      json j{{"layer", l}, {"pos", cfg_.attn.pos_at(l)}, {"xsa", xsa ? cfg_.attn.xsa : "off"},
             {"cos_yv", spread(cyv)}, {"self", spread(self)}, {"vsim", spread(vsim)}};
      j["cos_zv"] = xsa ? spread(czv) : json(nullptr);
      j["max_abs_cos_zv"] = xsa ? num(max_czv) : json(nullptr);
      j["max_abs_zv_rel"] = xsa ? num(max_rel) : json(nullptr);
      layers.push_back(j);
    }
    return json{{"positions", "t >= 1"}, {"count_per_head", att_.empty() ? 0.0 : att_[0].count}, {"layers", layers}};
  }

  json content_vs_sink_json() const {
    if (goat_layer_ < 0) return nullptr;
    std::vector<double> v[4];
    for (int k = 0; k < 4; ++k) {
      v[k].resize(T_);
      for (int i = 0; i < T_; ++i) v[k][i] = cvs_[(size_t)k * T_ + i] / cvs_count_;
    }
    return json{{"layer", goat_layer_}, {"recent_window", opt_.recent_window}, {"omega", nums(v[0])}, {"p0", nums(v[1])},
                {"pmax", nums(v[2])}, {"p_recent", nums(v[3])}};
  }

  json depth_json() const {
    const std::string& kind = cfg_.residual.kind;
    if (depth_streams_ == 0) return nullptr;
    const int M = n_entries();
    json columns = json::array();
    for (int r = 0; r < M; ++r) columns.push_back(r == 0 ? std::string("e") : spaced("entry", r));
    columns.push_back("partial");
    json streams = json::array();
    for (int s = 0; s < depth_streams_; ++s) {
      json rows = json::array();
      for (int q = 1; q <= S_ + 1; ++q) {
        auto it = depth_.find({s, q});
        if (it == depth_.end()) continue;
        const DepthRow& r = it->second;
        const int n = (int)r.sum.size();
        std::vector<double> w(M + 1, NAN), mean(n);
        double ent_mean = 0;
        for (int c = 0; c < n; ++c) {
          mean[c] = r.sum[c] / r.count;
          w[c < r.n_entries ? c : M] = mean[c];
          if (mean[c] > 0) ent_mean -= mean[c] * std::log(mean[c]);
        }
        rows.push_back(json{{"read", q}, {"label", sublayer_label(q, S_)}, {"n_candidates", n}, {"weights", nums(w)},
                            {"entropy_norm", n > 1 ? num(r.entropy / r.count) : json(nullptr)},
                            {"entropy_norm_of_mean", n > 1 ? num(ent_mean / std::log(double(n))) : json(nullptr)}});
      }
      streams.push_back(json{{"stream", s}, {"rows", rows}});
    }
    return json{{"kind", kind}, {"columns", columns}, {"streams", streams}};
  }

  json streams_json() const {
    const std::string& kind = cfg_.residual.kind;
    if (parallel_streams_ == 0) return nullptr;
    const int n = n_streams_;
    json subs = json::array(), depth = json::array();
    double final_mean = NAN, final_max = NAN;
    for (int l = 1; l <= S_; ++l) {
      auto it = maps_.find(l);
      if (it == maps_.end()) continue;
      const MapRow& r = it->second;
      std::vector<double> pre(n), post(n);
      json res = json::array();
      for (int s = 0; s < n; ++s) pre[s] = r.sum[s] / r.count, post[s] = r.sum[n + s] / r.count;
      for (int s = 0; s < n; ++s) {
        std::vector<double> row(n);
        for (int u = 0; u < n; ++u) row[u] = r.sum[2 * n + s * n + u] / r.count;
        res.push_back(nums(row));
      }
      subs.push_back(json{{"sublayer", l}, {"label", sublayer_label(l, S_)}, {"pre", nums(pre)}, {"post", nums(post)}, {"res", res}});
      depth.push_back(json{{"sublayer", l}, {"mean", num(r.gain_sum / r.count)}, {"max", num(r.gain_max)}});
      final_mean = r.gain_sum / r.count, final_max = r.gain_max;
    }
    return json{{"kind", kind}, {"n", n}, {"sublayers", subs},
                {"composite_gain", json{{"mean", num(final_mean)}, {"max", num(final_max)}, {"by_depth", depth}}}};
  }

  json cka_json() const {
    if (signals_.empty()) return nullptr;
    json out{{"tokens", n_sampled_}};
    const int M = n_entries();
    auto within = [&](const char* prefix) {
      json m = json::array();
      for (int r = 0; r < M; ++r) {
        std::vector<double> row(M);
        for (int r2 = 0; r2 < M; ++r2) row[r2] = cka(sig(prefix, r), sig(prefix, r2));
        m.push_back(nums(row));
      }
      return m;
    };
    if (depth_streams_ == 2) {  // DAR
      std::vector<double> across(M), reads(S_ + 1);
      for (int r = 0; r < M; ++r) across[r] = cka(sig("H0", r), sig("H1", r));
      for (int q = 1; q <= S_ + 1; ++q) reads[q - 1] = cka(sig("R0", q), sig("R1", q));
      out["entries_across_streams"] = nums(across);
      out["reads_across_streams"] = nums(reads);
      out["within_stream"] = json::array({within("H0"), within("H1")});
    } else if (depth_streams_ == 1) {  // AttnRes
      out["within_stream"] = json::array({within("H")});
    } else {
      json states = json::array();
      for (int l = 2; l <= S_; l += 2) {
        json m = json::array();
        for (int s = 0; s < n_streams_; ++s) {
          std::vector<double> row(n_streams_);
          for (int s2 = 0; s2 < n_streams_; ++s2)
            row[s2] = cka(sig("X", l, s), sig("X", l, s2));
          m.push_back(nums(row));
        }
        states.push_back(json{{"sublayer", l}, {"label", spaced("after layer", l / 2 - 1)}, {"matrix", m}});
      }
      out["streams"] = states;
    }
    return out;
  }

 private:
  struct AttStats { double cos_yv = 0, self = 0, vsim = 0, cos_zv = 0, max_abs_cos_zv = 0, max_zv_rel = 0, count = 0; };
  struct DepthRow { std::vector<double> sum; double entropy = 0, count = 0; int n_entries = 0; };
  struct MapRow { std::vector<double> sum; double count = 0, gain_sum = 0, gain_max = 0; };

  const Config& cfg_;
  int L_, H_, S_, B_, T_;
  AnalyzeOptions opt_;
  const std::vector<char>& sampled_;
  std::vector<AttStats> att_;
  int goat_layer_ = -1;
  std::vector<double> cvs_;
  double cvs_count_ = 0;
  std::map<std::pair<int, int>, DepthRow> depth_;
  std::map<int, MapRow> maps_;
  std::vector<double> prod_;
  int n_streams_ = 0;
  const int depth_streams_, parallel_streams_;  // of the residual kind (model/residual/residual.h)
  const T* last_X_ = nullptr;  // the streams shown last (X_{l−1} when stream_maps(l) comes)
  int last_C_ = 0;
  std::map<std::string, Signal> signals_;
  std::vector<Pair> pairs_;
  size_t n_sampled_ = 0;
};

// §8.2 from the parameters (double): rel_κ(Δ), its Fourier part, the slope, u(j), U_κ(j), the sink
// margin, for Δ, j = 0..8·T_train.
template <class T>
json goat_prior_json(const GPT<T>& model) {
  const Config& cfg = model.config();
  const GoatConfig& g = cfg.attn.goat;
  const int L = cfg.model.n_layer, Hkv = cfg.model.kv_heads, R = g.pos_rank, Mf = g.abs_rank;
  const int Ttrain = cfg.model.seq_len, D = 8 * Ttrain;
  const std::vector<double> alibi = alibi_slopes(Hkv);
  std::vector<double> omega(R), omega_abs(Mf);
  for (int r = 0; r < R; ++r) omega[r] = std::pow(g.pos_base, -double(r) / std::max(R - 1, 1));
  for (int m = 0; m < Mf; ++m) omega_abs[m] = std::pow(g.abs_base, -double(m) / std::max(Mf - 1, 1));
  json layers = json::array();
  for (int l = 0; l < L; ++l) {
    if (!cfg.attn.goat_at(l)) continue;
    std::string p("blocks.");
    p += std::to_string(l);
    p += ".attn.goat.";
    const T *A = model.param(p + "A"), *Bp = model.param(p + "B");
    std::vector<double> u;
    if (g.key_bias) {  // u(j) = w2·SiLU(W1 φ(j) + b1) + b2 (§3.4), φ of §3.2 in double
      const T *W1 = model.param(p + "W1"), *b1 = model.param(p + "b1"), *w2 = model.param(p + "w2"), *b2 = model.param(p + "b2");
      const int F = 2 * Mf + 2;
      std::vector<double> phi(F);
      u.resize(D + 1);
      for (int t = 0; t <= D; ++t) {
        for (int m = 0; m < Mf; ++m) phi[m] = std::cos(omega_abs[m] * t), phi[Mf + m] = std::sin(omega_abs[m] * t);
        phi[2 * Mf] = t / double(g.train_len);
        phi[2 * Mf + 1] = std::log1p(double(t)) / std::log1p(double(g.train_len));
        double acc = double(b2[0]);
        for (int k = 0; k < kernels::kGoatHidden; ++k) {
          double a = double(b1[k]);
          for (int f = 0; f < F; ++f) a += double(W1[k * F + f]) * phi[f];
          acc += double(w2[k]) * a / (1 + std::exp(-a));
        }
        u[t] = acc;
      }
    }
    json heads = json::array();
    for (int kv = 0; kv < Hkv; ++kv) {
      std::vector<double> fourier(D + 1), rel(D + 1);
      const double slope = g.key_bias ? softplus(double(model.param(p + "rho")[kv])) : 0.0;
      for (int d = 0; d <= D; ++d) {
        double f = 0;
        for (int r = 0; r < R; ++r) f += double(A[kv * R + r]) * std::cos(omega[r] * d) + double(Bp[kv * R + r]) * std::sin(omega[r] * d);
        fourier[d] = f;
        rel[d] = f - slope * d;
      }
      json h{{"kv_head", kv}, {"fourier", nums(fourier)}, {"rel", nums(rel)}};
      if (g.key_bias) {
        const double gain = double(model.param(p + "gain")[kv]), bump = double(model.param(p + "bump")[kv]);
        std::vector<double> U(D + 1);
        for (int j = 0; j <= D; ++j) U[j] = gain * u[j] + (j == 0 ? bump : 0.0);
        double mean = 0;
        for (int j = 1; j < Ttrain; ++j) mean += U[j];
        mean /= std::max(Ttrain - 1, 1);
        h["slope"] = num(slope);
        h["slope_init"] = g.init == "seeded" ? num(alibi[kv]) : num(softplus(-30.0));
        h["U"] = nums(U);
        h["sink_margin"] = num(U[0] - mean);
      } else {
        h["slope"] = nullptr, h["slope_init"] = nullptr, h["U"] = nullptr, h["sink_margin"] = nullptr;
      }
      heads.push_back(h);
    }
    layers.push_back(json{{"layer", l}, {"key_bias", g.key_bias}, {"u", g.key_bias ? nums(u) : json(nullptr)}, {"kv_heads", heads}});
  }
  return json{{"T_train", Ttrain}, {"delta_max", D}, {"init", g.init}, {"omega", nums(omega)}, {"layers", layers}};
}

}  // namespace

double linear_cka(const double* X, const double* Y, size_t n, int p, int q) {
  std::vector<double> mx(p, 0.0), my(q, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < p; ++a) mx[a] += X[i * p + a] / n;
    for (int b = 0; b < q; ++b) my[b] += Y[i * q + b] / n;
  }
  std::vector<double> Xc(n * p), Yc(n * q);
  for (size_t i = 0; i < n; ++i) {
    for (int a = 0; a < p; ++a) Xc[i * p + a] = X[i * p + a] - mx[a];
    for (int b = 0; b < q; ++b) Yc[i * q + b] = Y[i * q + b] - my[b];
  }
  auto fro2 = [n](const std::vector<double>& A, int pa, const std::vector<double>& Bm, int pb) {
    double f = 0;
    for (int a = 0; a < pa; ++a)
      for (int b = 0; b < pb; ++b) {
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += A[i * pa + a] * Bm[i * pb + b];
        f += s * s;
      }
    return f;
  };
  const double xx = std::sqrt(fro2(Xc, p, Xc, p)), yy = std::sqrt(fro2(Yc, q, Yc, q));
  return xx > 0 && yy > 0 ? fro2(Yc, q, Xc, p) / (xx * yy) : 0.0;
}

double linear_cka_streaming(const double* X, const double* Y, size_t n, int p, int q, size_t chunk) {
  Signal A, B;
  A.dim = p, B.dim = q;
  A.sum.assign(p, 0.0), B.sum.assign(q, 0.0), A.gram.assign((size_t)p * p, 0.0), B.gram.assign((size_t)q * q, 0.0);
  std::vector<double> cross((size_t)p * q, 0.0);
  for (size_t r0 = 0; r0 < n; r0 += chunk) {
    const size_t m = std::min(chunk, n - r0);
    const double *x = X + r0 * p, *y = Y + r0 * q;
    for (size_t i = 0; i < m; ++i) {
      for (int a = 0; a < p; ++a) A.sum[a] += x[i * p + a];
      for (int b = 0; b < q; ++b) B.sum[b] += y[i * q + b];
    }
    gram_add(A.gram.data(), x, x, m, p, p);
    gram_add(B.gram.data(), y, y, m, q, q);
    gram_add(cross.data(), x, y, m, p, q);
  }
  return cka_from(cross, A, B, A.gram, B.gram, double(n));
}

double composite_gain(const double* M, int n) {
  double g = 0;
  for (int s = 0; s < n; ++s) {
    double row = 0, col = 0;
    for (int u = 0; u < n; ++u) row += std::abs(M[s * n + u]), col += std::abs(M[u * n + s]);
    g = std::max({g, row, col});
  }
  return g;
}

std::vector<int32_t> draw_windows(const uint16_t* tokens, size_t size, int n, int len, uint64_t seed) {
  if (size < (size_t)len) fail("the data has ", size, " tokens, fewer than one window of ", len);
  Rng rng(seed);
  std::vector<int32_t> out;
  out.reserve((size_t)n * len);
  for (int i = 0; i < n; ++i) {
    const size_t start = rng.below(size - len + 1);
    for (int t = 0; t < len; ++t) out.push_back(tokens[start + t]);
  }
  return out;
}

template <class T>
json analyze(GPT<T>& model, const std::vector<int32_t>& seqs, const std::vector<int32_t>& corrupt, int n_seq, int seq_len,
             const AnalyzeOptions& opt) {
  const Config& cfg = model.config();
  const int W = seq_len + 1, S = 2 * cfg.model.n_layer;
  if (n_seq < 1 || seq_len < 2) fail("analyze: need at least one sequence of at least 2 tokens");
  if (seqs.size() != (size_t)n_seq * W) fail("analyze: expected ", n_seq, " windows of ", W, " tokens");
  if (!corrupt.empty() && corrupt.size() != seqs.size()) fail("analyze: the corrupting windows must match the sequences");
  int B = 1;
  for (int b = std::min(opt.batch, n_seq); b >= 1; --b)
    if (n_seq % b == 0) { B = b; break; }
  if (model.planned_B() == 0) model.plan(B, seq_len);
  if (model.planned_B() != B || model.planned_T() != seq_len)
    fail("analyze: the model is planned for (", model.planned_B(), ", ", model.planned_T(), "), not (", B, ", ", seq_len, ")");
  const int N = B * seq_len;

  // §8.4's token sample: cka_tokens distinct tokens of all n_seq·seq_len, by a seeded draw.
  const size_t total = (size_t)n_seq * seq_len;
  std::vector<char> sampled(total, 0);
  {
    std::vector<size_t> idx(total);
    for (size_t i = 0; i < total; ++i) idx[i] = i;
    Rng rng(opt.seed ^ 0xC0FFEEull);
    const size_t k = std::min(total, (size_t)std::max(opt.cka_tokens, 0));
    for (size_t i = 0; i < k; ++i) std::swap(idx[i], idx[i + rng.below(total - i)]), sampled[idx[i]] = 1;
  }

  Analyzer<T> an(cfg, B, seq_len, sampled, opt);
  // §8.5: DAR's two streams; HC/mHC's n streams (the patched quantity is a stream's share of each read).
  const std::string& kind = cfg.residual.kind;
  const int n_st = residual_patchable_streams(cfg);
  const bool dar_streams = residual_kind(kind).depth_streams(cfg) == 2;
  const bool rescue = n_st > 0 && !corrupt.empty();
  std::vector<double> l_clean(n_seq), l_corr(n_seq);
  std::vector<std::vector<double>> l_patch(rescue ? n_st : 0, std::vector<double>(n_seq));
  std::vector<std::vector<double>> l_patch_depth(rescue && opt.rescue_by_depth ? (S + 1) * n_st : 0, std::vector<double>(n_seq));
  std::vector<int32_t> in(N), tgt(N), in_c(N);
  std::vector<T> losses(N);
  auto per_seq = [&](std::vector<double>& out, int first) {
    for (int b = 0; b < B; ++b) {
      double s = 0;
      for (int t = 0; t < seq_len; ++t) s += double(losses[(size_t)b * seq_len + t]);
      out[first + b] = s / seq_len;
    }
  };
  for (int s0 = 0; s0 < n_seq; s0 += B) {
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < seq_len; ++t) {
        in[(size_t)b * seq_len + t] = seqs[(size_t)(s0 + b) * W + t];
        tgt[(size_t)b * seq_len + t] = seqs[(size_t)(s0 + b) * W + t + 1];
        if (rescue) in_c[(size_t)b * seq_len + t] = corrupt[(size_t)(s0 + b) * W + t];
      }
    // The clean run: every diagnostic.
    an.accumulate = true;
    an.row0 = (size_t)s0 * seq_len;
    model.set_observer(&an);
    model.eval_loss(in.data(), tgt.data(), losses.data());
    an.end_batch();
    per_seq(l_clean, s0);
    if (rescue) {
      // §8.5: the corrupted run reads x̃ (targets of x) and keeps every R̃^j ...
      an.accumulate = false;
      an.capture_reads = true;
      model.eval_loss(in_c.data(), tgt.data(), losses.data());
      an.capture_reads = false;
      model.set_observer(nullptr);
      per_seq(l_corr, s0);
      // ... then x with stream j's reads swapped for R̃^j at every read (and, by depth, at one read).
      for (int j = 0; j < n_st; ++j) {
        for (int q = 1; q <= S + 1; ++q) model.set_read_patch(q, j, an.captured.at({q, j}).data());
        model.eval_loss(in.data(), tgt.data(), losses.data());
        per_seq(l_patch[j], s0);
        for (int q = 1; q <= S + 1; ++q) model.set_read_patch(q, j, nullptr);
      }
      if (opt.rescue_by_depth)
        for (int q = 1; q <= S + 1; ++q)
          for (int j = 0; j < n_st; ++j) {
            model.set_read_patch(q, j, an.captured.at({q, j}).data());
            model.eval_loss(in.data(), tgt.data(), losses.data());
            per_seq(l_patch_depth[(q - 1) * n_st + j], s0);
            model.set_read_patch(q, j, nullptr);
          }
    }
    model.set_observer(nullptr);  // (set again by the next batch; none left pointing at `an` on a stop)
    report_progress(opt.progress, "analyze", s0 + B, n_seq, "windows");
  }
  model.set_observer(nullptr);

  json out;
  out["schema"] = kAnalysisSchema;
  out["version"] = kAnalysisVersion;
  out["attnlab_version"] = version();
  out["config"] = cfg.to_json();
  out["sequences"] = n_seq;
  out["seq_len"] = seq_len;
  out["seed"] = opt.seed;
  double mean_clean = 0;
  for (double x : l_clean) mean_clean += x / n_seq;
  out["loss"] = num(mean_clean);
  out["attention"] = an.attention_json();
  if (cfg.attn.pos == "goat") {
    json g = goat_prior_json(model);
    g["content_vs_sink"] = an.content_vs_sink_json();
    out["goat"] = g;
  } else {
    out["goat"] = nullptr;
  }
  out["depth"] = an.depth_json();
  out["streams"] = an.streams_json();
  out["cka"] = an.cka_json();
  if (!rescue) {
    out["rescue"] = nullptr;
    return out;
  }
  // §8.5 statistics and their bootstrap standard errors over the sequences. G_s = (L_corr −
  // L_patch(s)) / (L_corr − L_clean) is the rescue gain of the other streams when stream s is patched;
  // DAR's RG_{1−j} of §8.5 is G_j.
  auto mean_of = [&](const std::vector<double>& v, const std::vector<int>& idx) {
    double s = 0;
    for (int i : idx) s += v[i];
    return s / idx.size();
  };
  // [L_clean, L_corr, L_patch(0..n−1), G_0..G_{n−1}, max G − min G]
  auto stats = [&](const std::vector<int>& idx, const std::vector<std::vector<double>>& patch) {
    const double c = mean_of(l_clean, idx), r = mean_of(l_corr, idx);
    std::vector<double> v{c, r};
    for (const auto& p : patch) v.push_back(mean_of(p, idx));
    double gmin = INFINITY, gmax = -INFINITY;
    for (size_t k = 0; k < patch.size(); ++k) {
      const double g = (r - v[2 + k]) / (r - c);
      v.push_back(g);
      gmin = std::min(gmin, g), gmax = std::max(gmax, g);
    }
    v.push_back(gmax - gmin);
    return v;
  };
  std::vector<int> all(n_seq);
  for (int i = 0; i < n_seq; ++i) all[i] = i;
  Rng rng(opt.seed ^ 0xB007ull);
  std::vector<std::vector<int>> resamples(opt.bootstrap, std::vector<int>(n_seq));
  for (auto& r : resamples)
    for (int& i : r) i = (int)rng.below(n_seq);
  auto with_se = [&](const std::vector<std::vector<double>>& patch) {
    const std::vector<double> point = stats(all, patch);
    std::vector<double> m(point.size(), 0.0), m2(point.size(), 0.0);
    for (const auto& r : resamples) {
      const std::vector<double> s = stats(r, patch);
      for (size_t k = 0; k < s.size(); ++k) m[k] += s[k], m2[k] += s[k] * s[k];
    }
    std::vector<json> o;
    for (size_t k = 0; k < point.size(); ++k) {
      const double nb = std::max<double>(resamples.size(), 1), mu = m[k] / nb;
      o.push_back(json{{"value", num(point[k])},
                       {"se", resamples.size() > 1 ? num(std::sqrt(std::max(m2[k] / nb - mu * mu, 0.0) * nb / (nb - 1))) : json(nullptr)}});
    }
    return o;
  };
  auto fill = [&](json& dst, const std::vector<json>& v) {
    json lp = json::array(), g = json::array();
    for (int k = 0; k < n_st; ++k) lp.push_back(v[2 + k]), g.push_back(v[2 + n_st + k]);
    dst["L_patch"] = lp;
    dst["RG_when_patched"] = g;
    dst["RG"] = dar_streams ? json::array({g[1], g[0]}) : json(nullptr);  // RG_j: stream j survives
  };
  const std::vector<json> st = with_se(l_patch);
  json rescue_json{{"kind", kind}, {"streams", n_st}, {"sequences", n_seq}, {"bootstrap", opt.bootstrap}, {"L_clean", st[0]},
                   {"L_corr", st[1]}, {"imbalance", st.back()}};
  fill(rescue_json, st);
  if (opt.rescue_by_depth) {
    json by = json::array();
    for (int q = 1; q <= S + 1; ++q) {
      std::vector<std::vector<double>> patch(l_patch_depth.begin() + (q - 1) * n_st, l_patch_depth.begin() + q * n_st);
      json d{{"read", q}, {"label", sublayer_label(q, S)}};
      fill(d, with_se(patch));
      by.push_back(d);
    }
    rescue_json["by_depth"] = by;
  }
  out["rescue"] = rescue_json;
  return out;
}

template json analyze<float>(GPT<float>&, const std::vector<int32_t>&, const std::vector<int32_t>&, int, int, const AnalyzeOptions&);
template json analyze<double>(GPT<double>&, const std::vector<int32_t>&, const std::vector<int32_t>&, int, int,
                              const AnalyzeOptions&);

}  // namespace attnlab
