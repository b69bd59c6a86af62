// `attnlab analyze` (src/experiment/analyze.h, docs/analysis.md): each diagnostic of docs/mechanisms.md
// §8.1–§8.5 against a direct computation on a tiny model, from the q, k, v of the traced forward
// (model/trace.h) or from the math of §8 written out.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "experiment/analyze.h"
#include "model/gpt.h"
#include "model_util.h"

using namespace attnlab;
using nlohmann::json;

namespace {

Config tiny(const std::string& extra) {
  const std::string text =
      "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 16\nmodel.vocab_size = 50\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}

// Random weights away from the init, so that no diagnostic sits at a symmetric point by accident.
template <class T>
void randomize(GPT<T>& m, uint64_t seed, double scale = 0.1) {
  m.init_weights(seed);
  Rng r(seed + 1);
  for (const auto& s : m.registry().specs())
    for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] += T(scale * r.normal());
}

constexpr int kSeqs = 4, kT = 16;

std::vector<int32_t> windows(uint64_t seed) { return test::random_tokens((size_t)kSeqs * (kT + 1), 50, seed); }

AnalyzeOptions options() {
  AnalyzeOptions o;
  o.batch = kSeqs;  // one forward: the test's own traced forward sees the same rows
  o.bootstrap = 50;
  return o;
}

// Copies of every layer's traced buffers (the views are valid only during the call).
template <class T>
struct Capture : ForwardObserver<T> {
  struct Layer {
    AttentionView<T> view;
    std::vector<T> qkv, out, lse, xsa_c, gamma, sink, alibi;
  };
  std::vector<Layer> layers;
  void attention(const AttentionView<T>& v) override {
    Layer c;
    c.view = v;
    const size_t rows = (size_t)v.B * v.seq;
    c.qkv.assign(v.qkv, v.qkv + rows * v.qkv_stride);
    c.out.assign(v.out, v.out + rows * v.H * v.Dh);
    c.lse.assign(v.lse, v.lse + rows * v.H);
    if (v.xsa_c) c.xsa_c.assign(v.xsa_c, v.xsa_c + rows * v.H), c.gamma.assign(v.xsa_gamma, v.xsa_gamma + v.H);
    if (v.sink) c.sink.assign(v.sink, v.sink + v.H);
    if (v.alibi_slopes) c.alibi.assign(v.alibi_slopes, v.alibi_slopes + v.H);
    c.view.qkv = nullptr, c.view.out = nullptr, c.view.lse = nullptr;  // point at the copies below
    layers.push_back(std::move(c));
  }
  void rebind() {
    for (auto& c : layers) {
      c.view.qkv = c.qkv.data(), c.view.out = c.out.data(), c.view.lse = c.lse.data();
      c.view.xsa_c = c.xsa_c.empty() ? nullptr : c.xsa_c.data();
      c.view.xsa_gamma = c.gamma.empty() ? nullptr : c.gamma.data();
      c.view.sink = c.sink.empty() ? nullptr : c.sink.data();
      c.view.alibi_slopes = c.alibi.empty() ? nullptr : c.alibi.data();
    }
  }
};

template <class T>
Capture<T> trace(GPT<T>& m, const std::vector<int32_t>& seqs) {
  std::vector<int32_t> in, tgt;
  for (int s = 0; s < kSeqs; ++s)
    for (int t = 0; t < kT; ++t) in.push_back(seqs[s * (kT + 1) + t]), tgt.push_back(seqs[s * (kT + 1) + t + 1]);
  Capture<T> cap;
  m.set_observer(&cap);
  m.eval_loss(in.data(), tgt.data());
  m.set_observer(nullptr);
  cap.rebind();
  return cap;
}

// §8.1 written out in double from the traced q, k, v (not from the kernel's outputs): softmax over
// j ≤ t (and the sink), y_t = Σ_j a_tj v_j, cos(y_t, v_t), a_tt and mean_{j<t} cos(v_t, v_j), averaged
// over sequences and t ≥ 1, per head.
struct Naive { std::vector<double> cos_yv, self, vsim; };
template <class T>
Naive naive_81(const AttentionView<T>& v) {
  const int G = v.H / v.Hkv, Dh = v.Dh;
  Naive out{std::vector<double>(v.H), std::vector<double>(v.H), std::vector<double>(v.H)};
  auto cosine = [&](const double* a, const T* b) {
    double ab = 0, aa = 0, bb = 0;
    for (int d = 0; d < Dh; ++d) ab += a[d] * double(b[d]), aa += a[d] * a[d], bb += double(b[d]) * double(b[d]);
    return ab / std::sqrt(aa * bb);
  };
  for (int h = 0; h < v.H; ++h) {
    double n = 0;
    for (int b = 0; b < v.B; ++b)
      for (int t = 1; t < v.seq; ++t) {
        std::vector<double> logit(t + 1), y(Dh, 0.0), vt(Dh);
        double mx = v.sink ? double(v.sink[h]) : -INFINITY;
        for (int j = 0; j <= t; ++j) {
          double qk = 0;
          for (int d = 0; d < Dh; ++d) qk += double(v.q(b, t, h)[d]) * double(v.k(b, j, h / G)[d]);
          logit[j] = double(v.scale) * qk - (v.alibi_slopes ? double(v.alibi_slopes[h]) * (t - j) : 0.0);
          mx = std::max(mx, logit[j]);
        }
        double Z = v.sink ? std::exp(double(v.sink[h]) - mx) : 0.0;
        for (int j = 0; j <= t; ++j) Z += std::exp(logit[j] - mx);
        for (int j = 0; j <= t; ++j) {
          const double a = std::exp(logit[j] - mx) / Z;
          for (int d = 0; d < Dh; ++d) y[d] += a * double(v.v(b, j, h / G)[d]);
          if (j == t) out.self[h] += a;
        }
        out.cos_yv[h] += cosine(y.data(), v.v(b, t, h / G));
        for (int d = 0; d < Dh; ++d) vt[d] = double(v.v(b, t, h / G)[d]);
        double vs = 0;
        for (int j = 0; j < t; ++j) vs += cosine(vt.data(), v.v(b, j, h / G));
        out.vsim[h] += vs / t;
        n += 1;
      }
    out.cos_yv[h] /= n, out.self[h] /= n, out.vsim[h] /= n;
  }
  return out;
}

}  // namespace

