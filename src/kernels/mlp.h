// The elementwise parts of the MLP of docs/mechanisms.md §1.1 (the matrix products are linear.h):
//   gelu:   GELU_tanh(h) = 0.5h(1+th), th = tanh(c(h+0.044715h³)), c = sqrt(2/π).
//   swiglu: out = SiLU(p)∘q with p = u·W_g, q = u·W_u; d_ff = 64·ceil(8d/192).
//
// Speed: libm's tanhf/expf are scalar calls that stop the vectorizer (glibc only offers its vector
// versions under -ffast-math), and the GELU runs on B·T·4d elements per layer. So the fast kernels
// rewrite both functions through the logistic function, which needs only exp, and compute exp with
// the inline polynomial exp_fast below, which the compiler vectorizes:
//   0.5h(1+tanh(z)) = h·σ(2z)        (since 1+tanh(z) = 2σ(2z)),
//   GELU′(h) = σ(2z) + 2h·σ(2z)(1−σ(2z))·c(1+0.134145h²)   (the §1.1 formula with 1−th² = 4σ(1−σ)).
// With e = exp(−y) and σ(y) = 1/(1+e), the complement is taken as 1−σ(y) = e·σ(y): no cancellation
// where σ → 1, unlike 1+th, 1−th² (and 1−σ) in the literal formulas, which lose all relative accuracy
// in the tails. The naive references next to each kernel are the §1.1 formulas written literally with
// std::tanh / std::exp.
//
// Header-only templates on the scalar type `Real`; for double (the finite-difference tests) exp_fast
// is std::exp, so the float polynomial is tested against the references instead.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/math.h"
#include "kernels/parallel.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// e^x, vectorizable. For float: Cody-Waite reduction x = n·ln2 + r with |r| ≤ ln2/2, a degree-7 Taylor
// polynomial for e^r (truncation ≤ (ln2/2)^8/8! ≈ 5e-9 relative, below half an fp32 ulp), and 2^n
// written straight into the exponent bits. The input is clamped to [−87, 88] so 2^n stays a normal
// number: the result saturates at e^−87 ≈ 1.6e−38 and e^88 ≈ 1.7e38 instead of reaching 0 or inf,
// which is harmless for the sigmoids below (σ = 1/(1+e) stays in (0, 1], e·σ stays finite) and keeps
// the results finite for any finite input.
// Measured: at most 7.7e-8 relative to std::exp over [−87, 88] (test_mlp.cpp, ExpFast.IsAccurate).
template <class Real>
inline Real exp_fast(Real x) {
  if constexpr (std::is_same_v<Real, float>) {
    // The clamp as bit masks: GCC 12 does not if-convert a compare-and-select of floats inside a
    // vector loop (it reports "control flow in loop" and leaves the whole GELU scalar, measured 6x
    // slower), nor vectorize fminf/fmaxf. NaN compares false both ways and passes through.
    const uint32_t below = 0u - uint32_t(x < -87.0f), above = 0u - uint32_t(x > 88.0f);
    x = std::bit_cast<float>((std::bit_cast<uint32_t>(x) & ~(below | above)) |
                             (std::bit_cast<uint32_t>(-87.0f) & below) | (std::bit_cast<uint32_t>(88.0f) & above));
    // Adding 1.5·2^23 rounds x·log2(e) to the nearest integer in the low mantissa bits.
    const float shifter = 12582912.0f;
    const float n = (x * 1.44269504088896341f + shifter) - shifter;
    // ln2 split in a part exact in few bits (n·hi is exact for |n| ≤ 2^9) and the remainder.
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    const float p = exp_reduced_poly(r);
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    return p * std::bit_cast<float>(bits);
  } else {
    return std::exp(x);
  }
}

inline constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/π), §1.1
inline constexpr double kGeluA = 0.044715;            // §1.1 (and 3·0.044715 = 0.134145)

// ---------------------------------------------------------------------------------------------
// GELU (tanh form) forward: out (n) = GELU_tanh(inp (n)). Elementwise; out may alias inp.
template <class Real>
void gelu_forward(Real* out, const Real* inp, size_t n) {
  const Real two_c = Real(2 * kGeluC), a = Real(kGeluA);
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) {
    const Real h = inp[i];
    out[i] = h / (Real(1) + exp_fast(-two_c * (h + a * h * h * h)));
  }
}

