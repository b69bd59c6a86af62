// LayerNorm and RMSNorm (src/kernels/norm.h, docs/mechanisms.md §1.1 table): fast kernels against the
// double-accumulating naive references in float, and every gradient (input, γ, β) against central
// finite differences in double, with the loss a random linear functional L = Σ w∘out of the output.
#include <cmath>
#include <vector>

#include "check.h"
#include "core/bf16.h"
#include "kernels/norm.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {

// N(0,1) rows shifted by a per-row offset in {−2s, −s, 0, s, 2s}: with s = 30, |μ| ≫ σ as can happen in
// a residual stream, where a one-pass variance E[x²]−μ² would lose ~1e-4 relative.
std::vector<float> offset_rows(int N, int C, uint64_t seed, float s) {
  auto x = test::random_vec<float>((size_t)N * C, seed);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) x[(size_t)i * C + c] += float(i % 5 - 2) * s;
  return x;
}

// Tolerance of the float kernels against the double references, relative to max(1, max|ref|).
// Centred rows: a few fp32 roundings per output (ε = 6e-8), so 1e-6. Offset rows: the saved fp32 μ
// is off by up to ulp(60)/2 = 1.9e-6, which x − μ passes on times r ≈ 1 and |γ| ≲ 4, i.e. ≲ 8e-6
// absolute against outputs of size ≳ 4: 2e-6 relative.
double norm_tolerance(float s) { return s == 0 ? 1e-6 : 2e-6; }

}  // namespace

// Float vs the double-accumulating reference, with and without β, on centred and offset rows; the
// backward accumulates into non-zero dinp, dweight, dbias. N = 150 spans three row blocks of the
// backward (kNormRowBlock = 64), the last one partial.
TEST(LayerNorm, MatchesNaiveFloat) {
  const int N = 150, C = 300;
  auto w = test::random_vec<float>(C, 2), b = test::random_vec<float>(C, 3);
  auto dout = test::random_vec<float>((size_t)N * C, 4);
  for (float shift : {0.0f, 30.0f})
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(testing::Message() << "shift " << shift << " bias " << with_bias);
    auto x = offset_rows(N, C, 1, shift);
    const double tol = norm_tolerance(shift);
    const float* bias = with_bias ? b.data() : nullptr;
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), out_ref(out.size()), mean_ref(N), rstd_ref(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C);
    layernorm_forward_naive(out_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), w.data(), bias, N, C);
    EXPECT_LT(test::max_rel_diff(out, out_ref), tol);
    EXPECT_LT(test::max_rel_diff(mean, mean_ref), tol);
    EXPECT_LT(test::max_rel_diff(rstd, rstd_ref), tol);
    auto dx = test::random_vec<float>((size_t)N * C, 5), dx_ref = dx;
    auto dw = test::random_vec<float>(C, 6), dw_ref = dw;
    auto db = test::random_vec<float>(C, 7), db_ref = db;
    float* dbias = with_bias ? db.data() : nullptr;
    float* dbias_ref = with_bias ? db_ref.data() : nullptr;
    layernorm_backward(dx.data(), dw.data(), dbias, dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    layernorm_backward_naive(dx_ref.data(), dw_ref.data(), dbias_ref, dout.data(), x.data(), w.data(), mean.data(),
                             rstd.data(), N, C);
    EXPECT_LT(test::max_rel_diff(dx, dx_ref), tol);
    EXPECT_LT(test::max_rel_diff(dw, dw_ref), tol);
    EXPECT_LT(test::max_rel_diff(db, db_ref), tol);
    if (!with_bias) {
      EXPECT_EQ(db, test::random_vec<float>(C, 7));  // untouched
    }
  }
}

TEST(LayerNorm, OutputIsNormalized) {
  const int N = 4, C = 256;
  auto x = offset_rows(N, C, 8, 30.0f);
  std::vector<float> w(C, 1.0f), out((size_t)N * C);
  layernorm_forward(out.data(), (float*)nullptr, (float*)nullptr, x.data(), w.data(), (const float*)nullptr, N, C);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += out[(size_t)i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (out[(size_t)i * C + c] - m) * (out[(size_t)i * C + c] - m);
    v /= C;
    EXPECT_NEAR(m, 0.0, 4e-6);  // μ's fp32 rounding, ≤ ulp(60)/2 = 1.9e-6, times r ≈ 1 shifts the mean
    EXPECT_NEAR(v, 1.0, 1e-4);  // var/(var+1e-5) with var ≈ 1
  }
}

// Finite differences in double. h = 1e-6 gives central-difference errors ~1e-9 relative here: tol 1e-7.
TEST(LayerNorm, GradientFiniteDifferences) {
  const int N = 3, C = 7;
  auto x = test::random_vec<double>((size_t)N * C, 9);
  auto w = test::random_vec<double>(C, 10), b = test::random_vec<double>(C, 11);
  auto wl = test::random_vec<double>((size_t)N * C, 12);
  std::vector<double> out((size_t)N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, wl);
  };
  loss();
  std::vector<double> dx((size_t)N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), wl.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  test::expect_grad_close(dx, test::numeric_grad(x, loss), 1e-7, "LayerNorm dinp");
  test::expect_grad_close(dw, test::numeric_grad(w, loss), 1e-7, "LayerNorm dweight");
  test::expect_grad_close(db, test::numeric_grad(b, loss), 1e-7, "LayerNorm dbias");
}

