// MLP elementwise kernels (src/kernels/mlp.h, docs/mechanisms.md §1.1): the vectorized exp, GELU-tanh and
// SwiGLU against the literal §1.1 formulas (std::tanh / std::exp) in float, the same in double (where
// the fast path uses std::exp and must agree to ~1e-15), and their gradients against central finite
// differences in double.
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <vector>

#include "check.h"
#include "core/bf16.h"
#include "kernels/mlp.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {

// max_i |a_i − b_i| / max(1, |b_i|): each element against its own scale, so that a few huge extreme
// inputs do not loosen the comparison of the ordinary ones.
template <class A, class B>
double max_pointwise_err(const A& a, const B& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}
}  // namespace

// exp_fast<float> on a dense grid of [−87, 88] against std::exp in double: the polynomial's truncation
// is ~5e-9 and the float evaluation adds a few roundings; measured 7.7e-8 (1.3 ulp), required below
// 2 ulp of 2^-24 = 1.2e-7. Beyond the clamp it saturates instead of returning 0 or inf.
TEST(ExpFast, IsAccurate) {
  double worst = 0;
  for (int i = 0; i <= 1750000; ++i) {
    const float x = -87.0f + float(i) * 1e-4f;
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(double(exp_fast(x)) - want) / want);
  }
  EXPECT_LT(worst, 1.2e-7);
  std::printf("exp_fast<float>: max relative error %.3g on [-87, 88]\n", worst);
  EXPECT_GT(exp_fast(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(exp_fast(1000.0f)));
  EXPECT_TRUE(std::isnan(exp_fast(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_fast(0.0f), 1.0f);
}

// Fast float kernels against the literal formula evaluated in double on the same inputs, over typical
// pre-activations (N(0, 3²)) plus extremes. The fast forms need an exp (≤ 8e-8 relative, see above) and
// a few fp32 roundings, so they stay within 1e-6 of max(1, |value|) per element. (The literal formula in
// float would not: 1−th² cancels in the tails, costing up to ~2e-6 there.)
TEST(Gelu, MatchesNaiveFloat) {
  const size_t n = 50000;
  auto x = test::random_vec<float>(n, 1, 3.0);
  const float extremes[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, -1e-3f, 10.0f, -10.0f, 50.0f, -50.0f, 1e4f, -1e4f};
  for (size_t k = 0; k < std::size(extremes); ++k) x[k] = extremes[k];
  auto dout = test::random_vec<float>(n, 2);
  const std::vector<double> xd(x.begin(), x.end()), doutd(dout.begin(), dout.end());
  std::vector<float> out(n), dx(n);
  std::vector<double> ref(n), dx_ref(n);
  gelu_forward(out.data(), x.data(), n);
  gelu_forward_naive(ref.data(), xd.data(), n);
  EXPECT_LT(max_pointwise_err(out, ref), 1e-6);
  gelu_backward(dx.data(), dout.data(), x.data(), n);
  gelu_backward_naive(dx_ref.data(), doutd.data(), xd.data(), n);
  EXPECT_LT(max_pointwise_err(dx, dx_ref), 1e-6);
  std::printf("gelu float: max pointwise error forward %.3g, backward %.3g\n", max_pointwise_err(out, ref),
              max_pointwise_err(dx, dx_ref));
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(out[i]) && std::isfinite(dx[i])) << x[i];
  EXPECT_EQ(out[10], 1e4f);             // GELU(h) = h for h ≫ 0
  EXPECT_NEAR(out[11], 0.0f, 1e-30f);   // and 0 for h ≪ 0 (exp_fast saturates: ≈ −1e-35, not exactly 0)
}

TEST(Gelu, MatchesNaiveDouble) {
  const size_t n = 2000;
  auto x = test::random_vec<double>(n, 3, 3.0);
  auto dout = test::random_vec<double>(n, 4);
  std::vector<double> out(n), ref(n), dx(n), dx_ref(n);
  gelu_forward(out.data(), x.data(), n);
  gelu_forward_naive(ref.data(), x.data(), n);
  EXPECT_LT(test::max_rel_diff(out, ref), 1e-14);
  gelu_backward(dx.data(), dout.data(), x.data(), n);
  gelu_backward_naive(dx_ref.data(), dout.data(), x.data(), n);
  EXPECT_LT(test::max_rel_diff(dx, dx_ref), 1e-14);
}

// L = Σ w∘GELU(x); h = 1e-6 central differences of a smooth scalar function: error ~1e-10; tol 1e-7.
TEST(Gelu, GradientFiniteDifferences) {
  const size_t n = 64;
  auto x = test::random_vec<double>(n, 5, 2.0);
  auto w = test::random_vec<double>(n, 6);
  std::vector<double> out(n), dx(n);
  auto loss = [&] {
    gelu_forward(out.data(), x.data(), n);
    return dot(out, w);
  };
  gelu_backward(dx.data(), w.data(), x.data(), n);
  test::expect_grad_close(dx, test::numeric_grad(x, loss), 1e-7, "gelu dinp");
}

// Known values of GELU_tanh (the §1.1 formula evaluated independently in Python float64).
TEST(Gelu, KnownValues) {
  const double h[] = {1.0, -1.0, 2.0};
  const double want[] = {0.8411919906082768, -0.15880800939172324, 1.954597694087775};
  double out[3];
  gelu_forward(out, h, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], want[i], 1e-15);
}

