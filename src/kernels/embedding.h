// Token and learned-position embedding, forward and backward: x_0 = E[tok] (+ P[pos]) of
// docs/mechanisms.md §1.1 (P only when attn.pos = learned, §1.2).
//
// Header-only templates on the scalar type `Real` (float for training, double for the
// finite-difference tests). The size letters B, T, C follow the project convention, which is why the
// scalar type is not called T.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/parallel.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// Forward.
// out (B,T,C); tokens (B,T) int32, each in [0,V); wte (V,C); wpe (Tmax,C) or nullptr.
// Token (b,t) sits at absolute position pos_offset + t (§1.1: 0 in training, the cache length with a
// KV cache); the caller guarantees pos_offset + T <= Tmax, since P is undefined beyond T_max (§1.2).
// A pure copy/add per row: the loop is its own naive reference (embedding_forward_naive below is the
// same computation written serially, kept as the test oracle).
template <class Real>
void embedding_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T, int C,
                       int pos_offset) {
  const int N = B * T;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= kParallelMinElements)
  for (int i = 0; i < N; ++i) {
    Real* o = out + (size_t)i * C;
    const Real* e = wte + (size_t)tokens[i] * C;
    if (wpe) {
      const Real* p = wpe + (size_t)(pos_offset + i % T) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward. dwte (V,C) += scatter of the rows of dout (B,T,C) by token; dwpe (Tmax,C) += the rows of
// dout by position, if dwpe is non-null. Both ACCUMULATE: with tied embeddings the head's gradient
// lands in the same dE buffer (§1.1 "accumulate into one buffer dE").
// A token repeated in the batch sends several rows to one dwte row, so threads cannot split the rows.
// They split the columns instead: every thread walks all B·T rows but only touches its own column
// range of dwte and dwpe, which needs no atomics and no scratch. The ranges are multiples of 16
// elements so that two threads rarely share a cache line.
template <class Real>
void embedding_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T, int C,
                        int pos_offset) {
  const int N = B * T;
#pragma omp parallel
  {
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = ((C + n_threads - 1) / n_threads + 15) / 16 * 16;
    const int c0 = std::min(C, thread * chunk), c1 = std::min(C, c0 + chunk);
    for (int i = 0; i < N && c0 < c1; ++i) {
      const Real* g = dout + (size_t)i * C;
      Real* e = dwte + (size_t)tokens[i] * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) e[c] += g[c];
      if (dwpe) {
        Real* p = dwpe + (size_t)(pos_offset + i % T) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) p[c] += g[c];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Naive references: the same math, serial, the oracle of tests/kernels/test_embedding.cpp.
template <class Real>
void embedding_forward_naive(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T, int C,
                             int pos_offset) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t row = (size_t)b * T + t;
        out[row * C + c] = wte[(size_t)tokens[row] * C + c] + (wpe ? wpe[(size_t)(pos_offset + t) * C + c] : Real(0));
      }
}

template <class Real>
void embedding_backward_naive(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T, int C,
                              int pos_offset) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t row = (size_t)b * T + t;
        dwte[(size_t)tokens[row] * C + c] += dout[row * C + c];
        if (dwpe) dwpe[(size_t)(pos_offset + t) * C + c] += dout[row * C + c];
      }
}

}  // namespace attnlab::kernels
