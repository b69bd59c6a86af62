// Linear layer (src/kernels/linear.h; matrices stored [in, out], docs/mechanisms.md §0): the GEMM-based
// kernels against the plain-loop references in float, and every gradient against central finite
// differences in double with the loss L = Σ w∘out.
#include <cmath>
#include <utility>
#include <vector>

#include "check.h"
#include "kernels/linear.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {
}  // namespace

// Float (oneDNN) vs the double-accumulating loops. Sums of K ≈ 50–70 products of N(0,1) values in fp32:
// rounding error ~ sqrt(K)·ε·|terms| ≈ 1e-6 of the output scale; 1e-5 leaves margin without hiding a
// wrong index (which gives O(1) differences).
TEST(Linear, MatchesNaiveFloat) {
  const int N = 45, C = 52, OC = 67;
  auto x = test::random_vec<float>((size_t)N * C, 1);
  auto W = test::random_vec<float>((size_t)C * OC, 2);
  auto b = test::random_vec<float>(OC, 3);
  auto dout = test::random_vec<float>((size_t)N * OC, 4);
  for (bool with_bias : {true, false}) {
    const float* bias = with_bias ? b.data() : nullptr;
    std::vector<float> out((size_t)N * OC, 7.0f), ref((size_t)N * OC);  // out starts dirty: it must be overwritten
    linear_forward(out.data(), x.data(), W.data(), bias, N, C, OC);
    linear_forward_naive(ref.data(), x.data(), W.data(), bias, N, C, OC);
    EXPECT_LT(test::max_rel_diff(out, ref), 1e-5) << "bias=" << with_bias;

    std::vector<float> dx((size_t)N * C, 7.0f), dx_ref((size_t)N * C);  // dinp is written, not accumulated
    auto dW = test::random_vec<float>((size_t)C * OC, 5), dW_ref = dW;  // dweight, dbias accumulate
    auto db = test::random_vec<float>(OC, 6), db_ref = db;
    linear_backward(dx.data(), dW.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(), W.data(), N, C, OC);
    linear_backward_naive(dx_ref.data(), dW_ref.data(), with_bias ? db_ref.data() : nullptr, dout.data(), x.data(),
                          W.data(), N, C, OC);
    EXPECT_LT(test::max_rel_diff(dx, dx_ref), 1e-5);
    EXPECT_LT(test::max_rel_diff(dW, dW_ref), 1e-5);
    EXPECT_LT(test::max_rel_diff(db, db_ref), 1e-5);
  }
}

// The few-rows path (N <= 4: decoding streams W once) and the GEMM path (N = 5) against double
// sums, element by element within the bound of any float summation order: a sum of n terms
// computed in float differs from the exact sum by at most γ_n·Σ|term|, γ_n = nε/(1 − nε), ε = 2⁻²⁴
// (n = C products plus the bias). C covers whole steps of four rows of W and tails; OC = 2100
// needs two passes of the accumulators (2048/N columns each), and C·OC >= 65536 the threaded split
// (bands of W's rows per thread, summed at the end).
// The same with bf16 weights (decoding after GPT::round_weights_to_bf16, few_rows_linear; N <= 4): each
// weight is widened exactly, so the bound is the float one for the widened weights.
TEST(Linear, FewRowsWithinTheSummationBound) {
  for (bool half : {false, true})
    for (int N : {1, 2, 3, 4, 5})
      for (auto [C, OC] : {std::pair{37, 1}, {8, 15}, {37, 64}, {19, 67}, {9, 2100}, {300, 250}}) {
        auto x = test::random_vec<float>((size_t)N * C, 20 + N);
        auto W = test::random_vec<float>((size_t)C * OC, 30 + C);
        auto b = test::random_vec<float>(OC, 40 + OC);
        std::vector<bf16> Wh(W.size());
        to_bf16(Wh.data(), W.data(), W.size());
        if (half) to_float(W.data(), Wh.data(), W.size());  // the exact sums below are of the widened weights
        for (bool with_bias : {true, false}) {
          std::vector<float> out((size_t)N * OC, 7.0f);
          const float* bias = with_bias ? b.data() : nullptr;
          if (half && N > 4) {
            EXPECT_THROW(few_rows_linear(out.data(), x.data(), Wh.data(), bias, N, C, OC), Error);
            continue;
          }
          if (half) few_rows_linear(out.data(), x.data(), Wh.data(), bias, N, C, OC);
          else linear_forward(out.data(), x.data(), W.data(), bias, N, C, OC);
          const double eps = 0x1p-24, n = C + 1, gamma = n * eps / (1 - n * eps);
          double worst = 0;  // the largest error as a fraction of its bound
          for (int i = 0; i < N; ++i)
            for (int o = 0; o < OC; ++o) {
              double exact = with_bias ? b[o] : 0.0, mag = std::abs(exact);
              for (int c = 0; c < C; ++c) {
                const double t = double(x[(size_t)i * C + c]) * W[(size_t)c * OC + o];
                exact += t;
                mag += std::abs(t);
              }
              worst = std::max(worst, std::abs(out[(size_t)i * OC + o] - exact) / (gamma * mag));
            }
          EXPECT_LE(worst, 1.0) << "N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias << " bf16=" << half;
        }
      }
}

