// DAR, Dual Attention Residuals (src/model/residual/dar.h, docs/mechanisms.md §6).
// Part 1, the module alone: the residual driven through its call sequence with a fake differentiable
// sublayer F_l(x) = tanh(x·M_l) per token and the loss L = Σ G∘x_F. Against a literal transcription of
// §6.2 (the forward), central finite differences in double of every parameter group and of the
// embedding for all routings, sep_v on/off, include_partial on/off and K = 1..4 (the backward of
// §6.4), and the invariants of §6.7 that do not need the transformer.
// Part 2, residual.kind = dar in the whole GPT: the §6.7 invariants that need it (uniform and parity
// init, dτ at init, the reduction to the AttnRes kind, swap equivariance), float64 finite differences
// of every DAR tensor and the embedding, KV-cached == uncached logits, exact resume and the config keys.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <filesystem>
#include <unistd.h>

#include "check.h"
#include "core/json.h"
#include "model_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "model/residual/dar.h"
#include "train/trainer.h"

using namespace attnlab;

namespace {

struct OneThread {  // thousands of tiny passes: see tests/test_model.cpp
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
};

std::string describe(const DarOptions& o) {
  return std::string(dar_routing_name(o.routing)) + " K=" + std::to_string(o.block_size) + (o.sep_v ? " sep_v" : "") +
         (o.include_partial ? "" : " no-partial") + (o.parity_init ? "" : " uniform");
}

// The module plus a fake transformer around it: parameters (DAR's and the fake sublayers' matrices
// fake.<l>, and the embedding itself as fake.e) in one registry, like the model's.
template <class T>
struct Harness {
  DarOptions opt;
  int S, C, N;
  ParamRegistry reg;
  std::vector<T> params, grads, G;
  Dar<T> dar;
  Arena arena;

  Harness(const DarOptions& o, int S_, int C_, int N_, bool training = true)
      : opt(o), S(S_), C(C_), N(N_), dar(o, S_, C_) {
    Dar<T>::add_params(reg, opt, S, C);
    for (int l = 1; l <= S; ++l) reg.add("fake." + std::to_string(l), {C, C}, Init::Normal, 1.0 / std::sqrt(C), false);
    reg.add("fake.e", {N, C}, Init::Normal, 1.0, false);
    reg.finalize();
    params.assign(reg.total(), T(0));
    grads.assign(reg.total(), T(0));
    dar.bind(reg, params.data(), grads.data());
    for (int pass = 0; pass < 2; ++pass) {
      dar.plan(arena, N, training);
      if (pass == 0) arena.commit();
    }
    G = test::random_vec<T>((size_t)N * C, 99);
  }
  T* p(const std::string& name) { return params.data() + reg.find(name)->offset; }
  T* g(const std::string& name) { return grads.data() + reg.find(name)->offset; }
  const ParamSpec& spec(const std::string& name) { return *reg.find(name); }

  // The registry's init (§6.3 for DAR, W_V = I), fake sublayers N(0, 1/C), embedding N(0, 1).
  void init(uint64_t seed) {
    Rng rng(seed);
    for (const auto& s : reg.specs())
      for (size_t i = 0; i < s.numel; ++i) {
        T& x = params[s.offset + i];
        switch (s.init) {
          case Init::Normal: x = T(rng.normal() * s.init_value); break;
          case Init::Constant: x = T(s.init_value); break;
          case Init::Values: x = T(s.init_values[i]); break;
          case Init::One: x = T(1); break;
          case Init::Zero: x = T(0); break;
        }
      }
  }
  // Away from every symmetric point, so that every term of every gradient is exercised; τ near −1
  // makes the transport t ≈ 0.13 matter.
  void randomize(uint64_t seed) {
    init(seed);
    Rng rng(seed + 7);
    for (const auto& s : reg.specs()) {
      if (s.name.rfind("residual.", 0) != 0) continue;
      const bool value_map = s.name.find("value") != std::string::npos;
      const bool tau = s.name.find("transport") != std::string::npos;
      for (size_t i = 0; i < s.numel; ++i) {
        T& x = params[s.offset + i];
        x = value_map ? x + T(0.3 * rng.normal()) : tau ? T(-1 + 0.5 * rng.normal()) : T(0.7 * rng.normal());
      }
    }
  }

  // Forward through the call sequence; returns L = Σ G∘x_F.
  double forward() {
    std::copy(p("fake.e"), p("fake.e") + (size_t)N * C, dar.embedding());
    dar.begin(N);
    for (int l = 1; l <= S; ++l) {
      const T* x = dar.read(l, N);
      T* o = dar.branch(l);
      const T* M = p("fake." + std::to_string(l));
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
          double z = 0;
          for (int k = 0; k < C; ++k) z += double(x[i * C + k]) * M[k * C + c];
          o[i * C + c] = T(std::tanh(z));
        }
      dar.write(l, N);
    }
    const T* xf = dar.read_out(N);
    double loss = 0;
    for (size_t i = 0; i < (size_t)N * C; ++i) loss += double(G[i]) * xf[i];
    return loss;
  }

  // Forward and backward; gradients accumulate into grads.
  double step() {
    const double loss = forward();
    T* dxf = dar.read_out_grad(N);
    for (size_t i = 0; i < (size_t)N * C; ++i) dxf[i] += G[i];
    dar.read_out_backward(N);
    for (int l = S; l >= 1; --l) {
      const T* dout = dar.branch_grad(l, N);
      T* dx = dar.input_grad(l, N);
      const T *o = dar.branch(l), *x = dar.input(l), *M = p("fake." + std::to_string(l));
      T* dM = g("fake." + std::to_string(l));
      for (int i = 0; i < N; ++i)
        for (int c = 0; c < C; ++c) {
          const double dz = double(dout[i * C + c]) * (1 - double(o[i * C + c]) * o[i * C + c]);
          for (int k = 0; k < C; ++k) {
            dx[i * C + k] += T(dz * M[k * C + c]);
            dM[k * C + c] += T(dz * x[i * C + k]);
          }
        }
      dar.read_backward(l, N);
    }
    const T* de = dar.embedding_grad(N);
    for (size_t i = 0; i < (size_t)N * C; ++i) g("fake.e")[i] += de[i];
    return loss;
  }
};