// §8.1: a_tt, cos(y, v) and vsim from the analyzer equal the direct double computation from the
// traced q, k, v: plain attention (ALiBi, learned sink, GQA) and XSA, where the analyzer must rebuild
// the pre-XSA y = z + γ·c·v̂ from the kernel's saved c. The analyzer reads the kernel's fp32 lse and
// z: agreement to 2e-5 (fp32 rounding of sums of ≤ 16 terms, far below it).
TEST(Analyze, SelfWeightAndCosYvMatchTheDirectComputation) {
  for (const char* extra : {"attn.pos = alibi\nattn.sink = learned\nmodel.kv_heads = 2\n", "attn.pos = rope\nattn.xsa = on\n",
                            "attn.pos = rope\nattn.xsa = gated\n"}) {
    const Config cfg = tiny(extra);
    GPT<float> m(cfg);
    randomize(m, 3, 0.3);
    const auto seqs = windows(5);
    const json a = analyze(m, seqs, {}, kSeqs, kT, options());
    const Capture<float> cap = trace(m, seqs);
    ASSERT_EQ((int)cap.layers.size(), cfg.model.n_layer);
    for (const auto& c : cap.layers) {
      const Naive ref = naive_81(c.view);
      const json& l = a["attention"]["layers"][c.view.layer];
      for (int h = 0; h < cfg.model.n_head; ++h) {
        EXPECT_NEAR(l["self"]["heads"][h].get<double>(), ref.self[h], 2e-5) << extra << " layer " << c.view.layer << " head " << h;
        EXPECT_NEAR(l["cos_yv"]["heads"][h].get<double>(), ref.cos_yv[h], 2e-5) << extra << " layer " << c.view.layer;
        EXPECT_NEAR(l["vsim"]["heads"][h].get<double>(), ref.vsim[h], 1e-9) << extra << " layer " << c.view.layer;
      }
      double mean = 0;
      for (double x : ref.cos_yv) mean += x / ref.cos_yv.size();
      EXPECT_NEAR(l["cos_yv"]["mean"].get<double>(), mean, 2e-5);
    }
  }
}

