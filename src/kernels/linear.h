// Linear layer y = x·W + b, forward and backward. Matrices are stored [in, out] (docs/mechanisms.md §0
// "Vectors are rows, and matrices are stored [in, out]"); biases exist when model.bias = true (§1.1).
// Every matrix product goes through attnlab::gemm (oneDNN for float, the naive triple loop for double).
//
// Header-only templates on the scalar type `Real`.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstddef>

#include "core/gemm.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// Forward. out (N,OC) = inp (N,C) · weight (C,OC) + bias (OC); bias may be nullptr.
// With a bias, the rows of out are first set to b and the product is added on top (gemm beta = 1,
// oneDNN's sum post-op): one write-only pass instead of a read-modify-write pass after the product.
template <class Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::copy(bias, bias + OC, out + (size_t)i * OC);
  }
  gemm(false, false, N, OC, C, Real(1), inp, C, weight, OC, bias ? Real(1) : Real(0), out, OC);
}

// ---------------------------------------------------------------------------------------------
// Backward. dout (N,OC); inp (N,C); weight (C,OC).
//   dinp (N,C)     = dout · Wᵀ   WRITTEN; skipped when dinp == nullptr (e.g. nothing upstream needs it).
//   dweight (C,OC) += inpᵀ · dout  (gemm beta = 1).
//   dbias (OC)     += column sums of dout, if dbias is non-null.
// The column sums run with threads splitting the columns (each walks all rows over its own range),
// race-free without scratch.
template <class Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     int N, int C, int OC) {
  if (dinp) gemm(false, true, N, C, OC, Real(1), dout, OC, weight, OC, Real(0), dinp, C);
  gemm(true, false, C, OC, N, Real(1), inp, C, dout, OC, Real(1), dweight, OC);
  if (dbias) {
#pragma omp parallel
    {
      const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
      const int chunk = ((OC + n_threads - 1) / n_threads + 15) / 16 * 16;
      const int c0 = std::min(OC, thread * chunk), c1 = std::min(OC, c0 + chunk);
      for (int i = 0; i < N && c0 < c1; ++i) {
        const Real* dy = dout + (size_t)i * OC;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dbias[c] += dy[c];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Naive references: plain loops with double accumulators, serial. Oracles of test_linear.cpp.
template <class Real>
void linear_forward_naive(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  for (int i = 0; i < N; ++i)
    for (int o = 0; o < OC; ++o) {
      double acc = bias ? double(bias[o]) : 0.0;
      for (int c = 0; c < C; ++c) acc += double(inp[(size_t)i * C + c]) * weight[(size_t)c * OC + o];
      out[(size_t)i * OC + o] = Real(acc);
    }
}

template <class Real>
void linear_backward_naive(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                           const Real* weight, int N, int C, int OC) {
  if (dinp)
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int o = 0; o < OC; ++o) acc += double(dout[(size_t)i * OC + o]) * weight[(size_t)c * OC + o];
        dinp[(size_t)i * C + c] = Real(acc);
      }
  for (int c = 0; c < C; ++c)
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int i = 0; i < N; ++i) acc += double(inp[(size_t)i * C + c]) * dout[(size_t)i * OC + o];
      dweight[(size_t)c * OC + o] += Real(acc);
    }
  if (dbias)
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int i = 0; i < N; ++i) acc += dout[(size_t)i * OC + o];
      dbias[o] += Real(acc);
    }
}

}  // namespace attnlab::kernels