// ---------------------------------------------------------------------------------------------
// §6.2 written literally, per token, with explicit history lists (the test oracle of the forward).
struct Reference {
  const DarOptions& opt;
  int S, C;
  std::map<std::string, const double*> p;  // parameter by name

  using Vec = std::vector<double>;
  static double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
  Vec rmsnorm(const Vec& x) const {
    double ms = 0;
    for (double v : x) ms += v * v;
    const double rho = std::sqrt(ms / C + 1e-6);
    Vec k(C);
    for (int c = 0; c < C; ++c) k[c] = x[c] / rho;
    return k;
  }
  // R^j for target j of the candidate lists of both streams.
  Vec depth_read(const std::vector<Vec> cand[2], const double* w, int j) const {
    const int ks = dar_key_stream(opt.routing, j), vs = dar_value_stream(opt.routing, j);
    const int n = (int)cand[0].size();
    Vec s(n), out(C, 0.0);
    double mx = -1e300, z = 0;
    for (int r = 0; r < n; ++r) {
      const Vec k = rmsnorm(cand[ks][r]);
      s[r] = 0;
      for (int c = 0; c < C; ++c) s[r] += w[c] * k[c];
      mx = std::max(mx, s[r]);
    }
    for (int r = 0; r < n; ++r) z += std::exp(s[r] - mx);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < C; ++c) out[c] += std::exp(s[r] - mx) / z * cand[vs][r][c];
    if (!opt.sep_v) return out;
    const double* W = p.at(dar_param_name(kDarShared, "value" + std::to_string(j)));
    Vec proj(C, 0.0);
    for (int c = 0; c < C; ++c)
      for (int k = 0; k < C; ++k) proj[c] += out[k] * W[k * C + c];
    return proj;
  }
  Vec mix(const std::vector<Vec> cand[2], int l) const {
    const Vec r0 = depth_read(cand, p.at(dar_param_name(l, "query0")), 0);
    const Vec r1 = depth_read(cand, p.at(dar_param_name(l, "query1")), 1);
    const double* g = p.at(dar_param_name(l, "mix"));
    Vec x(C);
    for (int c = 0; c < C; ++c) x[c] = sigmoid(g[c]) * r0[c] + (1 - sigmoid(g[c])) * r1[c];
    return x;
  }
  // x_F of one token with embedding e.
  Vec forward(const Vec& e) const {
    std::vector<Vec> H[2] = {{e}, {e}};
    Vec P[2];
    bool present = false;
    for (int l = 1; l <= S; ++l) {
      std::vector<Vec> cand[2] = {H[0], H[1]};
      if (present && opt.include_partial)
        for (int s = 0; s < 2; ++s) cand[s].push_back(P[s]);
      const Vec x = mix(cand, l);
      const double* M = p.at("fake." + std::to_string(l));
      Vec o(C);
      for (int c = 0; c < C; ++c) {
        double z = 0;
        for (int k = 0; k < C; ++k) z += x[k] * M[k * C + c];
        o[c] = std::tanh(z);
      }
      const double t = 0.5 * sigmoid(p.at(dar_param_name(l, "transport"))[0]);
      Vec next[2];
      for (int s = 0; s < 2; ++s) {
        const double* b = p.at(dar_param_name(l, "gate" + std::to_string(s)));
        next[s].resize(C);
        for (int c = 0; c < C; ++c)
          next[s][c] = (present ? (1 - t) * P[s][c] + t * P[1 - s][c] : 0.0) + 2 * sigmoid(b[c]) * o[c];
      }
      P[0] = next[0];
      P[1] = next[1];
      present = true;
      if (l % opt.block_size == 0 || l == S) {
        for (int s = 0; s < 2; ++s) H[s].push_back(P[s]);
        present = false;
      }
    }
    return mix(H, kDarFinal);
  }
};

// expect_grad_close, but a tensor whose numerical gradient is rounding noise (< 1e-8 everywhere; its
// entries are O(1e-11)) is a structural zero (§1.5: queries and the mix logit at a read with one
// candidate): its analytic gradient must then be below 1e-9, not close in relative terms.
void expect_grad_close_or_zero(const std::vector<double>& analytic, const test::FdGrad& numeric, double tol,
                               const std::string& what) {
  double num_max = 0, ana_max = 0;
  for (double x : numeric) num_max = std::max(num_max, std::abs(x));
  for (double x : analytic) ana_max = std::max(ana_max, std::abs(x));
  if (num_max < 1e-8) {
    EXPECT_LT(ana_max, 1e-9) << what << ": numerical gradient is zero";
    return;
  }
  test::expect_grad_close(analytic, numeric, tol, what);
}

template <class T>
Reference reference_of(Harness<T>& h, std::vector<double>& storage) {
  storage.assign(h.params.begin(), h.params.end());
  Reference ref{h.opt, h.S, h.C, {}};
  for (const auto& s : h.reg.specs()) ref.p[s.name] = storage.data() + s.offset;
  return ref;
}

std::vector<DarOptions> all_variants() {
  std::vector<DarOptions> v;
  for (DarRouting r : {DarRouting::Reciprocal, DarRouting::SelfKV, DarRouting::CrossV, DarRouting::FixedKV})
    for (int K = 1; K <= 4; ++K)
      for (bool sep_v : {false, true})
        for (bool partial : {true, false}) {
          DarOptions o;
          o.routing = r;
          o.block_size = K;
          o.sep_v = sep_v;
          o.include_partial = partial;
          v.push_back(o);
        }
  return v;
}

}  // namespace

// The module's forward equals §6.2 written literally, for every variant: S = 5 sublayers (so K = 2,
// 3, 4 end with an incomplete block, closed after the last sublayer), random parameters. Double:
// the same operations in another order, 1e-12.
TEST(DarModule, ForwardMatchesLiteralReference) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 5, 6, 3);
    h.randomize(11);
    h.forward();
    std::vector<double> storage;
    const Reference ref = reference_of(h, storage);
    double worst = 0;
    for (int i = 0; i < h.N; ++i) {
      const std::vector<double> e(h.p("fake.e") + i * h.C, h.p("fake.e") + (i + 1) * h.C);
      const auto xf = ref.forward(e);
      for (int c = 0; c < h.C; ++c) worst = std::max(worst, std::abs(xf[c] - h.dar.final_input()[i * h.C + c]));
    }
    EXPECT_LT(worst, 1e-12) << describe(o);
  }
}