// §8.1 / §2.4: for XSA (on), cos(z_t, v_t) = 0 up to rounding. Bound: the kernel forms c = fl(y·v̂)
// with |c − y·v̂| ≤ Dh·u·‖y‖ (‖v̂‖ = 1), ‖fl(v̂)‖² = 1 within (Dh + 2)·u, and each z_d = y_d − c·v̂_d
// rounds by u·(|y_d| + |c·v̂_d|), whose sum against v̂ is ≤ 2u·‖y‖ (Cauchy–Schwarz, |c| ≤ ‖y‖). So
// |z·v̂| ≤ (2·Dh + 4)·u·‖y‖ and |cos(z, v)| ≤ (2·Dh + 4)·u·‖y‖/‖z‖, u = 2⁻²⁴; the test takes the largest
// ‖y‖/‖z‖ over the traced rows (t ≥ 1). Rows with y ∥ v (z ≈ 0) make the cosine pure rounding: a
// window whose first tokens repeat gives v_0 = v_1 at layer 0, hence y_1 ∥ v_1. The windows here
// have distinct tokens, and the weights (N(0, 0.02²) plus N(0, 0.05²)) keep y and v apart.
TEST(Analyze, XsaCosZvIsZeroWithinTheRoundingBound) {
  const Config cfg = tiny("attn.pos = rope\nattn.xsa = on\n");
  GPT<float> m(cfg);
  randomize(m, 7, 0.05);
  std::vector<int32_t> seqs;
  Rng pick(8);
  for (int s = 0; s < kSeqs; ++s) {  // kT + 1 distinct tokens of the 50 per window
    std::vector<int32_t> ids(50);
    for (int i = 0; i < 50; ++i) ids[i] = i;
    for (int i = 0; i <= kT; ++i) std::swap(ids[i], ids[i + pick.below(50 - i)]), seqs.push_back(ids[i]);
  }
  const json a = analyze(m, seqs, {}, kSeqs, kT, options());
  const Capture<float> cap = trace(m, seqs);
  const int Dh = cfg.model.head_dim();
  const double u = std::ldexp(1.0, -24);
  for (const auto& c : cap.layers) {
    const auto& v = c.view;
    double ratio = 0;
    for (int b = 0; b < v.B; ++b)
      for (int t = 1; t < v.seq; ++t)
        for (int h = 0; h < v.H; ++h) {
          const float *z = v.z(b, t, h), *vv = v.v(b, t, h / (v.H / v.Hkv));
          double zn = 0, vn = 0;
          for (int d = 0; d < Dh; ++d) zn += double(z[d]) * z[d], vn += double(vv[d]) * vv[d];
          const double cc = v.xsa_c[((size_t)b * v.H + h) * v.seq + t], yn = std::sqrt(zn + cc * cc);  // y = z + c·v̂, z ⟂ v̂
          ratio = std::max(ratio, yn / std::sqrt(zn));
        }
    const double bound = (2.0 * Dh + 4) * u * ratio;
    const json& l = a["attention"]["layers"][v.layer];
    EXPECT_LE(l["max_abs_zv_rel"].get<double>(), (2.0 * Dh + 4) * u) << "layer " << v.layer;  // |z·v̂|/‖y‖, any row
    EXPECT_LE(l["max_abs_cos_zv"].get<double>(), bound) << "layer " << v.layer;
    EXPECT_LE(std::abs(l["cos_zv"]["mean"].get<double>()), bound);
    EXPECT_LT(bound, 1e-4);  // the bound itself is small: the rows are far from y ∥ v
    EXPECT_GT(std::abs(l["cos_yv"]["mean"].get<double>()), 1e-3);  // y itself is not orthogonal
  }
}

