// Helpers shared by the multi-stream residual kinds HC and mHC (MECHANISMS.md §5): the state is
// n streams of d per token, stored token-major as (N, n, d) so that each token's n×d block is
// contiguous (mHC normalises it as one vector of nd values).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace attnlab::streams {

// out[c] += Σ_i rows[i·ld + c] for c < M: per-token parameter-gradient contributions summed over
// tokens. Each thread owns a range of columns and walks every row: race-free, without scratch.
template <class T>
void add_column_sums(T* out, const T* rows, int N, int M, int ld) {
#pragma omp parallel
  {
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = (M + n_threads - 1) / n_threads;
    const int c0 = std::min(M, thread * chunk), c1 = std::min(M, c0 + chunk);
    for (int c = c0; c < c1; ++c) {
      T sum = 0;
      for (int i = 0; i < N; ++i) sum += rows[(size_t)i * ld + c];
      out[c] += sum;
    }
  }
}

// The maps' backward into the state, in one pass per row (§0, §5.2, §5.3): with the forward
// a = rstd·(x·W) (rows, P) of the projection W (C, P), and zs = rstd·dL/da (rows, P), it adds
// RMSNorm_ng's backward of dx̄ = dL/da·Wᵀ:
//   dx += (dx̄ − x̄(x̄·dx̄)/C)·rstd = zs·Wᵀ − k·x,  k = rstd²·(x·(zs·Wᵀ))/C = rstd·(zs·a)/C,
// so x·Y needs no second pass over the row (x·Wᵀ's columns are a/rstd). WT (P, C) is W transposed.
// dx, x (rows, C); rstd (rows). Replaces a (rows, P)×(P, C) GEMM (K = P ≤ 24, memory-bound, and
// a full write and re-read of its output) followed by a separate norm backward.
template <class T>
void project_back_rms_ng(T* dx, const T* zs, const T* a, const T* WT, const T* x, const T* rstd, size_t rows, int P, int C) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; ++r) {
    const T* z = zs + r * P;
    const T* ar = a + r * P;
    T dot = 0;
    for (int j = 0; j < P; ++j) dot += z[j] * ar[j];
    const T k = rstd[r] * dot / T(C);
    const T* xr = x + r * C;
    T* d = dx + r * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] -= k * xr[c];
    for (int j = 0; j < P; ++j) {
      const T zj = z[j];
      const T* w = WT + (size_t)j * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) d[c] += zj * w[c];
    }
  }
}

// Expand (§5.1): every stream of X (N, n, C) starts as e (N, C).
template <class T>
void expand(T* X, const T* e, int N, int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i)
    for (int s = 0; s < n; ++s) std::copy(e + (size_t)i * C, e + (size_t)(i + 1) * C, X + ((size_t)i * n + s) * C);
}

// Collapse (§5.1): x (N, C) = Σ_s X_s.
template <class T>
void collapse(T* x, const T* X, int N, int n, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    T* y = x + (size_t)i * C;
    const T* X0 = X + (size_t)i * n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) y[c] = X0[c];
    for (int s = 1; s < n; ++s) {
      const T* Xs = X0 + (size_t)s * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] += Xs[c];
    }
  }
}

// dX_s = dx for every stream (the backward of collapse), written.
template <class T>
void broadcast(T* dX, const T* dx, int N, int n, int C) { expand(dX, dx, N, n, C); }

template <class T>
T dot(const T* a, const T* b, int C) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

}  // namespace attnlab::streams