// §6.4 against central differences of L in double, for every parameter tensor (every entry), the
// fake sublayers and the embedding, in all 64 variants (4 routings × K = 1..4 × sep_v × include_partial).
// h = 1e-5; the finite difference's own error is bounded per entry (tests/check.h), 1e-7 beyond it.
TEST(DarModule, GradientsMatchFiniteDifferences) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 4, 5, 2);
    h.randomize(21);
    h.step();
    for (const auto& s : h.reg.specs()) {
      std::vector<double> x(h.params.begin() + s.offset, h.params.begin() + s.offset + s.numel);
      const std::vector<double> analytic(h.grads.begin() + s.offset, h.grads.begin() + s.offset + s.numel);
      auto loss = [&]() {
        std::copy(x.begin(), x.end(), h.params.begin() + s.offset);
        return h.forward();
      };
      const auto numeric = test::numeric_grad(x, loss, 1e-5);
      std::copy(x.begin(), x.end(), h.params.begin() + s.offset);
      expect_grad_close_or_zero(analytic, numeric, 1e-7, describe(o) + " " + s.name);
    }
  }
}

// §1.5 structural zeros: at sublayer 1 the only candidate is e, so dw¹ = 0 and (without sep_v, where
// R⁰ = R¹ = e) dg_1 = 0, exactly. In Full DAR (K = 1) the partial is empty at every sublayer, so
// dτ ≡ 0 (§6.3, §6.7 invariant 3), even away from init.
TEST(DarModule, StructuralZeroGradients) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 4, 5, 2);
    h.randomize(31);
    h.step();
    for (int j = 0; j < 2; ++j)
      for (int c = 0; c < h.C; ++c) EXPECT_EQ(h.g(dar_param_name(1, "query" + std::to_string(j)))[c], 0.0) << describe(o);
    if (!o.sep_v) {
      for (int c = 0; c < h.C; ++c) EXPECT_EQ(h.g(dar_param_name(1, "mix"))[c], 0.0) << describe(o);
    }
    if (o.block_size == 1) {
      for (int l = 1; l <= h.S; ++l) EXPECT_EQ(h.g(dar_param_name(l, "transport"))[0], 0.0) << describe(o);
    }
  }
}

// §6.7 invariant 1: under uniform init (w = 0, g = 0, all b = 0) the two streams are identical and,
// for reciprocal, self_kv and cross_v, dg ≡ 0, dw⁰ = dw¹ and db⁰ = db¹ bitwise; under fixed_kv the
// targets read different sources and db⁰ ≠ db¹. Run on two threads too (the per-thread sums are
// formed identically for both streams).
TEST(DarInvariants, UniformInitKeepsStreamsIdentical) {
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (DarOptions o : all_variants()) {
      o.parity_init = false;
      Harness<double> h(o, 6, 8, 5);
      h.init(41);
      h.forward();
      for (int r = 0; r < h.dar.n_entries(); ++r)
        for (int i = 0; i < h.N * h.C; ++i) ASSERT_EQ(h.dar.entry(r, 0)[i], h.dar.entry(r, 1)[i]) << describe(o);
      for (int q = 1; q <= h.S + 1; ++q)
        for (int i = 0; i < h.N * h.C; ++i) ASSERT_EQ(h.dar.stream_read(q, 0)[i], h.dar.stream_read(q, 1)[i]) << describe(o);
      h.step();
      for (int r = 1; r < h.dar.n_entries(); ++r)
        for (int i = 0; i < h.N * h.C; ++i) {
          if (o.routing != DarRouting::FixedKV) { ASSERT_EQ(h.dar.entry_grad(r, 0)[i], h.dar.entry_grad(r, 1)[i]) << describe(o); }
        }
      bool db_differ = false;
      for (int l = 1; l <= h.S + 1; ++l) {
        const int name_l = l == h.S + 1 ? kDarFinal : l;
        const double *dg = h.g(dar_param_name(name_l, "mix")), *dw0 = h.g(dar_param_name(name_l, "query0")),
                     *dw1 = h.g(dar_param_name(name_l, "query1"));
        for (int c = 0; c < h.C; ++c) {
          EXPECT_EQ(dg[c], 0.0) << describe(o) << " l=" << l;
          if (o.routing != DarRouting::FixedKV) { EXPECT_EQ(dw0[c], dw1[c]) << describe(o) << " l=" << l; }
        }
        if (l > h.S) continue;
        const double *db0 = h.g(dar_param_name(l, "gate0")), *db1 = h.g(dar_param_name(l, "gate1"));
        for (int c = 0; c < h.C; ++c) {
          if (o.routing != DarRouting::FixedKV) { EXPECT_EQ(db0[c], db1[c]) << describe(o) << " l=" << l; }
          db_differ |= db0[c] != db1[c];
        }
      }
      if (o.routing == DarRouting::FixedKV) { EXPECT_TRUE(db_differ) << describe(o); }
      if (o.sep_v) {  // W⁰_V = W¹_V = I: their gradients are equal too
        const double *d0 = h.g(dar_param_name(kDarShared, "value0")), *d1 = h.g(dar_param_name(kDarShared, "value1"));
        if (o.routing != DarRouting::FixedKV) {
          for (int i = 0; i < h.C * h.C; ++i) EXPECT_EQ(d0[i], d1[i]) << describe(o);
        }
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

// §6.7 invariant 2: under parity init the streams differ after sublayer 1 (different gates) and
// dg ≠ 0 (over all reads: with K = S and no partial every sublayer reads only e, so only the read-out
// sees the difference). fixed_kv is the exception: both targets read keys from stream 0 and values from
// stream 1, so with equal queries (w = 0) and equal W_V, R⁰ = R¹ and dg = 0 there.
TEST(DarInvariants, ParityInitBreaksSymmetry) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 4, 6, 3);
    h.init(51);
    h.step();
    EXPECT_NE(h.dar.state(1, 0)[0], h.dar.state(1, 1)[0]) << describe(o);
    double dg = 0;
    for (int l = 1; l <= h.S + 1; ++l)
      for (int c = 0; c < h.C; ++c) dg = std::max(dg, std::abs(h.g(dar_param_name(l > h.S ? kDarFinal : l, "mix"))[c]));
    if (o.routing == DarRouting::FixedKV) {
      EXPECT_EQ(dg, 0.0) << describe(o);
    } else {
      EXPECT_GT(dg, 1e-6) << describe(o);
    }
  }
}

