// attnlab::gemm (oneDNN) against gemm_naive for every transpose combination, strides and beta.
#include "check.h"
#include "core/gemm.h"

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
