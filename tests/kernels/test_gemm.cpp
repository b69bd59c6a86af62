// attnlab::gemm (oneDNN) against gemm_naive for every transpose combination, strides and beta.
#include "check.h"
#include "core/gemm.h"

#include <cmath>

using namespace attnlab;

TEST(Gemm, MatchesNaiveAllTransposes) {
  const int M = 37, N = 29, K = 41;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        auto A = test::random_vec<float>((size_t)(ta ? K : M) * lda, 1);
        auto B = test::random_vec<float>((size_t)(tb ? N : K) * ldb, 2);
        auto C = test::random_vec<float>((size_t)M * ldc, 3);
        auto Cref = C;
        gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        gemm_naive<float>(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, Cref.data(), ldc);
        EXPECT_LT(test::max_rel_diff(C, Cref), 1e-5) << "ta=" << ta << " tb=" << tb << " beta=" << beta;
      }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> C = {1, 2, 3, 4};
  gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

// The strided-copy path of gemm(float) (core/gemm.h): products with a transposed first operand whose
// operands' rows lie a multiple of 4 KiB apart, forced on and off. The sum over K is split into
// slabs of 512 rows, each slab's product scaled by alpha and added into C. Every element then passes
// each of its K products through at most K − 1 additions inside the slabs, one scaling by alpha, one
// addition to beta·c (itself rounded once) and one addition per later slab, so with u = 2⁻²⁴ and
// n = K + 3 + slabs it lies within γ_n·(|alpha|·Σ_k |a_mk·b_kn| + |beta·c_mn|) of the exact value,
// γ_n = n·u / (1 − n·u): the standard bound for a dot product summed in any order, each term
// having passed through at most n roundings.
TEST(Gemm, StridedCopiesWithinTheSummationBound) {
  struct Case { int M, N, K, lda, ldb; };
  const Case cases[] = {
      {40, 1000, 1100, 40, 1024},    // B's rows 4 KiB apart, M narrow: B is copied
      {1000, 48, 1100, 1024, 48},    // A's rows 4 KiB apart, N narrow: A is copied
      {200, 100, 600, 1024, 1024},   // both copied; one full slab and a tail
      {64, 1024, 512, 64, 1024},     // exactly one slab
      {300, 64, 700, 300, 1024},     // M wider than the copies' limit: the direct product
  };
  const double u = std::ldexp(1.0, -24);
  for (const Case& c : cases) {
    const auto A = test::random_vec<float>((size_t)c.K * c.lda, 1);
    const auto B = test::random_vec<float>((size_t)c.K * c.ldb, 2);
    const auto C0 = test::random_vec<float>((size_t)c.M * c.N, 3);
    std::vector<double> dot((size_t)c.M * c.N, 0.0), magnitude((size_t)c.M * c.N, 0.0);  // Σ a·b, Σ |a·b|
    for (int k = 0; k < c.K; ++k)
      for (int m = 0; m < c.M; ++m)
        for (int j = 0; j < c.N; ++j) {
          const double t = double(A[(size_t)k * c.lda + m]) * double(B[(size_t)k * c.ldb + j]);
          dot[(size_t)m * c.N + j] += t;
          magnitude[(size_t)m * c.N + j] += std::abs(t);
        }
    const double n = c.K + 3 + (c.K + 511) / 512;
    const double gamma = n * u / (1 - n * u);
    for (GemmStridedCopies mode : {GemmStridedCopies::always, GemmStridedCopies::never})
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        set_gemm_strided_copies(mode);
        const float alpha = 0.75f;
        auto C = C0;
        gemm(true, false, c.M, c.N, c.K, alpha, A.data(), c.lda, B.data(), c.ldb, beta, C.data(), c.N);
        double worst = 0;  // largest error as a fraction of its bound
        for (size_t i = 0; i < C.size(); ++i) {
          const double exact = alpha * dot[i] + beta * double(C0[i]);
          const double bound = gamma * (alpha * magnitude[i] + std::abs(beta * double(C0[i])));
          worst = std::max(worst, std::abs(C[i] - exact) / bound);
        }
        EXPECT_LE(worst, 1.0) << "M=" << c.M << " N=" << c.N << " K=" << c.K << " lda=" << c.lda << " ldb=" << c.ldb
                              << " beta=" << beta << " copies=" << (mode == GemmStridedCopies::always);
      }
  }
  set_gemm_strided_copies(GemmStridedCopies::automatic);
}
