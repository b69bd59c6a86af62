// Sinkhorn–Knopp (src/kernels/sinkhorn.h, docs/mechanisms.md §5.3, §5.4): the kernel against the naive
// reference, the row and column sums of §5.4, the baseline init matrix is a fixed point, and the
// unrolled backward against central finite differences in double, for n = 2, 3, 4.
#include <vector>

#include "check.h"
#include "kernels/sinkhorn.h"

using namespace attnlab;
using namespace attnlab::kernels;

TEST(Sinkhorn, MatchesNaive) {
  for (int n : {2, 3, 4}) {
    const auto logits = test::random_vec<double>(n * n, n, 1.5);
    std::vector<double> out(n * n);
    sinkhorn_forward(out.data(), logits.data(), n, 20);
    EXPECT_LT(test::max_abs_diff(out, sinkhorn_naive(logits, n, 20)), 1e-15) << n;
  }
}

// §5.4: rows sum to 1 within 1e-6 (fp32 rounding of the last row step); columns within 1e-5 for
// logits of spread ≲ 1 (here N(0, 0.5²), the training regime where α·x̂Φ is small; measured worst of
// 20k draws: 3e-6 for n = 2, 1.6e-7 for n = 4). Wider logits converge more slowly (n = 2 at N(0,1):
// 99th percentile 2e-4, worst 1e-2), so there the float kernel is compared with the float64 reference.
TEST(Sinkhorn, RowAndColumnSums) {
  for (int n : {2, 4}) {
    double worst_row = 0, worst_col = 0;
    for (int trial = 0; trial < 500; ++trial) {
      const auto logits = test::random_vec<float>(n * n, 100 + trial, 0.5);
      std::vector<float> m(n * n);
      sinkhorn_forward(m.data(), logits.data(), n, 20);
      for (int a = 0; a < n; ++a) {
        double row = 0, col = 0;
        for (int b = 0; b < n; ++b) {
          row += m[a * n + b];
          col += m[b * n + a];
        }
        worst_row = std::max(worst_row, std::abs(row - 1));
        worst_col = std::max(worst_col, std::abs(col - 1));
      }
    }
    EXPECT_LT(worst_row, 1e-6) << "n = " << n;
    EXPECT_LT(worst_col, 1e-5) << "n = " << n;
  }
}

TEST(Sinkhorn, WideLogitsMatchFloat64Reference) {
  for (int n : {2, 4})
    for (int trial = 0; trial < 200; ++trial) {
      const auto logits = test::random_vec<float>(n * n, 900 + trial, 2.0);
      std::vector<float> m(n * n);
      sinkhorn_forward(m.data(), logits.data(), n, 20);
      const auto ref = sinkhorn_naive(std::vector<double>(logits.begin(), logits.end()), n, 20);
      ASSERT_LT(test::max_abs_diff(m, ref), 2e-6) << "n = " << n << " trial " << trial;
    }
}

TEST(Sinkhorn, InitMatrixIsAFixedPoint) {
  // bres = ln(9(n−1))·I gives 0.9 on the diagonal, 0.1/(n−1) off it: already doubly stochastic (§5.3).
  for (int n : {2, 4}) {
    std::vector<double> logits(n * n, 0.0), m(n * n);
    for (int s = 0; s < n; ++s) logits[s * n + s] = std::log(9.0 * (n - 1));
    sinkhorn_forward(m.data(), logits.data(), n, 20);
    for (int s = 0; s < n; ++s)
      for (int u = 0; u < n; ++u) EXPECT_NEAR(m[s * n + u], s == u ? 0.9 : 0.1 / (n - 1), 1e-15);
  }
}

TEST(Sinkhorn, BackwardMatchesFiniteDifferences) {
  for (int n : {2, 3, 4})
    for (int iters : {1, 3, 20}) {
      auto logits = test::random_vec<double>(n * n, 7 * n + iters, 1.0);
      const auto G = test::random_vec<double>(n * n, 50 + n);
      auto loss = [&]() {
        std::vector<double> m(n * n);
        sinkhorn_forward(m.data(), logits.data(), n, iters);
        return test::dot(m, G);
      };
      std::vector<double> work(sinkhorn_work_size(n, iters)), grad(n * n, 0.0);
      sinkhorn_backward(grad.data(), G.data(), logits.data(), n, iters, work.data());
      test::expect_grad_close(grad, test::numeric_grad(logits, loss), 1e-8,
                              ("n = " + std::to_string(n) + ", iters = " + std::to_string(iters)).c_str());
    }
}

// The batched kernels (matrices entry-major across a group of tokens, SIMD over the group) against
// the per-matrix ones, forward and backward, including a padded group.
TEST(Sinkhorn, BatchedMatchesPerMatrix) {
  constexpr int G = kSinkhornMaxGroup;
  for (int n : {2, 3, 4})
    for (int iters : {1, 20}) {
      const int nn = n * n;
      std::vector<double> logits((size_t)nn * G), dout((size_t)nn * G), m(logits.size()), dl((size_t)nn * G, 0.5);
      std::vector<double> work(sinkhorn_work_size(n, iters) * G);
      const auto l0 = test::random_vec<double>(logits.size(), 70 + n, 1.5), d0 = test::random_vec<double>(logits.size(), 80 + n);
      for (int g = 0; g < G; ++g)
        for (int k = 0; k < nn; ++k) {
          logits[k * G + g] = l0[g * nn + k];
          dout[k * G + g] = d0[g * nn + k];
        }
      m = logits;
      sinkhorn_forward_batch(m.data(), n, iters);
      sinkhorn_backward_batch(dl.data(), dout.data(), logits.data(), n, iters, work.data());
      std::vector<double> one(nn), grad(nn, 0.5), w1(sinkhorn_work_size(n, iters));
      double worst_f = 0, worst_b = 0;
      for (int g = 0; g < G; ++g) {
        sinkhorn_forward(one.data(), l0.data() + g * nn, n, iters);
        std::fill(grad.begin(), grad.end(), 0.5);
        sinkhorn_backward(grad.data(), d0.data() + g * nn, l0.data() + g * nn, n, iters, w1.data());
        for (int k = 0; k < nn; ++k) {
          worst_f = std::max(worst_f, std::abs(one[k] - m[k * G + g]));
          worst_b = std::max(worst_b, std::abs(grad[k] - dl[k * G + g]));
        }
      }
      EXPECT_LT(worst_f, 1e-15) << n;
      EXPECT_LT(worst_b, 1e-14) << n;
    }
}