// As for GELU: fast float against the literal formula in double, 1e-6 of max(1, |value|) per element.
TEST(SwiGLU, MatchesNaiveFloat) {
  const int N = 37, Hd = 71;
  auto gu = test::random_vec<float>((size_t)N * 2 * Hd, 7, 3.0);
  const float extremes[] = {60.0f, -60.0f, 1e4f, -1e4f, 100.0f, -100.0f, 0.0f, 1e-30f};
  for (size_t k = 0; k < std::size(extremes); ++k) gu[k] = extremes[k];  // p of row 0
  auto dout = test::random_vec<float>((size_t)N * Hd, 8);
  const std::vector<double> gud(gu.begin(), gu.end()), doutd(dout.begin(), dout.end());
  std::vector<float> out((size_t)N * Hd), dgu(gu.size(), 7.0f);
  std::vector<double> ref(out.size()), dgu_ref(gu.size());
  swiglu_forward(out.data(), gu.data(), N, Hd);
  swiglu_forward_naive(ref.data(), gud.data(), N, Hd);
  EXPECT_LT(max_pointwise_err(out, ref), 1e-6);
  swiglu_backward(dgu.data(), dout.data(), gu.data(), N, Hd);
  swiglu_backward_naive(dgu_ref.data(), doutd.data(), gud.data(), N, Hd);
  EXPECT_LT(max_pointwise_err(dgu, dgu_ref), 1e-6);
  for (float v : dgu) ASSERT_TRUE(std::isfinite(v));
}

// L = Σ w∘out with respect to both halves of gate_up.
TEST(SwiGLU, GradientFiniteDifferences) {
  const int N = 3, Hd = 5;
  auto gu = test::random_vec<double>((size_t)N * 2 * Hd, 9, 2.0);
  auto w = test::random_vec<double>((size_t)N * Hd, 10);
  std::vector<double> out((size_t)N * Hd), dgu(gu.size());
  auto loss = [&] {
    swiglu_forward(out.data(), gu.data(), N, Hd);
    return dot(out, w);
  };
  swiglu_backward(dgu.data(), w.data(), gu.data(), N, Hd);
  test::expect_grad_close(dgu, test::numeric_grad(gu, loss), 1e-7, "swiglu dgate_up");
}

TEST(SwiGLU, HiddenWidthRule) {
  EXPECT_EQ(swiglu_hidden(768), 2048);  // the §1.1 example
  EXPECT_EQ(swiglu_hidden(256), 704);   // 8·256/192 = 10.67 → 11 → 704
  EXPECT_EQ(swiglu_hidden(384), 1024);  // exactly 16
  EXPECT_EQ(swiglu_hidden(512), 1408);  // 21.33 → 22
  EXPECT_EQ(swiglu_hidden(24), 64);     // 1 → 64
}

// train.precision = bf16: GELU and SwiGLU write the bf16 input of the MLP's output projection
// directly (an L1 tile rounded, store_row). Each value is the float kernel's value rounded once,
// |h − y| ≤ u·|y| (u = 2⁻⁸), up to what two float evaluations of the same formula may differ by
// (FMA contraction in one loop and not the other): the exponent's argument z moves by a few ulp of
// its terms, which moves e^z relatively by ≤ 4·2⁻²⁴·(|z| + 1), and the quotient a little more:
// bounded by 16·2⁻²⁴·(|z| + 1)·|y| with z ≤ 12 for |inputs| ≤ 4. n = 2500 crosses GELU's 1024-value
// blocks with a partial last one; Hd = 300 crosses SwiGLU's 256-value tile. Nothing past the end
// may be written.
TEST(MlpActivations, Bf16OutputIsTheFloatOutputRoundedOnce) {
  const double u = kBf16Unit, slack = 16 * 13 * std::ldexp(1.0, -24);
  auto check = [&](const std::vector<float>& y, const std::vector<bf16>& h, const char* what) {
    int bad = 0;
    for (size_t k = 0; k < y.size(); ++k) {
      const double err = std::fabs(double(to_float(h[k])) - y[k]);
      if (!(err <= (u + slack) * std::fabs(y[k])) && ++bad <= 5)
        ADD_FAILURE() << what << " " << k << ": bf16 " << to_float(h[k]) << " float " << y[k];
    }
    EXPECT_EQ(bad, 0) << what;
    for (size_t k = y.size(); k < h.size(); ++k) EXPECT_EQ(h[k].bits, 0x7fc1) << what << " written past the end";
  };
  const size_t n = 2500;
  auto x = test::random_vec<float>(n, 41, 4.0);
  std::vector<float> y(n);
  std::vector<bf16> h(n + 8, bf16{0x7fc1});
  gelu_forward(y.data(), x.data(), n);
  gelu_forward(h.data(), x.data(), n);
  check(y, h, "gelu");
  const int N = 9, Hd = 300;
  auto gu = test::random_vec<float>((size_t)N * 2 * Hd, 42, 4.0);
  std::vector<float> ys((size_t)N * Hd);
  std::vector<bf16> hs(ys.size() + 8, bf16{0x7fc1});
  swiglu_forward(ys.data(), gu.data(), N, Hd);
  swiglu_forward(hs.data(), gu.data(), N, Hd);
  check(ys, hs, "swiglu");
}
