// Tests of GOAT's packing into the fused attention kernel (src/kernels/goat.h) against
// docs/mechanisms.md §3 and its invariants (§3.8):
// - explicit prior: with q_c = 0 the packed logits equal Π computed independently in double from
//   the §3.4 formula (a direct loop here, not the kernel's code path), plus the row constant
//   softplus(ρ)·t_i of the key form (trick − explicit = row constant);
// - ALiBi equivalence (A = B = 0, W1 = w2 = 0, b = 0, q_c = 0 ⇒ ALiBi with slopes softplus(ρ));
// - uniform init equals plain content attention with scale 1/sqrt(D_c);
// - dA, dB: the lane formula equals Σ dℓ·cos/sin(ω Δ) from explicitly computed dℓ;
// - finite differences in double through pack → attention → loss for q_c, k_c, v and every GOAT
//   parameter, with and without a sink (which moves with softplus(ρ)·t_i), with GQA, with the key
//   lane off, and over a KV-cache chunk offset; db2 ≡ 0 without a sink.
#include "kernels/goat.h"

#include <cmath>
#include <vector>

#include "check.h"
#include "kernels/attention.h"

namespace {

using namespace attnlab::kernels;
using attnlab::test::max_abs_diff;
using attnlab::test::random_vec;

// Parameters of one GOAT layer, owned, with random (non-trivial) values.
template <class T>
struct Layer {
  GoatShape g;
  std::vector<T> A, B, W1, b1, w2, b2, gain, bump, rho;
  Layer(const GoatShape& shape, uint64_t seed) : g(shape) {
    A = random_vec<T>(g.Hkv * g.R, seed);
    B = random_vec<T>(g.Hkv * g.R, seed + 1);
    W1 = random_vec<T>(kGoatHidden * g.features(), seed + 2);
    for (auto& x : W1) x *= T(0.5);
    b1 = random_vec<T>(kGoatHidden, seed + 3);
    w2 = random_vec<T>(kGoatHidden, seed + 4);
    b2 = random_vec<T>(1, seed + 5);
    gain = random_vec<T>(g.Hkv, seed + 6);
    bump = random_vec<T>(g.Hkv, seed + 7);
    rho = random_vec<T>(g.Hkv, seed + 8);
    for (auto& x : rho) x = x - T(2);  // softplus ≈ 0.05 .. 0.3: a recency of a few units per row
  }
  GoatParams<T> params() const {
    return {A.data(), B.data(), W1.data(), b1.data(), w2.data(), b2.data(), gain.data(), bump.data(), rho.data()};
  }
};

template <class T>
GoatTables<T> tables(const GoatShape& g, int max_pos, double tau = 64) {
  return make_goat_tables<T>(max_pos, g.R, g.M, 10000.0, 10000.0, tau);
}

// Π^κ_ij of §3.4 in double, written directly from the formula (its own φ, ω and SiLU).
double explicit_prior(const Layer<double>& L, int kv, int ti, int tj, double tau) {
  const GoatShape& g = L.g;
  double pi = 0;
  for (int r = 0; r < g.R; ++r) {
    const double w = std::pow(10000.0, -double(r) / std::max(g.R - 1, 1)), d = ti - tj;
    pi += L.A[kv * g.R + r] * std::cos(w * d) + L.B[kv * g.R + r] * std::sin(w * d);
  }
  if (!g.key_bias) return pi;
  std::vector<double> phi;
  for (int m = 0; m < g.M; ++m) phi.push_back(std::cos(std::pow(10000.0, -double(m) / std::max(g.M - 1, 1)) * tj));
  for (int m = 0; m < g.M; ++m) phi.push_back(std::sin(std::pow(10000.0, -double(m) / std::max(g.M - 1, 1)) * tj));
  phi.push_back(tj / tau);
  phi.push_back(std::log1p(double(tj)) / std::log1p(tau));
  double u = L.b2[0];
  for (int k = 0; k < kGoatHidden; ++k) {
    double a = L.b1[k];
    for (size_t f = 0; f < phi.size(); ++f) a += L.W1[k * phi.size() + f] * phi[f];
    u += L.w2[k] * a / (1 + std::exp(-a));
  }
  const double sp = std::log1p(std::exp(L.rho[kv]));
  return pi + L.gain[kv] * u + (tj == 0 ? L.bump[kv] : 0.0) - sp * (ti - tj);
}

TEST(Goat, PackedLogitsEqualExplicitPriorPlusRowConstant) {
  for (bool key_bias : {true, false}) {
    const GoatShape g{4, 2, 16, 3, 2, key_bias};
    Layer<double> L(g, 11);
    const int B = 1, Tq = 9, off = 5, Tmax = 40;
    const auto tab = tables<double>(g, Tmax);
    std::vector<double> qkvc = random_vec<double>(size_t(B) * Tq * g.compact_dim(), 3);
    for (int t = 0; t < Tq; ++t)  // q_c = 0
      for (int d = 0; d < g.H * g.Dc(); ++d) qkvc[size_t(t) * g.compact_dim() + d] = 0;
    std::vector<double> packed(size_t(B) * Tq * g.packed_dim()), slope(g.H), u(Tq);
    goat_pack_forward(packed.data(), slope.data(), u.data(), qkvc.data(), L.params(), tab, g, B, Tq, off);
    double worst = 0, scale = 0, worst_const = 0;
    for (int h = 0; h < g.H; ++h)
      for (int i = 0; i < Tq; ++i)
        for (int j = 0; j <= i; ++j) {  // keys of the same chunk (positions off+j)
          const int kv = h / (g.H / g.Hkv);
          const double* q = &packed[size_t(i) * g.packed_dim() + h * g.Dh];
          const double* k = &packed[size_t(j) * g.packed_dim() + (g.H + kv) * g.Dh];
          double logit = 0;
          for (int d = 0; d < g.Dh; ++d) logit += q[d] * k[d];
          const double pi = explicit_prior(L, kv, off + i, off + j, 64);
          const double row_const = key_bias ? std::log1p(std::exp(L.rho[kv])) * (off + i) : 0.0;
          worst = std::max(worst, std::abs(logit - row_const - pi));
          worst_const = std::max(worst_const, std::abs(slope[h] - (key_bias ? row_const / (off + i) : 0.0)));
          scale = std::max(scale, std::abs(pi));
        }
    EXPECT_LT(worst, 1e-12 * std::max(1.0, scale)) << "key_bias=" << key_bias;
    EXPECT_LT(worst_const, 1e-15);
  }
}

TEST(Goat, PriorInFloatMatchesDoubleFormula) {
  // §3.8's fp32 bar: packed float logits vs Π in double within 1e-5·max|Π| (T up to 300).
  const GoatShape g{2, 1, 32, 4, 4, true};
  Layer<float> Lf(g, 21);
  Layer<double> L(g, 21);  // the float draws, widened: the reference sees the same parameters
  auto widen = [](std::vector<double>& d, const std::vector<float>& f) { d.assign(f.begin(), f.end()); };
  widen(L.A, Lf.A), widen(L.B, Lf.B), widen(L.W1, Lf.W1), widen(L.b1, Lf.b1), widen(L.w2, Lf.w2), widen(L.b2, Lf.b2);
  widen(L.gain, Lf.gain), widen(L.bump, Lf.bump), widen(L.rho, Lf.rho);
  const int Tq = 300;
  const auto tab = tables<float>(g, Tq, 256);
  std::vector<float> qkvc(size_t(Tq) * g.compact_dim(), 0.f), packed(size_t(Tq) * g.packed_dim()), slope(g.H), u(Tq);
  goat_pack_forward(packed.data(), slope.data(), u.data(), qkvc.data(), Lf.params(), tab, g, 1, Tq, 0);
  double worst = 0, scale = 0;
  for (int i = 0; i < Tq; i += 7)
    for (int j = 0; j <= i; ++j) {
      double logit = 0;
      for (int d = 0; d < g.Dh; ++d)
        logit += double(packed[size_t(i) * g.packed_dim() + d]) * packed[size_t(j) * g.packed_dim() + g.H * g.Dh + d];
      const double pi = explicit_prior(L, 0, i, j, 256) + std::log1p(std::exp(L.rho[0])) * i;  // + the row constant
      worst = std::max(worst, std::abs(logit - pi));
      scale = std::max(scale, std::abs(pi));
    }
  EXPECT_LT(worst, 1e-5 * scale);
}

// Attention over a packed GOAT layer (scale 1, sink slope from the pack), forward only.
template <class T>
std::vector<T> goat_attention(const Layer<T>& L, const std::vector<T>& qkvc, const std::vector<T>* sink, int B, int T_,
                              const GoatTables<T>& tab) {
  const GoatShape& g = L.g;
  std::vector<T> packed(size_t(B) * T_ * g.packed_dim()), slope(g.H), u(T_), out(size_t(B) * T_ * g.H * g.Dh),
      lse(size_t(B) * g.H * T_);
  goat_pack_forward(packed.data(), slope.data(), u.data(), qkvc.data(), L.params(), tab, g, B, T_, 0);
  const auto s = packed_attention_shape(B, T_, g.H, g.Hkv, g.Dh);
  AttentionExtras<T> x;
  if (sink) x.sink_slope = slope.data();
  attention_forward(out.data(), lse.data(), packed.data(), packed.data() + g.H * g.Dh, packed.data() + (g.H + g.Hkv) * g.Dh,
                    sink ? sink->data() : nullptr, T(1), s, x);
  return out;
}

TEST(Goat, AlibiEquivalence) {
  // A = B = 0, W1 = w2 = 0 (u = b2, a row constant), b = 0, q_c = 0: probabilities are ALiBi's with
  // slopes softplus(ρ) (§3.8), so the outputs agree.
  const GoatShape g{4, 2, 16, 3, 2, true};
  Layer<double> L(g, 31);
  std::fill(L.A.begin(), L.A.end(), 0.0);
  std::fill(L.B.begin(), L.B.end(), 0.0);
  std::fill(L.W1.begin(), L.W1.end(), 0.0);
  std::fill(L.w2.begin(), L.w2.end(), 0.0);
  std::fill(L.bump.begin(), L.bump.end(), 0.0);
  const int B = 2, T_ = 37;
  const auto tab = tables<double>(g, T_);
  auto qkvc = random_vec<double>(size_t(B) * T_ * g.compact_dim(), 4);
  for (long row = 0; row < long(B) * T_; ++row)
    for (int d = 0; d < g.H * g.Dc(); ++d) qkvc[row * g.compact_dim() + d] = 0;
  const auto goat = goat_attention<double>(L, qkvc, nullptr, B, T_, tab);
  // ALiBi reference: zero q, the same values, slopes softplus(ρ_κ(h)).
  const int stride = (g.H + 2 * g.Hkv) * g.Dh;
  std::vector<double> qkv(size_t(B) * T_ * stride, 0.0), slopes(g.H), out(goat.size()), lse(size_t(B) * g.H * T_);
  for (long row = 0; row < long(B) * T_; ++row)
    for (int d = 0; d < g.Hkv * g.Dh; ++d)
      qkv[row * stride + (g.H + g.Hkv) * g.Dh + d] = qkvc[row * g.compact_dim() + (g.H + g.Hkv) * g.Dc() + d];
  for (int h = 0; h < g.H; ++h) slopes[h] = std::log1p(std::exp(L.rho[h / 2]));
  attention_forward_naive(out.data(), lse.data(), qkv.data(), qkv.data() + g.H * g.Dh, qkv.data() + (g.H + g.Hkv) * g.Dh,
                          (const double*)nullptr, 1.0, packed_attention_shape(B, T_, g.H, g.Hkv, g.Dh),
                          {.alibi_slopes = slopes.data()});
  EXPECT_LT(max_abs_diff(goat, out), 1e-13);
}

TEST(Goat, UniformInitEqualsContentAttention) {
  // §3.6 uniform: A = B = 0, w2 = b1 = b2 = 0, g = 1, b = 0, ρ = −30 ⇒ plain content attention
  // softmax(q_c·k_c/sqrt(D_c)) (the recency softplus(−30)·Δ ≈ 1e-13·Δ is far below float rounding).
  const GoatShape g{4, 4, 16, 4, 4, true};
  Layer<float> L(g, 41);
  std::fill(L.A.begin(), L.A.end(), 0.f);
  std::fill(L.B.begin(), L.B.end(), 0.f);
  std::fill(L.w2.begin(), L.w2.end(), 0.f);
  std::fill(L.b1.begin(), L.b1.end(), 0.f);
  L.b2[0] = 0;
  std::fill(L.gain.begin(), L.gain.end(), 1.f);
  std::fill(L.bump.begin(), L.bump.end(), 0.f);
  std::fill(L.rho.begin(), L.rho.end(), -30.f);
  const int B = 2, T_ = 70;
  const auto tab = tables<float>(g, T_);
  const auto qkvc = random_vec<float>(size_t(B) * T_ * g.compact_dim(), 5);
  const auto goat = goat_attention<float>(L, qkvc, nullptr, B, T_, tab);
  // Content-only reference: the same q_c, k_c zero-padded to D_h lanes, scale 1/sqrt(D_c).
  const int stride = (g.H + 2 * g.Hkv) * g.Dh, Dc = g.Dc();
  std::vector<float> qkv(size_t(B) * T_ * stride, 0.f), out(goat.size()), lse(size_t(B) * g.H * T_);
  for (long row = 0; row < long(B) * T_; ++row) {
    for (int h = 0; h < g.H + g.Hkv; ++h)
      for (int d = 0; d < Dc; ++d) qkv[row * stride + h * g.Dh + d] = qkvc[row * g.compact_dim() + h * Dc + d];
    for (int d = 0; d < g.Hkv * g.Dh; ++d)
      qkv[row * stride + (g.H + g.Hkv) * g.Dh + d] = qkvc[row * g.compact_dim() + (g.H + g.Hkv) * Dc + d];
  }
  attention_forward_naive(out.data(), lse.data(), qkv.data(), qkv.data() + g.H * g.Dh, qkv.data() + (g.H + g.Hkv) * g.Dh,
                          (const float*)nullptr, float(1 / std::sqrt(double(Dc))), packed_attention_shape(B, T_, g.H, g.Hkv, g.Dh));
  EXPECT_LT(max_abs_diff(goat, out), 2e-6);
}

// Loss Σ w∘out through pack → attention (double) and its analytic gradients via the kernels.
struct FdCase {
  GoatShape g;
  bool sink;
  int B, T;
};

void expect_goat_gradients(const FdCase& c) {
  SCOPED_TRACE(testing::Message() << "H=" << c.g.H << " Hkv=" << c.g.Hkv << " Dh=" << c.g.Dh << " R=" << c.g.R
                                  << " key_bias=" << c.g.key_bias << " sink=" << c.sink);
  const GoatShape& g = c.g;
  Layer<double> L(g, 51);
  const auto tab = tables<double>(g, c.T + 3);
  auto qkvc = random_vec<double>(size_t(c.B) * c.T * g.compact_dim(), 6);
  auto sink = random_vec<double>(g.H, 7);
  const auto w = random_vec<double>(size_t(c.B) * c.T * g.H * g.Dh, 8);
  auto loss = [&] {
    const auto out = goat_attention(L, qkvc, c.sink ? &sink : nullptr, c.B, c.T, tab);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  // Analytic: forward, attention backward (with the sink slope), pack backward.
  std::vector<double> packed(size_t(c.B) * c.T * g.packed_dim()), slope(g.H), u(c.T), out(w.size()),
      lse(size_t(c.B) * g.H * c.T);
  goat_pack_forward(packed.data(), slope.data(), u.data(), qkvc.data(), L.params(), tab, g, c.B, c.T, 0);
  const auto s = packed_attention_shape(c.B, c.T, g.H, g.Hkv, g.Dh);
  std::vector<double> dslope(g.H, 0.0), dsink(g.H, 0.0), dpacked(packed.size());
  AttentionExtras<double> x;
  if (c.sink) x.sink_slope = slope.data(), x.dsink_slope = dslope.data();
  const double* sk = c.sink ? sink.data() : nullptr;
  double* q = packed.data();
  attention_forward(out.data(), lse.data(), q, q + g.H * g.Dh, q + (g.H + g.Hkv) * g.Dh, sk, 1.0, s, x);
  double* dq = dpacked.data();
  attention_backward(dq, dq + g.H * g.Dh, dq + (g.H + g.Hkv) * g.Dh, c.sink ? dsink.data() : nullptr, w.data(), out.data(),
                     lse.data(), q, q + g.H * g.Dh, q + (g.H + g.Hkv) * g.Dh, sk, 1.0, s, x);
  Layer<double> grad = L;  // same shapes, zeroed
  for (auto* v : {&grad.A, &grad.B, &grad.W1, &grad.b1, &grad.w2, &grad.b2, &grad.gain, &grad.bump, &grad.rho})
    std::fill(v->begin(), v->end(), 0.0);
  std::vector<double> dqkvc(qkvc.size()), du(2 * c.T);
  GoatGrads<double> gr{grad.A.data(), grad.B.data(), grad.W1.data(), grad.b1.data(), grad.w2.data(), grad.b2.data(),
                       grad.gain.data(), grad.bump.data(), grad.rho.data()};
  goat_pack_backward(dqkvc.data(), gr, du.data(), dpacked.data(), c.sink ? dslope.data() : nullptr, L.params(), tab, g, c.B,
                     c.T, 0);
  using attnlab::test::expect_grad_close;
  using attnlab::test::numeric_grad;
  expect_grad_close(dqkvc, numeric_grad(qkvc, loss), 1e-6, "qkv_c");
  expect_grad_close(grad.A, numeric_grad(L.A, loss), 1e-6, "A");
  expect_grad_close(grad.B, numeric_grad(L.B, loss), 1e-6, "B");
  if (c.sink) expect_grad_close(dsink, numeric_grad(sink, loss), 1e-6, "sink");
  if (!g.key_bias) return;
  expect_grad_close(grad.W1, numeric_grad(L.W1, loss), 1e-6, "W1");
  expect_grad_close(grad.b1, numeric_grad(L.b1, loss), 1e-6, "b1");
  expect_grad_close(grad.w2, numeric_grad(L.w2, loss), 1e-6, "w2");
  expect_grad_close(grad.gain, numeric_grad(L.gain, loss), 1e-6, "gain");
  expect_grad_close(grad.bump, numeric_grad(L.bump, loss), 1e-6, "bump");
  expect_grad_close(grad.rho, numeric_grad(L.rho, loss), 1e-6, "rho");
  const auto nb2 = numeric_grad(L.b2, loss);
  if (c.sink) {
    expect_grad_close(grad.b2, nb2, 1e-6, "b2");
  } else {  // §3.5: without a sink b2 shifts whole rows, so its gradient is exactly a structural 0
    EXPECT_LT(std::abs(grad.b2[0]), 1e-12);
    EXPECT_LT(std::abs(nb2[0]), 1e-8);
  }
}

TEST(Goat, GradientsMatchFiniteDifferences) {
  expect_goat_gradients({{4, 2, 12, 2, 2, true}, false, 2, 9});
  expect_goat_gradients({{4, 2, 12, 2, 2, true}, true, 2, 9});
  expect_goat_gradients({{2, 2, 10, 3, 1, true}, true, 1, 12});
  expect_goat_gradients({{4, 1, 8, 2, 2, false}, true, 1, 10});  // key lane off: 2R lanes
}

TEST(Goat, LaneFormulaOfDaEqualsSumOverLogitGradients) {
  // dA_κr = Σ dℓ_ij cos(ω_r Δ_ij), dB_κr = Σ dℓ_ij sin(ω_r Δ_ij) (§3.5), with dℓ computed here
  // explicitly from the probabilities: dℓ_ij = a_ij (dy_i·v_j − D_i).
  const GoatShape g{2, 1, 12, 3, 2, true};
  Layer<double> L(g, 61);
  const int T_ = 14;
  const auto tab = tables<double>(g, T_);
  const auto qkvc = random_vec<double>(size_t(T_) * g.compact_dim(), 9);
  const auto w = random_vec<double>(size_t(T_) * g.H * g.Dh, 10);
  std::vector<double> packed(size_t(T_) * g.packed_dim()), slope(g.H), u(T_), out(w.size()), lse(size_t(g.H) * T_);
  goat_pack_forward(packed.data(), slope.data(), u.data(), qkvc.data(), L.params(), tab, g, 1, T_, 0);
  const auto s = packed_attention_shape(1, T_, g.H, g.Hkv, g.Dh);
  double* q = packed.data();
  attention_forward(out.data(), lse.data(), q, q + g.H * g.Dh, q + (g.H + g.Hkv) * g.Dh, (const double*)nullptr, 1.0, s);
  std::vector<double> dpacked(packed.size());
  double* dq = dpacked.data();
  attention_backward(dq, dq + g.H * g.Dh, dq + (g.H + g.Hkv) * g.Dh, (double*)nullptr, w.data(), out.data(), lse.data(), q,
                     q + g.H * g.Dh, q + (g.H + g.Hkv) * g.Dh, (const double*)nullptr, 1.0, s);
  std::vector<double> dA(g.R, 0.0), dB(g.R, 0.0), zero(64, 0.0), dqkvc(qkvc.size()), du(2 * T_);
  GoatGrads<double> gr{dA.data(), dB.data(), zero.data(), zero.data(), zero.data(), zero.data(), zero.data(), zero.data(),
                       zero.data()};
  goat_pack_backward(dqkvc.data(), gr, du.data(), dpacked.data(), (const double*)nullptr, L.params(), tab, g, 1, T_, 0);
  std::vector<double> eA(g.R, 0.0), eB(g.R, 0.0);
  const int pd = g.packed_dim();
  for (int h = 0; h < g.H; ++h)
    for (int i = 0; i < T_; ++i) {
      std::vector<double> a(i + 1);
      double D = 0;
      for (int d = 0; d < g.Dh; ++d) D += w[(size_t(i) * g.H + h) * g.Dh + d] * out[(size_t(i) * g.H + h) * g.Dh + d];
      for (int j = 0; j <= i; ++j) {
        double logit = 0, gv = 0;
        for (int d = 0; d < g.Dh; ++d) {
          logit += packed[size_t(i) * pd + h * g.Dh + d] * packed[size_t(j) * pd + g.H * g.Dh + d];
          gv += w[(size_t(i) * g.H + h) * g.Dh + d] * packed[size_t(j) * pd + (g.H + 1) * g.Dh + d];
        }
        const double p = std::exp(logit - lse[size_t(h) * T_ + i]), dl = p * (gv - D);
        for (int r = 0; r < g.R; ++r) {
          const double om = std::pow(10000.0, -double(r) / std::max(g.R - 1, 1));
          eA[r] += dl * std::cos(om * (i - j));
          eB[r] += dl * std::sin(om * (i - j));
        }
      }
    }
  EXPECT_LT(max_abs_diff(dA, eA), 1e-12);
  EXPECT_LT(max_abs_diff(dB, eB), 1e-12);
}

}  // namespace
