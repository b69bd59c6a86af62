// Small shared math for the kernels.
#pragma once

namespace attnlab::kernels {

// e^r for |r| <= ln2/2 (after Cody-Waite range reduction x = n·ln2 + r): the degree-7 Taylor
// polynomial, truncation (ln2/2)^8/8! ≈ 5e-9 relative, below half an fp32 ulp. Plain multiply-adds
// so that callers' loops vectorize (glibc's expf does not without -ffast-math). The callers build
// 2^n in the exponent bits and choose their own range handling: exp_fast (mlp.h) saturates,
// exp_nonpositive (cross_entropy.h) flushes to exactly 0 below −87.3.
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

}  // namespace attnlab::kernels