// §8.2: rel(Δ) and U(j) of the analyzer are the prior the kernel applies. With q_c = 0 the packed
// logit is Σ_r A cos + B sin (ω_r Δ) + U(j) + softplus(ρ)·t_j (§3.4), so the product of the prior lanes
// minus U(j) and softplus(ρ)·t_i must be rel(i − j); the key lane itself is U(j) + softplus(ρ)·t_j.
// fp32 lanes: within 2e-5·max|Π| (tests/kernels/test_goat.cpp's bound is 1e-5·max|Π| on the logits).
TEST(Analyze, GoatRelIsThePriorTheKernelApplies) {
  const Config cfg = tiny("attn.pos = goat\nmodel.kv_heads = 2\nattn.goat.pos_rank = 3\nattn.goat.abs_rank = 2\n");
  GPT<float> m(cfg);
  m.init_weights(1);
  Rng r(2);
  for (const auto& s : m.registry().specs())  // every GOAT parameter random, so every lane matters
    if (s.name.find(".goat.") != std::string::npos)
      for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] += float(0.3 * r.normal());
  const auto seqs = windows(3);
  const json a = analyze(m, seqs, {}, kSeqs, kT, options());
  const Capture<float> cap = trace(m, seqs);
  const json& g = a["goat"];
  ASSERT_EQ(g["delta_max"].get<int>(), 8 * cfg.model.seq_len);
  const kernels::GoatShape& gs = *cap.layers[0].view.goat_shape;
  const int Dc = gs.Dc(), Dh = gs.Dh, G = gs.H / gs.Hkv;
  for (const auto& c : cap.layers) {
    const auto& v = c.view;
    const json& layer = g["layers"][v.layer];
    for (int kv = 0; kv < gs.Hkv; ++kv) {
      const json& head = layer["kv_heads"][kv];
      const double slope = head["slope"].get<double>();
      double maxpi = 0, err = 0, err_u = 0;
      for (int b = 0; b < v.B; ++b)
        for (int i = 0; i < v.seq; ++i)
          for (int j = 0; j <= i; ++j) {
            const float *q = v.q(b, i, kv * G), *k = v.k(b, j, kv);
            double lanes = 0;
            for (int d = Dc; d < Dh; ++d) lanes += double(q[d]) * double(k[d]);
            const double U = head["U"][j].get<double>(), rel = head["rel"][i - j].get<double>();
            maxpi = std::max(maxpi, std::abs(lanes));
            err = std::max(err, std::abs(lanes - U - slope * i - rel));
            err_u = std::max(err_u, std::abs(double(k[Dh - 1]) - slope * j - U));
          }
      EXPECT_LE(err, 2e-5 * maxpi) << "layer " << v.layer << " kv " << kv;
      EXPECT_LE(err_u, 2e-5 * maxpi) << "layer " << v.layer << " kv " << kv;
      // rel(0) = Σ_r A_r, and the Fourier part is rel without the slope term
      EXPECT_NEAR(head["fourier"][5].get<double>() - slope * 5, head["rel"][5].get<double>(), 1e-12);
      // sink margin δ = U(0) − mean_{1 ≤ j < T_train} U(j)
      double mean = 0;
      for (int j = 1; j < cfg.model.seq_len; ++j) mean += head["U"][j].get<double>() / (cfg.model.seq_len - 1);
      EXPECT_NEAR(head["sink_margin"].get<double>(), head["U"][0].get<double>() - mean, 1e-12);
    }
  }
  // content against sink: probabilities in [0, 1], p_max ≥ p_0, and at i = 0 everything is on token 0
  const json& cs = g["content_vs_sink"];
  EXPECT_EQ(cs["layer"].get<int>(), cfg.model.n_layer - 1);
  EXPECT_NEAR(cs["p0"][0].get<double>(), 1.0, 1e-5);
  EXPECT_NEAR(cs["p_recent"][0].get<double>(), 1.0, 1e-5);
  EXPECT_EQ(cs["omega"][0].get<double>(), 0.0);
  for (int i = 0; i < kT; ++i) EXPECT_GE(cs["pmax"][i].get<double>() + 1e-12, cs["p0"][i].get<double>());
}