// The same values rounded to bf16 (train.precision = bf16: the activation is only the bf16 input of
// the MLP's output projection), in blocks of kBlock through an L1 tile (store_row), no float copy.
inline void gelu_forward(bf16* out, const float* inp, size_t n) {
  constexpr size_t kBlock = 1024;
  const float two_c = float(2 * kGeluC), a = float(kGeluA);
  const long blocks = long((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (long bi = 0; bi < blocks; ++bi) {
    const size_t i0 = size_t(bi) * kBlock;
    const float* h = inp + i0;
    store_row(out + i0, int(std::min(kBlock, n - i0)),
              [&](int j) { return h[j] / (1.0f + exp_fast(-two_c * (h[j] + a * h[j] * h[j] * h[j]))); });
  }
}

// GELU backward: dinp (n) = dout (n) ∘ GELU′(inp (n)), WRITTEN. dinp may alias dout.
template <class Real>
void gelu_backward(Real* dinp, const Real* dout, const Real* inp, size_t n) {
  const Real c = Real(kGeluC), two_c = Real(2 * kGeluC), a = Real(kGeluA), a3 = Real(3 * kGeluA);
#pragma omp parallel for simd schedule(static) if (parallel : n >= kParallelMinElements)
  for (size_t i = 0; i < n; ++i) {
    const Real h = inp[i];
    const Real e = exp_fast(-two_c * (h + a * h * h * h));
    const Real s = Real(1) / (Real(1) + e);  // σ(2z); 1 − σ(2z) = e·s
    const Real grad = s + Real(2) * h * s * (e * s) * c * (Real(1) + a3 * h * h);
    dinp[i] = dout[i] * grad;
  }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU forward. gate_up (N, 2·Hd) holds [p = u·W_g | q = u·W_u] per row (one GEMM against the
// concatenated [W_g | W_u] produces it); out (N,Hd) = SiLU(p)∘q, SiLU(p) = p·σ(p).
// Out = bf16: rounded through an L1 tile, as gelu_forward's bf16 form.
template <class Real, class Out = Real>
void swiglu_forward(Out* out, const Real* gate_up, int N, int Hd) {
#pragma omp parallel for schedule(static) if ((size_t)N * Hd >= kParallelMinElements)
  for (int i = 0; i < N; ++i) {
    const Real* p = gate_up + (size_t)i * 2 * Hd;
    const Real* q = p + Hd;
    store_row(out + (size_t)i * Hd, Hd, [&](int j) { return p[j] / (Real(1) + exp_fast(-p[j])) * q[j]; });
  }
}

// SwiGLU backward. dgate_up (N, 2·Hd) WRITTEN from dout (N,Hd): dq = dout∘SiLU(p),
// dp = dout∘q∘SiLU′(p), SiLU′(p) = σ(p)(1 + p(1−σ(p))) (§0, §1.1). gate_up (N, 2·Hd) from the forward.
template <class Real>
void swiglu_backward(Real* dgate_up, const Real* dout, const Real* gate_up, int N, int Hd) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const Real* p = gate_up + (size_t)i * 2 * Hd;
    const Real* q = p + Hd;
    const Real* dy = dout + (size_t)i * Hd;
    Real* dp = dgate_up + (size_t)i * 2 * Hd;
    Real* dq = dp + Hd;
#pragma omp simd
    for (int j = 0; j < Hd; ++j) {
      const Real e = exp_fast(-p[j]);
      const Real s = Real(1) / (Real(1) + e);  // σ(p); 1 − σ(p) = e·s
      dq[j] = dy[j] * p[j] * s;
      dp[j] = dy[j] * q[j] * s * (Real(1) + p[j] * (e * s));
    }
  }
}

// SwiGLU hidden width d_ff = 64·ceil(8d/192) (§1.1; 2048 for d = 768): about (2/3)·4d, rounded up to a
// multiple of 64 so the GEMM tiles stay full.
inline int swiglu_hidden(int d) { return 64 * ((8 * d + 191) / 192); }

// ---------------------------------------------------------------------------------------------
// Naive references: the §1.1 formulas literally (std::tanh, std::exp), serial. Oracles of test_mlp.cpp.
template <class Real>
void gelu_forward_naive(Real* out, const Real* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Real h = inp[i];
    const Real th = std::tanh(Real(kGeluC) * (h + Real(kGeluA) * h * h * h));
    out[i] = Real(0.5) * h * (Real(1) + th);
  }
}

template <class Real>
void gelu_backward_naive(Real* dinp, const Real* dout, const Real* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const Real h = inp[i];
    const Real th = std::tanh(Real(kGeluC) * (h + Real(kGeluA) * h * h * h));
    const Real grad = Real(0.5) * (Real(1) + th) +
                      Real(0.5) * h * (Real(1) - th * th) * Real(kGeluC) * (Real(1) + Real(3 * kGeluA) * h * h);
    dinp[i] = dout[i] * grad;
  }
}

template <class Real>
void swiglu_forward_naive(Real* out, const Real* gate_up, int N, int Hd) {
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Hd; ++j) {
      const Real p = gate_up[(size_t)i * 2 * Hd + j], q = gate_up[(size_t)i * 2 * Hd + Hd + j];
      const Real sig = Real(1) / (Real(1) + std::exp(-p));
      out[(size_t)i * Hd + j] = p * sig * q;
    }
}

template <class Real>
void swiglu_backward_naive(Real* dgate_up, const Real* dout, const Real* gate_up, int N, int Hd) {
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < Hd; ++j) {
      const Real p = gate_up[(size_t)i * 2 * Hd + j], q = gate_up[(size_t)i * 2 * Hd + Hd + j];
      const Real dy = dout[(size_t)i * Hd + j];
      const Real sig = Real(1) / (Real(1) + std::exp(-p));
      dgate_up[(size_t)i * 2 * Hd + j] = dy * q * sig * (Real(1) + p * (Real(1) - sig));
      dgate_up[(size_t)i * 2 * Hd + Hd + j] = dy * p * sig;
    }
}

}  // namespace attnlab::kernels
