// attnlab::gemm (oneDNN) against gemm_naive for every transpose combination, strides and beta.
#include "check.h"
#include "core/gemm.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/rng.h"

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
  gemm(false, false, 2, 2, 0, 1.0f, (const float*)nullptr, 1, (const float*)nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  gemm(false, false, 2, 2, 0, 1.0f, (const bf16*)nullptr, 1, (const bf16*)nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.25f, 0.5f, 0.75f, 1}));
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

// gemm(bf16): bf16 operands, float C. A product of two bf16 values (8 significant bits each) is
// exact in float, so the result is a float dot product of the rounded inputs: against the exact sum
// of those same products (double here: exact for K this small), each element lies within
// γ_n·(|alpha|·Σ_k |a·b| + |beta·c|) with n = K + 2 (K − 1 additions, alpha, beta·c and its
// addition), γ_n = n·u/(1 − n·u), u = 2⁻²⁴ — plus, because AVX512-BF16's dot-product instruction
// treats subnormal inputs and results as zero, n·2⁻¹²⁶ absolute (no subnormals arise from these
// inputs; the term only keeps the bound true for any input). Checked for the native path (oneDNN's
// bf16 matmul, where this CPU has one) and the widening path (forced), every transpose, strides and
// beta; a product that dropped an operand's rounding, a k or a transpose would miss by orders of
// magnitude.
TEST(Gemm, Bf16WithinTheFloatSummationBoundOfTheRoundedInputs) {
  const int M = 67, N = 45, K = 300;
  const double u = std::ldexp(1.0, -24), n = K + 2, gamma = n * u / (1 - n * u), tiny = n * std::ldexp(1.0, -126);
  std::printf("bf16 matmul here: %s\n", bf16_matmul_native() ? "native (oneDNN)" : "widened to float");
  for (bool widen : {false, true})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          set_gemm_bf16_widen(widen);
          const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
          const auto Af = test::random_vec<float>((size_t)(ta ? K : M) * lda, 1);
          const auto Bf = test::random_vec<float>((size_t)(tb ? N : K) * ldb, 2);
          std::vector<bf16> A(Af.size()), B(Bf.size());
          to_bf16(A.data(), Af.data(), A.size());
          to_bf16(B.data(), Bf.data(), B.size());
          const auto C0 = test::random_vec<float>((size_t)M * ldc, 3);
          auto C = C0;
          const float alpha = 0.75f;
          gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
          double worst = 0;
          for (int m = 0; m < M; ++m)
            for (int j = 0; j < N; ++j) {
              double dot = 0, mag = 0;
              for (int k = 0; k < K; ++k) {
                const double a = to_float(ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]);
                const double b = to_float(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                dot += a * b;
                mag += std::abs(a * b);
              }
              const double c0 = C0[(size_t)m * ldc + j];
              const double exact = alpha * dot + beta * c0;
              const double bound = gamma * (alpha * mag + std::abs(beta * c0)) + tiny;
              worst = std::max(worst, std::abs(C[(size_t)m * ldc + j] - exact) / bound);
            }
          EXPECT_LE(worst, 1.0) << "widen=" << widen << " ta=" << ta << " tb=" << tb << " beta=" << beta;
          // columns past N in C's rows are untouched
          for (int m = 0; m < M; ++m)
            for (int j = N; j < ldc; ++j) ASSERT_EQ(C[(size_t)m * ldc + j], C0[(size_t)m * ldc + j]);
        }
  set_gemm_bf16_widen(false);
}

// float -> bf16: round to nearest, ties to even, against an independent rounding in double on
// special and random bit patterns; the array form equals the scalar one bit for bit.
TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  auto bits_of = [](float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; };
  auto from_bits = [](uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; };
  // The reference: the two bf16 neighbours of x (truncation and the next one up in magnitude), the
  // nearer chosen, ties to the one with an even last bit; inf past the largest finite value's
  // halfway point, as IEEE rounding does.
  auto reference = [&](float x) -> uint32_t {
    const uint32_t u = bits_of(x);
    if (std::isnan(x)) return 0xffffffffu;  // any NaN
    if (std::isinf(x)) return u >> 16;
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    // hi may be the infinity pattern: as a rounding candidate it stands for 2^128
    const auto value = [&](uint32_t b) {
      return (b & 0x7fffffffu) == 0x7f800000u ? std::copysign(std::ldexp(1.0, 128), double(x)) : double(from_bits(b));
    };
    const double dl = std::abs(double(x) - value(lo)), dh = std::abs(value(hi) - double(x));
    if (dl < dh) return lo >> 16;
    if (dh < dl) return hi >> 16;
    return ((lo >> 16) & 1u) ? hi >> 16 : lo >> 16;
  };
  std::vector<uint32_t> patterns = {0u, 0x80000000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                                    0x7f7f8000u, 0x7f7f7fffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                    0x7f800001u, 0xffc00001u, 0x00000001u, 0x00008000u, 0x00018000u, 0x807fffffu};
  Rng rng(5);
  for (int i = 0; i < 200000; ++i) patterns.push_back(uint32_t(rng.next_u64() >> 32));
  std::vector<float> src(patterns.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = from_bits(patterns[i]);
  std::vector<bf16> dst(src.size());
  to_bf16(dst.data(), src.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t scalar = to_bf16(src[i]).bits;
    ASSERT_EQ(dst[i].bits, scalar) << std::hex << patterns[i];
    const float back = to_float(dst[i]);
    if (std::isnan(src[i])) {
      ASSERT_TRUE(std::isnan(back)) << std::hex << patterns[i];
      ASSERT_EQ(std::signbit(back), std::signbit(src[i]));
    } else {
      ASSERT_EQ(uint32_t(scalar), reference(src[i])) << std::hex << patterns[i];
    }
  }
}