// RMSNorm has no μ, so offset rows are just rows of larger norm: 1e-6 for both.
TEST(RmsNorm, MatchesNaiveFloat) {
  const int N = 150, C = 300;
  auto w = test::random_vec<float>(C, 14);
  auto dout = test::random_vec<float>((size_t)N * C, 15);
  for (float shift : {0.0f, 30.0f}) {
  SCOPED_TRACE(testing::Message() << "shift " << shift);
  auto x = offset_rows(N, C, 13, shift);
  std::vector<float> out((size_t)N * C), rstd(N), out_ref(out.size()), rstd_ref(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
  rmsnorm_forward_naive(out_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C);
  EXPECT_LT(test::max_rel_diff(out, out_ref), 1e-6);
  EXPECT_LT(test::max_rel_diff(rstd, rstd_ref), 1e-6);
  auto dx = test::random_vec<float>((size_t)N * C, 16), dx_ref = dx;
  auto dw = test::random_vec<float>(C, 17), dw_ref = dw;
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward_naive(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_LT(test::max_rel_diff(dx, dx_ref), 1e-6);
  EXPECT_LT(test::max_rel_diff(dw, dw_ref), 1e-6);
  }
}

TEST(RmsNorm, GradientFiniteDifferences) {
  const int N = 3, C = 7;
  auto x = test::random_vec<double>((size_t)N * C, 18);
  auto w = test::random_vec<double>(C, 19);
  auto wl = test::random_vec<double>((size_t)N * C, 20);
  std::vector<double> out((size_t)N * C), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C);
    return dot(out, wl);
  };
  loss();
  std::vector<double> dx((size_t)N * C, 0.0), dw(C, 0.0);
  rmsnorm_backward(dx.data(), dw.data(), wl.data(), x.data(), w.data(), rstd.data(), N, C);
  test::expect_grad_close(dx, test::numeric_grad(x, loss), 1e-7, "RMSNorm dinp");
  test::expect_grad_close(dw, test::numeric_grad(w, loss), 1e-7, "RMSNorm dweight");
}

// The ε of each norm is that of docs/mechanisms.md §1.1: a zero row gives rstd = 1/sqrt(ε).
TEST(Norms, EpsilonValues) {
  const int C = 8;
  std::vector<double> zero(C, 0.0), w(C, 1.0), out(C);
  double mean = 0, rstd = 0;
  layernorm_forward(out.data(), &mean, &rstd, zero.data(), w.data(), (const double*)nullptr, 1, C);
  EXPECT_NEAR(rstd, 1.0 / std::sqrt(1e-5), 1e-9);
  rmsnorm_forward(out.data(), &rstd, zero.data(), w.data(), 1, C);
  EXPECT_NEAR(rstd, 1.0 / std::sqrt(1e-6), 1e-9);
}

// train.precision = bf16: the norms write their bf16 output through an L1 tile (store_row) instead of
// a float row. Each value is the float kernel's value rounded once: |h − y| ≤ u·|y| (u = 2⁻⁸), plus
// the difference two float evaluations of the same formula may have (the compiler may contract a
// product and a sum into an FMA in one loop and not in the other): at most 4·2⁻²⁴ of the terms'
// magnitude |(x − μ)·r·γ| + |β|. C = 300 crosses the 256-value tile; the γ, β statistics (mean,
// rstd) must be the float kernel's bits, and nothing past the last row may be written.
TEST(Norms, Bf16OutputIsTheFloatOutputRoundedOnce) {
  const int N = 40, C = 300;
  const double u = kBf16Unit, f = std::ldexp(1.0, -24);
  auto w = test::random_vec<float>(C, 31), b = test::random_vec<float>(C, 32);
  for (int kind = 0; kind < 3; ++kind)  // layernorm with β, without β, rmsnorm
  for (float shift : {0.0f, 30.0f}) {
    SCOPED_TRACE(testing::Message() << "kind " << kind << " shift " << shift);
    auto x = offset_rows(N, C, 33, shift);
    const float* bias = kind == 0 ? b.data() : nullptr;
    std::vector<float> y((size_t)N * C), mean(N), rstd(N), mean_h(N), rstd_h(N);
    std::vector<bf16> h((size_t)N * C + 8, bf16{0x7fc1});  // a NaN sentinel past the end
    if (kind < 2) {
      layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias, N, C);
      layernorm_forward(h.data(), mean_h.data(), rstd_h.data(), x.data(), w.data(), bias, N, C);
      EXPECT_EQ(mean, mean_h);
    } else {
      rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C);
      rmsnorm_forward(h.data(), rstd_h.data(), x.data(), w.data(), N, C);
    }
    EXPECT_EQ(rstd, rstd_h);
    int bad = 0;
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        const size_t k = (size_t)i * C + c;
        const double centred = kind < 2 ? double(x[k]) - mean[i] : double(x[k]);
        const double mag = std::fabs(centred * rstd[i] * w[c]) + (bias ? std::fabs(bias[c]) : 0.0);
        const double err = std::fabs(double(to_float(h[k])) - y[k]);
        if (!(err <= u * std::fabs(y[k]) + 4 * f * mag) && ++bad <= 5)
          ADD_FAILURE() << "row " << i << " col " << c << ": bf16 " << to_float(h[k]) << " float " << y[k];
      }
    EXPECT_EQ(bad, 0);
    for (size_t k = (size_t)N * C; k < h.size(); ++k) EXPECT_EQ(h[k].bits, 0x7fc1) << "written past the end";
  }
}