// Mixed precision (train.precision = bf16): the layer's products take bf16 copies of x, W and dout
// and return float. Every output is a float sum of exact products of the rounded operands, so
// against the exact sum of those (double), each element lies within γ_n·Σ|terms| (n = the number
// of terms plus one for what is added to: bias, dW's old value), γ_n = n·u/(1 − n·u), u = 2⁻²⁴,
// plus n·2⁻¹²⁶ for the subnormals AVX512-BF16 flushes. dbias sums the float dout (unrounded).
TEST(Linear, Bf16WithinTheFloatBoundOfTheRoundedOperands) {
  const int N = 45, C = 52, OC = 67;
  const auto x = test::random_vec<float>((size_t)N * C, 1), W = test::random_vec<float>((size_t)C * OC, 2);
  const auto b = test::random_vec<float>(OC, 3), dout = test::random_vec<float>((size_t)N * OC, 4);
  std::vector<bf16> xh(x.size()), Wh(W.size()), douth(dout.size());
  to_bf16(xh.data(), x.data(), x.size());
  to_bf16(Wh.data(), W.data(), W.size());
  const auto r = [](bf16 v) { return double(to_float(v)); };
  const auto gamma = [](double n) { return n * 0x1p-24 / (1 - n * 0x1p-24); };
  const auto tiny = [](double n) { return n * 0x1p-126; };
  for (bool with_bias : {true, false}) {
    std::vector<float> out((size_t)N * OC, 7.0f);
    linear_forward(out.data(), xh.data(), Wh.data(), with_bias ? b.data() : nullptr, N, C, OC);
    double worst = 0;
    for (int i = 0; i < N; ++i)
      for (int o = 0; o < OC; ++o) {
        double exact = with_bias ? b[o] : 0.0, mag = std::abs(exact);
        for (int c = 0; c < C; ++c) {
          const double t = r(xh[(size_t)i * C + c]) * r(Wh[(size_t)c * OC + o]);
          exact += t, mag += std::abs(t);
        }
        worst = std::max(worst, std::abs(out[(size_t)i * OC + o] - exact) / (gamma(C + 1) * mag + tiny(C + 1)));
      }
    EXPECT_LE(worst, 1.0) << "forward, bias=" << with_bias;

    std::vector<float> dx((size_t)N * C, 7.0f);
    const auto dW0 = test::random_vec<float>((size_t)C * OC, 5), db0 = test::random_vec<float>(OC, 6);
    auto dW = dW0, db = db0;
    linear_backward(dx.data(), dW.data(), with_bias ? db.data() : nullptr, dout.data(), douth.data(), xh.data(), Wh.data(),
                    N, C, OC);
    for (size_t i = 0; i < dout.size(); ++i) ASSERT_EQ(douth[i].bits, to_bf16(dout[i]).bits);  // dout's copy, rounded
    double worst_dx = 0, worst_dw = 0, worst_db = 0;
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        double exact = 0, mag = 0;
        for (int o = 0; o < OC; ++o) {
          const double t = r(douth[(size_t)i * OC + o]) * r(Wh[(size_t)c * OC + o]);
          exact += t, mag += std::abs(t);
        }
        worst_dx = std::max(worst_dx, std::abs(dx[(size_t)i * C + c] - exact) / (gamma(OC) * mag + tiny(OC)));
      }
    for (int c = 0; c < C; ++c)
      for (int o = 0; o < OC; ++o) {
        double exact = dW0[(size_t)c * OC + o], mag = std::abs(exact);
        for (int i = 0; i < N; ++i) {
          const double t = r(xh[(size_t)i * C + c]) * r(douth[(size_t)i * OC + o]);
          exact += t, mag += std::abs(t);
        }
        worst_dw = std::max(worst_dw, std::abs(dW[(size_t)c * OC + o] - exact) / (gamma(N + 1) * mag + tiny(N + 1)));
      }
    for (int o = 0; o < OC && with_bias; ++o) {
      double exact = db0[o], mag = std::abs(exact);
      for (int i = 0; i < N; ++i) exact += dout[(size_t)i * OC + o], mag += std::abs(dout[(size_t)i * OC + o]);
      worst_db = std::max(worst_db, std::abs(db[o] - exact) / (gamma(N + 1) * mag));
    }
    EXPECT_LE(worst_dx, 1.0) << "dx, bias=" << with_bias;
    EXPECT_LE(worst_dw, 1.0) << "dW, bias=" << with_bias;
    EXPECT_LE(worst_db, 1.0) << "db";
  }
}