// §6.7 invariant 3: at init (w = 0, α = ½) every candidate of both streams gets the same gradient, so
// dτ_l = 0 exactly for every l and K, for the routings whose two targets read values from different
// streams symmetrically (reciprocal, self_kv, cross_v). fixed_kv reads all values from stream 1, so its
// streams' gradients differ and dτ ≠ 0 there (reported, not part of the invariant). After one
// perturbation of the queries (as after a first update) dτ becomes nonzero wherever a partial exists.
TEST(DarInvariants, TransportGradientIsZeroAtInit) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 6, 6, 3);
    h.init(61);
    h.step();
    double dtau = 0;
    for (int l = 1; l <= h.S; ++l) dtau = std::max(dtau, std::abs(h.g(dar_param_name(l, "transport"))[0]));
    if (o.routing != DarRouting::FixedKV) { EXPECT_EQ(dtau, 0.0) << describe(o); }
    if (o.block_size == 1) continue;
    // perturb the queries only
    Rng rng(62);
    for (int l = 1; l <= h.S; ++l)
      for (int j = 0; j < 2; ++j)
        for (int c = 0; c < h.C; ++c) h.p(dar_param_name(l, "query" + std::to_string(j)))[c] = 0.5 * rng.normal();
    std::fill(h.grads.begin(), h.grads.end(), 0.0);
    h.step();
    double after = 0;
    for (int l = 1; l <= h.S; ++l) after = std::max(after, std::abs(h.g(dar_param_name(l, "transport"))[0]));
    EXPECT_GT(after, 1e-9) << describe(o);
  }
}

// §6.7 invariant 4: P′⁰ + P′¹ = P⁰ + P¹ + (β⁰+β¹)∘o at every sublayer with a partial (ρ has unit column
// sums). Double: the two sides differ by rounding only (1e-14 of values ≲ 10).
TEST(DarInvariants, TransportConservesTheTotal) {
  OneThread one;
  DarOptions o;
  o.block_size = 3;
  Harness<double> h(o, 6, 6, 4);
  h.randomize(71);
  h.forward();
  int checked = 0;
  for (int l = 2; l <= h.S; ++l) {
    if ((l - 1) % o.block_size == 0) continue;  // block start: no partial, no transport
    const double *b0 = h.p(dar_param_name(l, "gate0")), *b1 = h.p(dar_param_name(l, "gate1"));
    double worst = 0;
    for (int i = 0; i < h.N; ++i)
      for (int c = 0; c < h.C; ++c) {
        const size_t k = (size_t)i * h.C + c;
        const double beta = 2 / (1 + std::exp(-b0[c])) + 2 / (1 + std::exp(-b1[c]));
        const double lhs = h.dar.state(l, 0)[k] + h.dar.state(l, 1)[k];
        const double rhs = h.dar.state(l - 1, 0)[k] + h.dar.state(l - 1, 1)[k] + beta * h.dar.branch(l)[k];
        worst = std::max(worst, std::abs(lhs - rhs));
      }
    EXPECT_LT(worst, 1e-13) << "l=" << l;
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// §6.7 invariant 5: self_kv with g = g_F = +40, τ = −40 and b⁰ = 0 is Block AttnRes (§4.2) on stream 0
// with w_l = w⁰_l, w_F = w⁰_F and the same K, whatever stream 1's parameters are. σ(40) = 1 and
// σ(−40) = 4e-18 in double: the difference is at rounding level (1e-13 here). Reciprocal routing with
// the same forcing does not reduce (the keys come from stream 1): a negative control.
TEST(DarInvariants, ReducesToBlockAttnRes) {
  OneThread one;
  for (int K : {1, 2, 3})
    for (DarRouting routing : {DarRouting::SelfKV, DarRouting::Reciprocal}) {
      DarOptions o;
      o.block_size = K;
      o.routing = routing;
      Harness<double> h(o, 6, 6, 3);
      h.randomize(81);
      for (int l = 1; l <= h.S + 1; ++l) {
        const int name_l = l == h.S + 1 ? kDarFinal : l;
        std::fill_n(h.p(dar_param_name(name_l, "mix")), h.C, 40.0);
        if (l > h.S) continue;
        h.p(dar_param_name(l, "transport"))[0] = -40.0;
        std::fill_n(h.p(dar_param_name(l, "gate0")), h.C, 0.0);
      }
      h.forward();
      // Block AttnRes, §4.2, literally.
      double worst = 0;
      auto depth = [&](const std::vector<std::vector<double>>& cand, const double* w) {
        const int C = h.C, n = (int)cand.size();
        std::vector<double> s(n), out(C, 0.0);
        double mx = -1e300, z = 0;
        for (int r = 0; r < n; ++r) {
          double ms = 0, dot = 0;
          for (double v : cand[r]) ms += v * v;
          const double rho = std::sqrt(ms / C + 1e-6);
          for (int c = 0; c < C; ++c) dot += w[c] * cand[r][c] / rho;
          s[r] = dot;
          mx = std::max(mx, dot);
        }
        for (int r = 0; r < n; ++r) z += std::exp(s[r] - mx);
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < C; ++c) out[c] += std::exp(s[r] - mx) / z * cand[r][c];
        return out;
      };
      for (int i = 0; i < h.N; ++i) {
        std::vector<std::vector<double>> completed = {std::vector<double>(h.p("fake.e") + i * h.C, h.p("fake.e") + (i + 1) * h.C)};
        std::vector<double> partial;
        for (int l = 1; l <= h.S; ++l) {
          auto cand = completed;
          if (!partial.empty()) cand.push_back(partial);
          const auto x = depth(cand, h.p(dar_param_name(l, "query0")));
          const double* M = h.p("fake." + std::to_string(l));
          std::vector<double> o_l(h.C);
          for (int c = 0; c < h.C; ++c) {
            double z = 0;
            for (int k = 0; k < h.C; ++k) z += x[k] * M[k * h.C + c];
            o_l[c] = std::tanh(z);
          }
          if (partial.empty()) partial = o_l;
          else for (int c = 0; c < h.C; ++c) partial[c] += o_l[c];
          if (l % K == 0 || l == h.S) { completed.push_back(partial); partial.clear(); }
        }
        const auto xf = depth(completed, h.p(dar_param_name(kDarFinal, "query0")));
        for (int c = 0; c < h.C; ++c) worst = std::max(worst, std::abs(xf[c] - h.dar.final_input()[i * h.C + c]));
      }
      if (routing == DarRouting::SelfKV) { EXPECT_LT(worst, 1e-13) << "K=" << K; }
      else EXPECT_GT(worst, 1e-3) << "K=" << K;
    }
}

// §6.7 invariant 6: exchanging the stream-0 and stream-1 parameters (w, b, W_V) and negating every g
// leaves the loss unchanged for reciprocal, self_kv and cross_v (the same sums in another order:
// 1e-14), but not for fixed_kv (its key and value streams are fixed).
TEST(DarInvariants, SwapEquivariance) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 4, 6, 3);
    h.randomize(91);
    const double before = h.forward();
    auto swap = [&](const std::string& a, const std::string& b) {
      std::swap_ranges(h.p(a), h.p(a) + h.spec(a).numel, h.p(b));
    };
    for (int l = 1; l <= h.S + 1; ++l) {
      const int name_l = l == h.S + 1 ? kDarFinal : l;
      swap(dar_param_name(name_l, "query0"), dar_param_name(name_l, "query1"));
      for (int c = 0; c < h.C; ++c) h.p(dar_param_name(name_l, "mix"))[c] *= -1;
      if (l <= h.S) swap(dar_param_name(l, "gate0"), dar_param_name(l, "gate1"));
    }
    if (o.sep_v) swap(dar_param_name(kDarShared, "value0"), dar_param_name(kDarShared, "value1"));
    const double after = h.forward();
    if (o.routing == DarRouting::FixedKV) { EXPECT_GT(std::abs(after - before), 1e-6) << describe(o); }
    else EXPECT_LT(std::abs(after - before), 1e-13 * std::max(1.0, std::abs(before))) << describe(o);
  }
}