// §8.3: every row of a depth map sums to 1 and its normalised entropy lies in [0, 1]; with the zero
// queries of the init every weight is exactly 1/N and the entropy is 1. HC/mHC: at init the mean
// maps are the init maps, and mHC's composite gain is ≥ 1 and close to 1 (doubly stochastic).
TEST(Analyze, DepthMapsSumToOne) {
  for (const char* extra : {"residual.kind = attnres\nresidual.block_size = 2\n", "residual.kind = attnres\n",
                            "residual.kind = dar\n", "residual.kind = dar\nresidual.block_size = 1\n"}) {
    for (bool init : {true, false}) {
      GPT<float> m(tiny(extra));
      if (init) {
        m.init_weights(4);
      } else {
        randomize(m, 4, 0.5);
      }
      const json a = analyze(m, windows(6), {}, kSeqs, kT, options());
      const json& d = a["depth"];
      ASSERT_FALSE(d.is_null()) << extra;
      for (const auto& s : d["streams"])
        for (const auto& row : s["rows"]) {
          double sum = 0;
          int n = 0;
          for (const auto& w : row["weights"])
            if (!w.is_null()) sum += w.get<double>(), ++n;
          EXPECT_EQ(n, row["n_candidates"].get<int>()) << extra;
          EXPECT_NEAR(sum, 1.0, 1e-5) << extra << " read " << row["read"];
          if (n > 1) {
            const double e = row["entropy_norm"].get<double>();
            EXPECT_GE(e, -1e-9);
            EXPECT_LE(e, 1 + 1e-6);
            if (init) {
              EXPECT_NEAR(e, 1.0, 1e-5) << extra;
              for (const auto& w : row["weights"]) {
                if (!w.is_null()) {
                  EXPECT_NEAR(w.get<double>(), 1.0 / n, 1e-6);
                }
              }
            }
          }
        }
    }
  }
  for (const char* kind : {"residual.kind = mhc\n", "residual.kind = hyper\nresidual.streams = 2\n"}) {
    GPT<float> m(tiny(kind));
    m.init_weights(4);
    const json a = analyze(m, windows(6), {}, kSeqs, kT, options());
    const json& s = a["streams"];
    ASSERT_FALSE(s.is_null());
    const int n = s["n"].get<int>();
    for (const auto& sub : s["sublayers"]) {
      double pre = 0;
      for (int k = 0; k < n; ++k) {
        pre += sub["pre"][k].get<double>();
        double row = 0;
        for (int u = 0; u < n; ++u) row += sub["res"][k][u].get<double>();
        EXPECT_NEAR(row, 1.0, 1e-5) << kind;  // HC: A0 = I; mHC: rows of Sinkhorn's output
      }
      EXPECT_NEAR(pre, 1.0, 1e-5) << kind;
    }
    EXPECT_GE(s["composite_gain"]["mean"].get<double>(), 1.0 - 1e-6);
    EXPECT_LT(s["composite_gain"]["max"].get<double>(), 1.01);
  }
}

TEST(Analyze, CompositeGainIsTheLargerAbsoluteSum) {
  const double M[4] = {0.5, -2.0, 0.25, 1.0};  // rows 2.5, 1.25; columns 0.75, 3.0
  EXPECT_EQ(composite_gain(M, 2), 3.0);
}