// dinp == nullptr skips the input gradient but still accumulates dweight.
TEST(Linear, BackwardWithoutInputGradient) {
  const int N = 8, C = 5, OC = 6;
  auto x = test::random_vec<float>((size_t)N * C, 7);
  auto W = test::random_vec<float>((size_t)C * OC, 8);
  auto dout = test::random_vec<float>((size_t)N * OC, 9);
  std::vector<float> dW((size_t)C * OC, 0.0f), dW_ref = dW;
  linear_backward((float*)nullptr, dW.data(), (float*)nullptr, dout.data(), x.data(), W.data(), N, C, OC);
  linear_backward_naive((float*)nullptr, dW_ref.data(), (float*)nullptr, dout.data(), x.data(), W.data(), N, C, OC);
  EXPECT_LT(test::max_rel_diff(dW, dW_ref), 1e-5);
}

// Finite differences in double. L is bilinear in (x, W) and linear in b, so the central difference is
// exact up to rounding: tol 1e-8.
TEST(Linear, GradientFiniteDifferences) {
  const int N = 4, C = 5, OC = 3;
  auto x = test::random_vec<double>((size_t)N * C, 10);
  auto W = test::random_vec<double>((size_t)C * OC, 11);
  auto b = test::random_vec<double>(OC, 12);
  auto wl = test::random_vec<double>((size_t)N * OC, 13);
  std::vector<double> out((size_t)N * OC);
  auto loss = [&] {
    linear_forward(out.data(), x.data(), W.data(), b.data(), N, C, OC);
    return dot(out, wl);
  };
  std::vector<double> dx((size_t)N * C), dW((size_t)C * OC, 0.0), db(OC, 0.0);
  linear_backward(dx.data(), dW.data(), db.data(), wl.data(), x.data(), W.data(), N, C, OC);
  test::expect_grad_close(dx, test::numeric_grad(x, loss), 1e-8, "linear dinp");
  test::expect_grad_close(dW, test::numeric_grad(W, loss), 1e-8, "linear dweight");
  test::expect_grad_close(db, test::numeric_grad(b, loss), 1e-8, "linear dbias");
}