// §6.7 invariant 7 at the module level: zero queries give depth weights of exactly 1/N at every read
// (N = the number of candidates there, which the module counts per §6.2).
TEST(DarInvariants, ZeroQueriesGiveUniformWeights) {
  OneThread one;
  for (const DarOptions& o : all_variants()) {
    Harness<double> h(o, 5, 4, 2);
    h.init(101);
    h.forward();
    for (int q = 1; q <= h.S + 1; ++q) {
      const int n = h.dar.num_candidates(q);
      const int m = q == h.S + 1 ? h.dar.n_entries() : 1 + (q - 1) / o.block_size;
      EXPECT_EQ(n, m + ((q <= h.S && (q - 1) % o.block_size != 0 && o.include_partial) ? 1 : 0)) << describe(o);
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < h.N * n; ++i) ASSERT_EQ(h.dar.depth_weights(q, j)[i], 1.0 / n) << describe(o) << " q=" << q;
    }
  }
}

// Float on one thread against double on all of them, from the same (float-representable) parameters
// and output gradient, so that the difference is the float run's own rounding. Its bound is the
// worst-case one for sums: n roundings of relative size u_f = 2^-24 give at most γ_n ≈ n·u_f relative
// to the terms' magnitude (which max_rel_diff floors at 1). x_F: sums of C = 64 terms through 8
// sublayers, n = 512, 3.1e-5. Gradients: sums over N·C = 2368 products per entry, chained through
// 8 sublayers, n = 18944, 1.1e-3 (dτ cancels between the streams, so the typical √n growth, ~1e-5,
// was exceeded on some CPUs: 1.07e-4 on an AMD Zen 3). A structural error gives O(1). The inference
// plan (per-read buffers shared) gives the same x_F as the training plan, bitwise.
TEST(DarModule, FloatMatchesDoubleAndInferencePlanMatchesTraining) {
  for (DarOptions o : all_variants()) {
    if (o.block_size == 4) continue;
    Harness<double> hd(o, 8, 64, 37);
    hd.randomize(111);
    for (double& x : hd.params) x = double(float(x));
    for (double& x : hd.G) x = double(float(x));
    std::vector<float> pf(hd.params.begin(), hd.params.end());
    Harness<float> hf(o, 8, 64, 37), hi(o, 8, 64, 37, false);
    hf.params = pf;
    hi.params = pf;
    hf.dar.bind(hf.reg, hf.params.data(), hf.grads.data());
    hi.dar.bind(hi.reg, hi.params.data(), hi.grads.data());
    hf.G.assign(hd.G.begin(), hd.G.end());
    hd.step();
    {
      OneThread one;  // the double run above used every thread; mix the schedules
      hf.step();
      hi.forward();
    }
    std::vector<double> xd(hd.dar.final_input(), hd.dar.final_input() + 37 * 64);
    std::vector<float> xf(hf.dar.final_input(), hf.dar.final_input() + 37 * 64),
        xi(hi.dar.final_input(), hi.dar.final_input() + 37 * 64);
    constexpr double u_f = 0x1p-24;
    EXPECT_LT(test::max_rel_diff(xf, xd), 64 * 8 * u_f) << describe(o);
    EXPECT_EQ(xi, xf) << describe(o);
    for (const auto& sp : hd.reg.specs()) {
      const std::vector<double> gd(hd.grads.begin() + sp.offset, hd.grads.begin() + sp.offset + sp.numel);
      const std::vector<float> gf(hf.grads.begin() + sp.offset, hf.grads.begin() + sp.offset + sp.numel);
      EXPECT_LT(test::max_rel_diff(gf, gd), 37 * 64 * 8 * u_f) << describe(o) << " " << sp.name;
    }
  }
}