// §8.4: linear CKA. CKA(X, X) = 1; symmetric; unchanged by an orthogonal map, an isotropic scaling and
// a mean shift of either side. For independent Gaussian X (n×p), Y (n×q), Y_cᵀX_c has pq entries of
// variance ≈ n and ‖X_cᵀX_c‖_F ≈ n·sqrt(p), so CKA ≈ sqrt(pq)/n; its relative spread is about
// sqrt(2/(pq)), so we require CKA < 4·sqrt(pq)/n (0.0078 here). The streaming Gram form the analyzer
// uses equals the direct one.
TEST(Analyze, LinearCkaProperties) {
  const int n = 4096, p = 8, q = 8;
  Rng r(11);
  std::vector<double> X((size_t)n * p), Y((size_t)n * q), Z((size_t)n * q);
  for (auto& x : X) x = r.normal();
  for (int i = 0; i < n; ++i)  // Y depends on X (partly), Z does not
    for (int b = 0; b < q; ++b) Y[i * q + b] = X[i * p + (b * 3) % p] * (b + 1) + 0.5 * r.normal() + 2.0;
  for (auto& z : Z) z = r.normal();
  EXPECT_NEAR(linear_cka(X.data(), X.data(), n, p, p), 1.0, 1e-12);
  const double xy = linear_cka(X.data(), Y.data(), n, p, q);
  EXPECT_NEAR(linear_cka(Y.data(), X.data(), n, q, p), xy, 1e-12);
  EXPECT_GT(xy, 0.2);
  // an orthogonal Q (Gram–Schmidt of a random matrix), scale 3.7, shift c
  std::vector<double> Q((size_t)p * p);
  for (auto& x : Q) x = r.normal();
  for (int a = 0; a < p; ++a) {
    for (int b = 0; b < a; ++b) {
      double d = 0;
      for (int k = 0; k < p; ++k) d += Q[a * p + k] * Q[b * p + k];
      for (int k = 0; k < p; ++k) Q[a * p + k] -= d * Q[b * p + k];
    }
    double nn = 0;
    for (int k = 0; k < p; ++k) nn += Q[a * p + k] * Q[a * p + k];
    for (int k = 0; k < p; ++k) Q[a * p + k] /= std::sqrt(nn);
  }
  std::vector<double> X2((size_t)n * p);
  for (int i = 0; i < n; ++i)
    for (int b = 0; b < p; ++b) {
      double s = 0;
      for (int k = 0; k < p; ++k) s += X[i * p + k] * Q[k * p + b];
      X2[i * p + b] = 3.7 * s + (b - 4.0) * 10;
    }
  EXPECT_NEAR(linear_cka(X2.data(), Y.data(), n, p, q), xy, 1e-10);
  EXPECT_NEAR(linear_cka(X.data(), X2.data(), n, p, p), 1.0, 1e-10);
  const double indep = linear_cka(X.data(), Z.data(), n, p, q);
  EXPECT_GE(indep, 0.0);
  EXPECT_LT(indep, 4 * std::sqrt(double(p * q)) / n);
  EXPECT_NEAR(linear_cka_streaming(X.data(), Y.data(), n, p, q, 333), xy, 1e-10);
  EXPECT_NEAR(linear_cka_streaming(X2.data(), Y.data(), n, p, q, 1000), xy, 1e-10);
  EXPECT_NEAR(linear_cka_streaming(Y.data(), Y.data(), n, q, q, 777), 1.0, 1e-12);
}

// §8.4 in a model: a uniform-init DAR keeps its two streams identical (§6.7), so every CKA between
// them is 1; the diagonals of the within-stream matrices are 1 and the matrices are symmetric.
TEST(Analyze, CkaOfIdenticalDarStreamsIsOne) {
  GPT<float> m(tiny("residual.kind = dar\ndar.init = uniform\n"));
  m.init_weights(9);
  const json a = analyze(m, windows(10), {}, kSeqs, kT, options());
  const json& c = a["cka"];
  ASSERT_FALSE(c.is_null());
  EXPECT_EQ(c["tokens"].get<int>(), kSeqs * kT);
  for (const auto& x : c["entries_across_streams"]) EXPECT_NEAR(x.get<double>(), 1.0, 1e-9);
  for (const auto& x : c["reads_across_streams"]) EXPECT_NEAR(x.get<double>(), 1.0, 1e-9);
  for (const auto& mat : c["within_stream"])
    for (size_t i = 0; i < mat.size(); ++i)
      for (size_t j = 0; j < mat.size(); ++j) {
        if (i == j) {
          EXPECT_EQ(mat[i][j].get<double>(), 1.0);
        } else {
          EXPECT_NEAR(mat[i][j].get<double>(), mat[j][i].get<double>(), 1e-12);
        }
      }
}

