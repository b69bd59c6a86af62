// Helpers shared by the multi-stream residual kinds HC and mHC (docs/mechanisms.md §5): the state is
// n streams of d per token, stored token-major as (N, n, d) so that each token's n×d block is
// contiguous (mHC normalises it as one vector of nd values).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
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
void project_back_rms_ng_rows(T* dx, const T* zs, const T* a, const T* WT, const T* x, const T* rstd, size_t r0, size_t r1, int P,
                              int C) {
  for (size_t r = r0; r < r1; ++r) {
    T dot = 0;
    for (int j = 0; j < P; ++j) dot += zs[r * P + j] * a[r * P + j];
    const T k = rstd[r] * dot / T(C);
    const T* xr = x + r * C;
    T* d = dx + r * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] -= k * xr[c];
  }
  // Four rows at a time share each row of Wᵀ (read from L2 once per four rows, not per row).
  for (size_t r = r0; r < r1; r += 4) {
    const size_t m = std::min<size_t>(4, r1 - r);
    T* d[4];
    for (size_t k = 0; k < 4; ++k) d[k] = dx + (r + std::min(k, m - 1)) * C;
    for (int j = 0; j < P; ++j) {
      T z[4];
      for (size_t k = 0; k < 4; ++k) z[k] = k < m ? zs[(r + k) * P + j] : T(0);
      const T* w = WT + (size_t)j * C;
      if (m == 4) {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          d[0][c] += z[0] * w[c];
          d[1][c] += z[1] * w[c];
          d[2][c] += z[2] * w[c];
          d[3][c] += z[3] * w[c];
        }
      } else {
        for (size_t k = 0; k < m; ++k)
#pragma omp simd
          for (int c = 0; c < C; ++c) d[k][c] += z[k] * w[c];
      }
    }
  }
}

template <class T>
void project_back_rms_ng(T* dx, const T* zs, const T* a, const T* WT, const T* x, const T* rstd, size_t rows, int P, int C) {
  const size_t block = 16;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r += block)
    project_back_rms_ng_rows(dx, zs, a, WT, x, rstd, r, std::min(rows, r + block), P, C);
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

// out[u] = a·B_u for u < n, B_u = B + u·stride (length C each). Four dot products run together:
// a's loads are shared and the four accumulator chains are independent (one dot at a time is bound
// by the latency of its single FMA chain).
template <class T>
void dots(T* out, const T* a, const T* B, size_t stride, int n, int C) {
  constexpr int W = 64 / sizeof(T);  // one 512-bit vector
  for (int u = 0; u < n; u += 4) {
    const int m = std::min(4, n - u);
    const T* b[4];
    for (int k = 0; k < 4; ++k) b[k] = B + (size_t)(u + std::min(k, m - 1)) * stride;
    T acc[4][W] = {};
    int c = 0;
    for (; c + W <= C; c += W) {
#pragma omp simd
      for (int j = 0; j < W; ++j) {
        const T x = a[c + j];
        acc[0][j] += x * b[0][c + j];
        acc[1][j] += x * b[1][c + j];
        acc[2][j] += x * b[2][c + j];
        acc[3][j] += x * b[3][c + j];
      }
    }
    for (int k = 0; k < m; ++k) {
      T sum = 0;
      for (int j = 0; j < W; ++j) sum += acc[k][j];
      for (int cc = c; cc < C; ++cc) sum += a[cc] * b[k][cc];
      out[u + k] = sum;
    }
  }
}

template <class T>
T dot(const T* a, const T* b, int C) {
  T out;
  dots(&out, a, b, 0, 1, C);
  return out;
}

// y = Σ_{s<n} coef[s]·X_s (+ extra_coef·extra when extra is given), X_s = X + s·stride, in passes
// over y of up to four sources each (not one pass per source).
template <class T>
void combine(T* y, const T* coef, const T* X, size_t stride, int n, int C, const T* extra = nullptr, T extra_coef = 0) {
  for (int s = 0; s < n; s += 4) {
    const int m = std::min(4, n - s);
    const T* x[4];
    T a[4];
    for (int k = 0; k < 4; ++k) {
      x[k] = X + (size_t)(s + std::min(k, m - 1)) * stride;
      a[k] = k < m ? coef[s + k] : T(0);
    }
    const bool first = s == 0;
    const T* e = first ? extra : nullptr;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      T v = (first ? T(0) : y[c]) + a[0] * x[0][c] + a[1] * x[1][c] + a[2] * x[2][c] + a[3] * x[3][c];
      if (e) v += extra_coef * e[c];
      y[c] = v;
    }
  }
}

// 1/sqrt(mean(x²) + 1e-6) of one row (RMSNorm_ng, §0), serial: called per token inside the
// kinds' parallel loops, right after the row is written, so the next sublayer's read needs no
// separate pass over the state.
template <class T>
T inv_rms(const T* x, int C) {
  constexpr int W = 64 / sizeof(T);
  T acc[4][W] = {};  // four independent accumulator chains
  int c = 0;
  for (; c + 4 * W <= C; c += 4 * W)
#pragma omp simd
    for (int j = 0; j < W; ++j) {
      acc[0][j] += x[c + j] * x[c + j];
      acc[1][j] += x[c + W + j] * x[c + W + j];
      acc[2][j] += x[c + 2 * W + j] * x[c + 2 * W + j];
      acc[3][j] += x[c + 3 * W + j] * x[c + 3 * W + j];
    }
  T sq = 0;
  for (; c < C; ++c) sq += x[c] * x[c];
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < W; ++j) sq += acc[k][j];
  return T(1.0 / std::sqrt(double(sq) / C + 1e-6));
}

// Diagnostics only (docs/mechanisms.md §8.5 for HC and mHC): replaces stream s's contribution to a
// sublayer input, u += P − w_s·X_s per token, with w_s = weight(i) (the read weight of token i) and
// P (N, C) the replacement. Never called in training.
template <class T, class Weight>
void patch_contribution(T* u, const T* P, const T* X, int s, int N, int n, int C, Weight weight) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T w = weight(i);
    const T* x = X + ((size_t)i * n + s) * C;
    const T* p = P + (size_t)i * C;
    T* y = u + (size_t)i * C;
    for (int c = 0; c < C; ++c) y[c] += p[c] - w * x[c];
  }
}

}  // namespace attnlab::streams