// =============================================================================================
// Part 2: the whole model.
namespace {

const char* kModel = "model.n_layer = 2\nmodel.d_model = 16\nmodel.n_head = 4\nmodel.seq_len = 8\nmodel.vocab_size = 23\n";

Config tiny(const std::string& extra) { return resolve_config(parse_config_text(kModel + extra, "test")); }

std::string error_of(const std::string& extra) {
  try {
    tiny(extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using test::random_tokens;

// Away from the init: DAR tensors by 0.5 (depth weights, mixes and gates then vary by token), the
// transport logits to −1 ± 0.5 (t ≈ 0.13: the transport matters), the rest by 0.1.
template <class T>
void randomize(GPT<T>& m, uint64_t seed) {
  m.init_weights(seed);
  Rng r(seed + 1);
  for (const auto& s : m.registry().specs()) {
    const bool dar = s.name.rfind("residual.", 0) == 0, tau = s.name.find("transport") != std::string::npos;
    for (size_t i = 0; i < s.numel; ++i) {
      T& x = m.params()[s.offset + i];
      x = tau ? T(-1 + 0.5 * r.normal()) : x + T((dar ? 0.5 : 0.1) * r.normal());
    }
  }
}

// One training micro-step on fixed tokens; gradients of the mean loss.
template <class T>
double grad_step(GPT<T>& m, int B, int Tn, uint64_t seed) {
  m.plan(B, Tn);
  auto in = random_tokens(B * Tn, m.config().model.vocab_size, seed), tgt = random_tokens(B * Tn, m.config().model.vocab_size, seed + 1);
  const int valid = m.count_valid(tgt.data(), tgt.size());
  m.zero_grad();
  return m.train_micro_step(in.data(), tgt.data(), T(1.0 / valid)) / valid;
}

std::vector<std::string> routings() { return {"reciprocal", "self_kv", "cross_v", "fixed_kv"}; }

}  // namespace

TEST(DarConfig, KeysDefaultsAndValidation) {
  const Config c = tiny("residual.kind = dar\n");
  EXPECT_EQ(c.residual.block_size, 2);  // §6.6: one block per layer
  EXPECT_EQ(c.dar.routing, "reciprocal");
  EXPECT_FALSE(c.dar.sep_v);
  EXPECT_TRUE(c.dar.include_partial);
  EXPECT_EQ(c.dar.init, "parity");
  EXPECT_EQ(c.dar.tau_init, -6.0);
  EXPECT_EQ(c.dar.other_b_init, -2.0);
  // §7.2: dar.* with another residual kind is an error naming the key
  for (const char* key : {"dar.routing = self_kv", "dar.sep_v = true", "dar.include_partial = false", "dar.init = uniform",
                          "dar.tau_init = -3", "dar.other_b_init = -1"}) {
    const std::string err = error_of(std::string("residual.kind = attnres\n") + key + "\n");
    EXPECT_NE(err.find(std::string(key).substr(0, std::string(key).find(' '))), std::string::npos) << err;
    EXPECT_NE(err.find("residual.kind is not dar"), std::string::npos) << err;
    EXPECT_NE(error_of(std::string(key) + "\n"), "") << key;  // the default kind is standard
  }
  EXPECT_NE(error_of("residual.kind = dar\ndar.routing = sideways\n").find("dar.routing"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = dar\ndar.sep_v = 2\n").find("dar.sep_v"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = dar\ndar.init = random\n").find("dar.init"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = dar\nresidual.block_size = 0\n").find("residual.block_size"), std::string::npos);
  EXPECT_NE(error_of("residual.kind = dar\nresidual.streams = 2\n").find("residual.streams"), std::string::npos);
}

// Every key round-trips through the checkpoint's JSON (to_json, from_json), defaults and set values.
TEST(DarConfig, JsonRoundTrip) {
  for (const char* extra : {"residual.kind = dar\n",
                            "residual.kind = dar\nresidual.block_size = 3\ndar.routing = cross_v\ndar.sep_v = true\n"
                            "dar.include_partial = false\ndar.init = uniform\ndar.tau_init = -2.5\ndar.other_b_init = -0.75\n"}) {
    const Config c = tiny(extra);
    const nlohmann::json j = c.to_json();
    for (const char* key : {"residual.block_size", "dar.routing", "dar.sep_v", "dar.include_partial", "dar.init", "dar.tau_init",
                            "dar.other_b_init"})
      EXPECT_TRUE(j.contains(key)) << key;
    const Config back = Config::from_json(j, "test");
    EXPECT_EQ(back.to_json(), j);
  }
  EXPECT_FALSE(tiny("residual.kind = attnres\n").to_json().contains("dar.routing"));
}

// §6.3 init and parameter count: (5d+1)·2L + 3d, plus 2d² with sep_v; nothing decayed.
TEST(DarModel, ParametersAndInit) {
  for (bool sep_v : {false, true}) {
    const Config cfg = tiny(std::string("residual.kind = dar\n") + (sep_v ? "dar.sep_v = true\n" : ""));
    GPT<double> m(cfg);
    m.init_weights(1);
    const int d = 16, L = 2;
    size_t n = 0;
    for (const auto& s : m.registry().specs())
      if (s.name.rfind("residual.", 0) == 0) {
        n += s.numel;
        EXPECT_FALSE(s.decay) << s.name;
      }
    EXPECT_EQ(n, (size_t)(5 * d + 1) * 2 * L + 3 * d + (sep_v ? 2 * d * d : 0));
    EXPECT_EQ(m.param(dar_param_name(1, "transport"))[0], -6.0);
    EXPECT_EQ(m.param(dar_param_name(1, "gate0"))[3], 0.0);   // attention: home stream 0
    EXPECT_EQ(m.param(dar_param_name(1, "gate1"))[3], -2.0);
    EXPECT_EQ(m.param(dar_param_name(2, "gate0"))[3], -2.0);  // MLP: home stream 1
    EXPECT_EQ(m.param(dar_param_name(2, "gate1"))[3], 0.0);
    EXPECT_EQ(m.param(dar_param_name(kDarFinal, "query1"))[3], 0.0);
    if (sep_v) {
      EXPECT_EQ(m.param(dar_param_name(kDarShared, "value1"))[17], 1.0);  // (1,1) of the identity
      EXPECT_EQ(m.param(dar_param_name(kDarShared, "value1"))[16], 0.0);
    }
  }
}

// Whole-model float64 finite differences (test_model.cpp's pattern) of every DAR tensor and of the
// embedding E (its gradient sums the head's and the residual's d e), K = 1 and K = 2, every routing,
// sep_v on; up to 24 entries per tensor. The finite difference's truncation and rounding are bounded
// per entry (tests/check.h); beyond that, 1e-6 of max(gradient scale, 1e-4). Structural zeros (the
// queries at sublayer 1, whose only candidate is e) must be exactly zero.
void check_model_gradients(const std::string& extra) {
  OneThread one;
  const Config cfg = tiny(extra);
  GPT<double> m(cfg);
  randomize(m, 3);
  const int B = 2, T = 5;
  m.plan(B, T);
  auto in = random_tokens(B * T, cfg.model.vocab_size, 5), tgt = random_tokens(B * T, cfg.model.vocab_size, 6);
  tgt[3] = -1;
  const int valid = m.count_valid(tgt.data(), tgt.size());
  m.zero_grad();
  m.train_micro_step(in.data(), tgt.data(), 1.0 / valid);
  Rng pick(17);
  int checked = 0;
  for (const auto& s : m.registry().specs()) {
    if (s.name.rfind("residual.", 0) != 0 && s.name != "wte") continue;
    const test::FdSample fd = test::fd_sample(m, s, pick, [&] { return m.eval_loss(in.data(), tgt.data()) / valid; });
    const auto& analytic = fd.analytic;
    const auto& numeric = fd.numeric;
    ++checked;
    if (s.name == dar_param_name(1, "query0") || s.name == dar_param_name(1, "query1")) {
      for (double a : analytic) EXPECT_EQ(a, 0.0) << extra << " " << s.name;
      continue;
    }
    test::expect_grad_close(analytic, numeric, 1e-6, extra + " " + s.name, 1e-4);
  }
  EXPECT_EQ(checked, 1 + 6 * 4 + 3 + (cfg.dar.sep_v ? 2 : 0)) << extra;
}

TEST(DarGrad, FullEveryRoutingSepV) {
  for (const auto& r : routings()) check_model_gradients("residual.kind = dar\nresidual.block_size = 1\ndar.sep_v = true\ndar.routing = " + r + "\n");
}
TEST(DarGrad, BlockEveryRoutingSepV) {
  for (const auto& r : routings()) check_model_gradients("residual.kind = dar\ndar.sep_v = true\ndar.routing = " + r + "\n");
}
TEST(DarGrad, BlockVariants) {
  check_model_gradients("residual.kind = dar\nresidual.block_size = 3\ndar.include_partial = false\nmodel.norm = rmsnorm\nmodel.mlp = swiglu\n");
  check_model_gradients("residual.kind = dar\nresidual.block_size = 4\nattn.pos = learned\n");
  // DAR wraps the unchanged sublayers, whatever is inside them (§7.1): XSA and GOAT
  check_model_gradients("residual.kind = dar\ndar.routing = cross_v\nattn.xsa = gated\n");
  check_model_gradients("residual.kind = dar\nattn.pos = goat\nattn.goat.pos_rank = 1\nmodel.n_head = 2\nattn.xsa = on\n");
}

// §6.7 invariant 1 in the model: uniform init keeps the streams identical, so dg ≡ 0, dw⁰ = dw¹ and
// db⁰ = db¹ bitwise (reciprocal, self_kv, cross_v; K = 1, 2, 3, with and without sep_v), on the
// machine's threads; fixed_kv's targets read different sources: db⁰ ≠ db¹.
// §6.7 invariant 2: parity init gives dg ≠ 0 (except fixed_kv, whose targets read the same streams).
// §6.7 invariant 3: dτ = 0 at init for every K (parity and uniform; not fixed_kv).
TEST(DarModel, InitInvariants) {
  for (const auto& routing : routings())
    for (int K : {1, 2, 3})
      for (const char* init : {"uniform", "parity"})
        for (bool sep_v : {false, true}) {
          const std::string extra = "residual.kind = dar\ndar.routing = " + routing + "\nresidual.block_size = " + std::to_string(K) +
                                    "\ndar.init = " + init + (sep_v ? "\ndar.sep_v = true\n" : "\n");
          GPT<double> m(tiny(extra));
          m.init_weights(5);
          grad_step(m, 2, 8, 3);
          const bool fixed = routing == "fixed_kv", uniform = std::string(init) == "uniform";
          double dg = 0, dtau = 0;
          bool db_differ = false;
          for (int l = 1; l <= 5; ++l) {
            const int q = l == 5 ? kDarFinal : l;
            for (int c = 0; c < 16; ++c) {
              dg = std::max(dg, std::abs(m.grad(dar_param_name(q, "mix"))[c]));
              if (uniform && !fixed) {
                EXPECT_EQ(m.grad(dar_param_name(q, "query0"))[c], m.grad(dar_param_name(q, "query1"))[c]) << extra << " l=" << l;
              }
              if (l == 5) continue;
              const double db0 = m.grad(dar_param_name(l, "gate0"))[c], db1 = m.grad(dar_param_name(l, "gate1"))[c];
              if (uniform && !fixed) { EXPECT_EQ(db0, db1) << extra << " l=" << l; }
              db_differ |= db0 != db1;
            }
            if (l < 5) dtau = std::max(dtau, std::abs(m.grad(dar_param_name(l, "transport"))[0]));
          }
          if (uniform) {
            EXPECT_EQ(dg, 0.0) << extra;
            if (fixed) { EXPECT_TRUE(db_differ) << extra; }
          } else if (!fixed) {
            EXPECT_GT(dg, 1e-8) << extra;
          }
          if (!fixed) { EXPECT_EQ(dtau, 0.0) << extra; }
        }
}

// §6.7 invariant 5 against the AttnRes kind (§4): DAR with self_kv, g = g_F = +40, τ = −40, b⁰ = 0 and
// w⁰ = AttnRes's queries is Block AttnRes with the same K, whatever stream 1 holds. Same transformer
// weights; the loss differs at rounding level (σ(−40) = 4e-18 in double): 1e-13. Reciprocal routing
// under the same forcing does not reduce (a negative control, > 1e-4).
TEST(DarModel, ReducesToTheAttnResKind) {
  OneThread one;
  for (int K : {1, 2, 3})
    for (const char* routing : {"self_kv", "reciprocal"}) {
      const std::string k = "residual.block_size = " + std::to_string(K) + "\n";
      GPT<double> dar(tiny("residual.kind = dar\ndar.routing = " + std::string(routing) + "\n" + k));
      GPT<double> attnres(tiny("residual.kind = attnres\n" + k));
      randomize(dar, 9);
      attnres.init_weights(1);
      for (const auto& s : attnres.registry().specs()) {
        const bool query = s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, ".query") == 0;
        const std::string from = query ? s.name + "0" : s.name;  // w_l = w⁰_l, w_F = w⁰_F
        std::copy_n(dar.param(from), s.numel, attnres.params() + s.offset);
      }
      for (int l = 1; l <= 5; ++l) {
        const int q = l == 5 ? kDarFinal : l;
        std::fill_n(dar.param(dar_param_name(q, "mix")), 16, 40.0);
        if (l == 5) continue;
        dar.param(dar_param_name(l, "transport"))[0] = -40.0;
        std::fill_n(dar.param(dar_param_name(l, "gate0")), 16, 0.0);
      }
      dar.plan(2, 8);
      attnres.plan(2, 8);
      auto in = random_tokens(16, 23, 4), tgt = random_tokens(16, 23, 5);
      const double a = dar.eval_loss(in.data(), tgt.data()), b = attnres.eval_loss(in.data(), tgt.data());
      if (std::string(routing) == "self_kv") {
        EXPECT_LT(std::abs(a - b), 1e-13 * std::abs(b)) << "K=" << K;
      } else {
        EXPECT_GT(std::abs(a - b), 1e-4 * std::abs(b)) << "K=" << K;
      }
    }
}

// §6.7 invariant 6: swapping the streams' parameters (w, b, W_V) and negating every g leaves the loss
// unchanged (reciprocal, self_kv, cross_v; rounding, 1e-13 relative), not for fixed_kv.
TEST(DarModel, SwapEquivariance) {
  OneThread one;
  for (const auto& routing : routings()) {
    GPT<double> m(tiny("residual.kind = dar\ndar.sep_v = true\ndar.routing = " + routing + "\n"));
    randomize(m, 13);
    m.plan(2, 8);
    auto in = random_tokens(16, 23, 4), tgt = random_tokens(16, 23, 5);
    const double before = m.eval_loss(in.data(), tgt.data());
    auto swap = [&](const std::string& a, const std::string& b) {
      std::swap_ranges(m.param(a), m.param(a) + m.registry().find(a)->numel, m.param(b));
    };
    for (int l = 1; l <= 5; ++l) {
      const int q = l == 5 ? kDarFinal : l;
      swap(dar_param_name(q, "query0"), dar_param_name(q, "query1"));
      for (int c = 0; c < 16; ++c) m.param(dar_param_name(q, "mix"))[c] *= -1;
      if (l < 5) swap(dar_param_name(l, "gate0"), dar_param_name(l, "gate1"));
    }
    swap(dar_param_name(kDarShared, "value0"), dar_param_name(kDarShared, "value1"));
    const double after = m.eval_loss(in.data(), tgt.data());
    if (routing == "fixed_kv") {
      EXPECT_GT(std::abs(after - before), 1e-6 * before);
    } else {
      EXPECT_LT(std::abs(after - before), 1e-13 * before) << routing;
    }
  }
}

// KV-cached == uncached logits (depth mixing never crosses positions, §7.1), chunks of 3, 1, 4.
TEST(DarModel, CachedLogitsEqualUncached) {
  for (const char* extra : {"residual.kind = dar\n", "residual.kind = dar\nresidual.block_size = 1\ndar.sep_v = true\n",
                            "residual.kind = dar\nresidual.block_size = 3\ndar.routing = fixed_kv\ndar.include_partial = false\n",
                            "residual.kind = dar\nattn.pos = goat\nattn.goat.pos_rank = 1\nmodel.n_head = 2\nattn.xsa = on\n"}) {
    GPT<float> m(tiny(extra));
    randomize(m, 7);
    EXPECT_LT(test::cached_vs_uncached_rel_diff(m), 1e-5) << extra;
  }
}

// §6.5 memory. The planned bytes equal memory_per_token() (the accounting `attnlab info` prints), and
// Full DAR at L = 12, d = 768 fits the §6.5 estimate: its histories are about 150 KB per token
// (2(1 + 24)·768·4 = 153600 bytes); ours keep e once for both streams, (1 + 2·24)·768·4 = 150528.
TEST(DarModel, MemoryFitsTheEstimate) {
  for (int K : {1, 2, 3})
    for (bool sep_v : {false, true})
      for (bool training : {false, true}) {
        DarOptions o;
        o.block_size = K;
        o.sep_v = sep_v;
        const int S = 24, C = 768;
        auto planned = [&](int rows) {
          Dar<float> dar(o, S, C);
          Arena arena;
          for (int pass = 0; pass < 2; ++pass) {
            dar.plan(arena, rows, training);
            if (pass == 0) arena.commit();
          }
          return (double)arena.planned();
        };
        const DarMemory ours = Dar<float>(o, S, C).memory_per_token(training), est = dar_memory_estimate(o, S, C);
        const double per_token = ours.forward() + ours.inputs_outputs + ours.backward;
        // 64 more rows cost exactly 64 tokens' floats, up to the 64-byte rounding of each of the
        // ≲ 400 buffers (25 KB of ~10 MB); the per-parameter coefficients and the thread scratch cancel.
        const double extra = planned(128) - planned(64);
        EXPECT_NEAR(extra, per_token * 64 * 4, 0.005 * extra) << "K=" << K << " training=" << training;
        if (!training) continue;
        EXPECT_LE(ours.histories, est.histories) << "K=" << K;
        EXPECT_GE(ours.histories, est.histories - 2 * C) << "K=" << K;  // at most e counted twice
        EXPECT_LE(ours.reads, est.reads + 2 * S + 1) << "K=" << K;     // + the entries' 1/ρ, kept once each
        EXPECT_GE(ours.reads, est.reads) << "K=" << K;
        if (K == 1) {
          EXPECT_EQ(est.histories * 4, 153600);
          EXPECT_EQ(ours.histories * 4, 150528);
        }
      }
}

// Checkpoints: exact resume gives bit-identical losses (tests/test_train.cpp's pattern).
TEST(DarModel, ExactResumeIsBitIdentical) {
  test::expect_exact_resume("dar", {"residual.kind = dar\n", "residual.kind = dar\nresidual.block_size = 1\ndar.sep_v = true\ndar.routing = cross_v\n"});
}
