// Small shared math for the kernels.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/simd.h"

namespace attnlab::kernels {

// e^r for |r| <= ln2/2 (after Cody-Waite range reduction x = n·ln2 + r): the degree-7 Taylor
// polynomial, truncation (ln2/2)^8/8! ≈ 5e-9 relative, below half an fp32 ulp. Plain multiply-adds
// so that callers' loops vectorize (glibc's expf does not without -ffast-math). The callers build
// 2^n in the exponent bits and choose their own range handling: exp_fast (mlp.h) saturates,
// exp_nonpositive (below; the cross-entropy and the batched Sinkhorn) flushes to exactly 0 below −87.3.
inline float exp_reduced_poly(float r) {
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

// e^x for x <= 0 (softmax logits after the max is subtracted), written so the compiler vectorizes it
// (glibc's expf does not vectorize without -ffast-math). Range reduction x = n·ln2 + r with
// |r| <= ln2/2, then a degree-7 Taylor polynomial (truncation < 5e-9 relative) and 2^n built in the
// exponent bits. Max relative error vs double exp over [-87, 0]: 7.9e-8, under one float ulp
// (test ExpNonPositive).
// Inputs below −87.3 (where 2^n would leave the normal range) give exactly 0.
inline float exp_nonpositive(float x) {
  constexpr float lo = -87.3f;
  constexpr float log2e = 1.44269504088896341f;
  constexpr float ln2_hi = 0.693145751953125f;     // ln2 rounded to 16 bits: n·ln2_hi is exact
  constexpr float ln2_lo = 1.42860682030941723e-6f;
  // Adding 1.5·2^23 rounds x·log2e to the nearest integer n and leaves n in the low mantissa bits,
  // so n is read back with integer ops only (a float→int cast of NaN would be undefined behaviour).
  constexpr float shifter = 0x1.8p23f;
  const float t = x * log2e + shifter;
  const float n = t - shifter;
  const float r = (x - n * ln2_hi) - n * ln2_lo;
  const float p = exp_reduced_poly(r);
  // n + 127, in [1, 127] for x >= lo (other x are replaced by 0 below).
  const uint32_t biased = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(shifter) + 127u;
  const float two_n = std::bit_cast<float>(biased << 23);
  // Underflow (x < lo) is zeroed with a bit mask: clamping x or a ?: select lets GCC fold that path
  // to a constant and branch on it, which stops the loop from vectorizing (measured 6x slower).
  // NaN compares false, so !(x < lo) keeps it: a diverged run still reports a NaN loss.
  const uint32_t keep = 0u - (uint32_t)!(x < lo);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * two_n) & keep);
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// out[k] = a·b[k] (C terms each) for k < m ≤ 4: the four products share a's loads and run as eight
// independent accumulator chains of whole vectors (one dot product alone is bound by its FMA
// chain's latency), reduced across lanes once at the end; b[k] for k ≥ m may repeat a row (its sum
// is not stored). Simd vectors (kernels/simd.h) rather than an `omp simd` loop over a 16-float
// block: GCC 12 compiled that form to about half this speed with the data in L1.
template <class Real>
void dots4(Real* out, const Real* a, const Real* const* b, int m, int C) {
  using L = Simd<Real>;
  using V = typename L::V;
  constexpr int W = L::W;
  V acc[4][2] = {};
  int c = 0;
  for (; c + 2 * W <= C; c += 2 * W) {
    const V x0 = L::load(a + c), x1 = L::load(a + c + W);
    for (int k = 0; k < 4; ++k) {
      acc[k][0] += x0 * L::load(b[k] + c);
      acc[k][1] += x1 * L::load(b[k] + c + W);
    }
  }
  for (int k = 0; k < m; ++k) {
    const V v = acc[k][0] + acc[k][1];
    Real sum = 0;
    for (int j = 0; j < W; ++j) sum += v[j];
    for (int cc = c; cc < C; ++cc) sum += a[cc] * b[k][cc];
    out[k] = sum;
  }
}

}  // namespace attnlab::kernels