// §8.5 for HC and mHC: the patched quantity is a stream's share of each read (Hpre_s·X_s, m_s·X_s,
// X_s at the read-out); with x̃ = x every patched run is the clean run (the share is replaced by
// itself, so the input moves by rounding only: 1e-6 relative), and a different x̃ moves the loss.
TEST(Analyze, RescueGainOfHyperConnections) {
  for (const char* kind : {"residual.kind = mhc\n", "residual.kind = hyper\nresidual.streams = 2\n"}) {
    GPT<float> m(tiny(kind));
    randomize(m, 21, 0.2);
    const auto seqs = windows(22);
    const json a = analyze(m, seqs, seqs, kSeqs, kT, options());
    const json& r = a["rescue"];
    ASSERT_FALSE(r.is_null()) << kind;
    const double clean = r["L_clean"]["value"].get<double>();
    ASSERT_EQ((int)r["L_patch"].size(), m.config().residual.streams);
    for (const auto& p : r["L_patch"]) EXPECT_NEAR(p["value"].get<double>(), clean, 1e-6 * clean) << kind;
    for (const auto& d : r["by_depth"])
      for (const auto& p : d["L_patch"]) EXPECT_NEAR(p["value"].get<double>(), clean, 1e-6 * clean) << kind;
    EXPECT_TRUE(r["RG"].is_null());
    const json b = analyze(m, seqs, windows(23), kSeqs, kT, options());
    EXPECT_NE(b["rescue"]["L_corr"]["value"].get<double>(), clean);
    for (const auto& g : b["rescue"]["RG_when_patched"]) EXPECT_TRUE(g["value"].is_number()) << kind;
  }
}

// §8.5 sanity: patching with x̃ = x gives L_patch = L_clean; a uniform-init DAR gives RG_0 = RG_1
// (its streams are copies, so patching either is the same up to the rounding of the mix; double).
TEST(Analyze, RescueGainSanity) {
  {
    GPT<float> m(tiny("residual.kind = dar\n"));
    randomize(m, 12, 0.2);
    const auto seqs = windows(13);
    const json a = analyze(m, seqs, seqs, kSeqs, kT, options());
    const json& r = a["rescue"];
    ASSERT_FALSE(r.is_null());
    const double clean = r["L_clean"]["value"].get<double>();
    for (int j = 0; j < 2; ++j) EXPECT_EQ(r["L_patch"][j]["value"].get<double>(), clean);
    EXPECT_EQ(r["L_corr"]["value"].get<double>(), clean);
    for (const auto& d : r["by_depth"])
      for (int j = 0; j < 2; ++j) EXPECT_EQ(d["L_patch"][j]["value"].get<double>(), clean);
  }
  {
    GPT<double> m(tiny("residual.kind = dar\ndar.init = uniform\n"));
    randomize(m, 14, 0.2);
    for (const auto& s : m.registry().specs())  // back to the symmetric point: equal stream parameters
      if (s.name.find("gate1") != std::string::npos) {
        const double* g0 = m.param(s.name.substr(0, s.name.size() - 1) + "0");
        for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] = g0[i];
      } else if (s.name.find("query1") != std::string::npos) {
        const double* w0 = m.param(s.name.substr(0, s.name.size() - 1) + "0");
        for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] = w0[i];
      } else if (s.name.find(".mix") != std::string::npos) {
        for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] = 0;
      }
    const json a = analyze(m, windows(15), windows(16), kSeqs, kT, options());
    const json& r = a["rescue"];
    const double gap = r["L_corr"]["value"].get<double>() - r["L_clean"]["value"].get<double>();
    ASSERT_GT(std::abs(gap), 1e-4);  // the corrupted run differs, so RG is well defined
    EXPECT_NEAR(r["RG"][0]["value"].get<double>(), r["RG"][1]["value"].get<double>(), 1e-9);
    EXPECT_NEAR(r["imbalance"]["value"].get<double>(), 0.0, 1e-9);
    EXPECT_GT(r["RG"][0]["se"].get<double>(), 0.0);
  }
}

// The document carries its schema, version and the sections of docs/analysis.md.
TEST(Analyze, SchemaKeys) {
  GPT<float> m(tiny("attn.pos = rope\n"));
  m.init_weights(1);
  const json a = analyze(m, windows(2), {}, kSeqs, kT, options());
  EXPECT_EQ(a["schema"], kAnalysisSchema);
  EXPECT_EQ(a["version"], kAnalysisVersion);
  for (const char* k : {"config", "sequences", "seq_len", "seed", "loss", "attention", "goat", "depth", "streams", "cka", "rescue"})
    EXPECT_TRUE(a.contains(k)) << k;
  EXPECT_TRUE(a["goat"].is_null());
  EXPECT_TRUE(a["depth"].is_null());
  EXPECT_TRUE(a["rescue"].is_null());
  EXPECT_EQ(a["attention"]["layers"].size(), 2u);
}
