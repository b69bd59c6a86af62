// Sinkhorn–Knopp projection of mHC's residual mixing logits onto (nearly) doubly stochastic
// matrices, and its unrolled backward (docs/mechanisms.md §5.3). One n×n matrix per call (per token):
//   M⁰ = exp(H̃ − max H̃);  `iters` times { M_su /= Σ_s' M_s'u  (columns);  M_su /= Σ_u' M_su'  (rows) }
// Rows end exactly normalised (to rounding); columns only approximately (§5.3 Sinkhorn numerics).
// Denominators are guarded with max(·, 1e-30).
// Backward [Derived]: recompute M⁰…M^{2·iters} from the logits (the caller's work buffer holds them),
// then walk back through each normalisation N = M/r (r the row or column sum):
//   dM = (dN − Σ_along dN∘N)/r ;   exp: dH̃ = dM⁰∘M⁰ (the max shift is a constant: exact, Σ dM⁰∘M⁰ = 0).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/math.h"

namespace attnlab::kernels {

inline constexpr double kSinkhornFloor = 1e-30;
inline constexpr int kSinkhornMaxGroup = 16;  // matrices per batched call

// Entries of work memory sinkhorn_backward needs: every iterate M⁰…M^{2·iters}, and the running gradient.
inline size_t sinkhorn_work_size(int n, int iters) { return (size_t)(2 * iters + 2) * n * n; }

namespace sinkhorn_detail {
// dst = src with its columns (by_rows = false) or rows (true) divided by their sums.
template <class Real>
void normalize(Real* dst, const Real* src, int n, bool by_rows) {
  for (int a = 0; a < n; ++a) {
    Real sum = 0;
    for (int b = 0; b < n; ++b) sum += by_rows ? src[a * n + b] : src[b * n + a];
    const Real inv = Real(1) / std::max(sum, Real(kSinkhornFloor));
    for (int b = 0; b < n; ++b) {
      const int i = by_rows ? a * n + b : b * n + a;
      dst[i] = src[i] * inv;
    }
  }
}

template <class Real>
void exp_shifted(Real* m, const Real* logits, int n) {
  Real mx = logits[0];
  for (int i = 1; i < n * n; ++i) mx = std::max(mx, logits[i]);
  for (int i = 0; i < n * n; ++i) m[i] = std::exp(logits[i] - mx);
}
}  // namespace sinkhorn_detail

namespace batch_detail {
// Entry k of all kSinkhornMaxGroup matrices is G = 16 consecutive values, processed as G/W vectors
// of W lanes (Simd<Real>, kernels/simd.h). Vector types rather than `omp simd` loops over the group:
// GCC 12 made those 16-iteration loops, nested in the loops over n, scalar code or gathers (several
// times slower than this for the forward and backward of n = 4, 20 iterations).

// dst = src with its columns (by_rows = false) or rows (true) divided by their sums, all matrices.
template <class Real>
void normalize(Real* dst, const Real* src, int n, bool by_rows) {
  using L = Simd<Real>;
  static_assert(kSinkhornMaxGroup % L::W == 0);
  constexpr int G = kSinkhornMaxGroup, Chunks = G / L::W;
  const typename L::V floor = L::set1(Real(kSinkhornFloor));
  for (int a = 0; a < n; ++a) {
    typename L::V inv[Chunks] = {};
    for (int b = 0; b < n; ++b) {
      const Real* x = src + (size_t)(by_rows ? a * n + b : b * n + a) * G;
      for (int c = 0; c < Chunks; ++c) inv[c] += L::load(x + c * L::W);
    }
    for (int c = 0; c < Chunks; ++c) inv[c] = Real(1) / L::max(inv[c], floor);
    for (int b = 0; b < n; ++b) {
      const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * G;
      for (int c = 0; c < Chunks; ++c) L::store(dst + i + c * L::W, L::load(src + i + c * L::W) * inv[c]);
    }
  }
}

// m = exp(logits − max over each matrix's entries); m may alias logits.
template <class Real>
void exp_shifted(Real* m, const Real* logits, int nn) {
  using L = Simd<Real>;
  constexpr int G = kSinkhornMaxGroup, Chunks = G / L::W;
  typename L::V mx[Chunks];
  for (int c = 0; c < Chunks; ++c) mx[c] = L::load(logits + c * L::W);
  for (int k = 1; k < nn; ++k)
    for (int c = 0; c < Chunks; ++c) mx[c] = L::max(mx[c], L::load(logits + (size_t)k * G + c * L::W));
  for (int k = 0; k < nn; ++k) {
    alignas(64) Real x[G];
    for (int c = 0; c < Chunks; ++c) L::store(x + c * L::W, L::load(logits + (size_t)k * G + c * L::W) - mx[c]);
#pragma omp simd
    for (int t = 0; t < G; ++t) x[t] = exp_nonpositive(x[t]);
    std::memcpy(m + (size_t)k * G, x, sizeof x);
  }
}
}  // namespace batch_detail

// out (n,n) = SK(logits (n,n)); out may alias logits.
template <class Real>
void sinkhorn_forward(Real* out, const Real* logits, int n, int iters) {
  sinkhorn_detail::exp_shifted(out, logits, n);
  for (int k = 0; k < iters; ++k) {
    sinkhorn_detail::normalize(out, out, n, false);
    sinkhorn_detail::normalize(out, out, n, true);
  }
}

// dlogits (n,n) += the gradient through SK of dout (n,n). work: sinkhorn_work_size(n, iters) entries.
template <class Real>
void sinkhorn_backward(Real* dlogits, const Real* dout, const Real* logits, int n, int iters, Real* work) {
  const int nn = n * n;
  sinkhorn_detail::exp_shifted(work, logits, n);
  for (int k = 0; k < 2 * iters; ++k) sinkhorn_detail::normalize(work + (k + 1) * nn, work + k * nn, n, k % 2 == 1);
  // g holds dLoss/d(current iterate); walk back from M^{2·iters}. Rows sums are over b with a = row.
  Real* g = work + (size_t)(2 * iters + 1) * nn;
  for (int i = 0; i < nn; ++i) g[i] = dout[i];
  for (int k = 2 * iters - 1; k >= 0; --k) {
    const Real* in = work + k * nn;         // M^k
    const Real* out = work + (k + 1) * nn;  // M^{k+1} = M^k normalised
    const bool by_rows = k % 2 == 1;
    for (int a = 0; a < n; ++a) {
      Real sum = 0, dot = 0;
      for (int b = 0; b < n; ++b) {
        const int i = by_rows ? a * n + b : b * n + a;
        sum += in[i];
        dot += g[i] * out[i];
      }
      const Real inv = Real(1) / std::max(sum, Real(kSinkhornFloor));
      for (int b = 0; b < n; ++b) {
        const int i = by_rows ? a * n + b : b * n + a;
        g[i] = (g[i] - dot) * inv;
      }
    }
  }
  for (int i = 0; i < nn; ++i) dlogits[i] += g[i] * work[i];
}

// ---------------------------------------------------------------------------------------------
// Batched over the tokens of a group: G = kSinkhornMaxGroup matrices stored entry-major, m[k·G + g]
// for entry k = s·n + u of matrix g, so that every step is one SIMD operation across the group. The per-token
// functions above are the same arithmetic one matrix at a time (and the tests' reference), except
// that for float the batched exp is the vectorizable exp_nonpositive (kernels/math.h, within 7.9e-8
// relative of exp; glibc's expf would leave that loop scalar: 16 calls per token, most of the
// forward's time). For double both use std::exp.

// m (n², kSinkhornMaxGroup): logits in, SK(logits) out, for all matrices of the group.
template <class Real>
void sinkhorn_forward_batch(Real* m, int n, int iters) {
  batch_detail::exp_shifted(m, m, n * n);
  for (int k = 0; k < iters; ++k) {
    batch_detail::normalize(m, m, n, false);
    batch_detail::normalize(m, m, n, true);
  }
}

// dlogits (n², G) += the gradient through SK of dout (n², G), for logits (n², G), G = kSinkhornMaxGroup.
// work: sinkhorn_work_size(n, iters)·G entries.
template <class Real>
void sinkhorn_backward_batch(Real* dlogits, const Real* dout, const Real* logits, int n, int iters, Real* work) {
  using L = Simd<Real>;
  using V = typename L::V;
  constexpr int G = kSinkhornMaxGroup, W = L::W, Chunks = G / W;
  const int nn = n * n;
  const size_t step = (size_t)nn * G;
  batch_detail::exp_shifted(work, logits, nn);
  for (int k = 0; k < 2 * iters; ++k) batch_detail::normalize(work + (k + 1) * step, work + k * step, n, k % 2 == 1);
  Real* g = work + (size_t)(2 * iters + 1) * step;
  std::copy(dout, dout + step, g);
  const V floor = L::set1(Real(kSinkhornFloor));
  for (int k = 2 * iters - 1; k >= 0; --k) {
    const Real* in = work + k * step;
    const Real* out = work + (k + 1) * step;
    const bool by_rows = k % 2 == 1;
    for (int a = 0; a < n; ++a) {
      V sum[Chunks] = {}, dot[Chunks] = {};
      for (int b = 0; b < n; ++b) {
        const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * G;
        for (int c = 0; c < Chunks; ++c) {
          sum[c] += L::load(in + i + c * W);
          dot[c] += L::load(g + i + c * W) * L::load(out + i + c * W);
        }
      }
      for (int c = 0; c < Chunks; ++c) sum[c] = Real(1) / L::max(sum[c], floor);
      for (int b = 0; b < n; ++b) {
        const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * G;
        for (int c = 0; c < Chunks; ++c) L::store(g + i + c * W, (L::load(g + i + c * W) - dot[c]) * sum[c]);
      }
    }
  }
  for (size_t i = 0; i < step; i += W) L::store(dlogits + i, L::load(dlogits + i) + L::load(g + i) * L::load(work + i));
}

// Naive reference in double: the same iteration written plainly, returning the final matrix.
inline std::vector<double> sinkhorn_naive(const std::vector<double>& logits, int n, int iters) {
  double mx = -INFINITY;
  for (double x : logits) mx = std::max(mx, x);
  std::vector<double> m(n * n);
  for (int i = 0; i < n * n; ++i) m[i] = std::exp(logits[i] - mx);
  for (int k = 0; k < iters; ++k) {
    for (int u = 0; u < n; ++u) {
      double c = 0;
      for (int s = 0; s < n; ++s) c += m[s * n + u];
      for (int s = 0; s < n; ++s) m[s * n + u] /= std::max(c, kSinkhornFloor);
    }
    for (int s = 0; s < n; ++s) {
      double r = 0;
      for (int u = 0; u < n; ++u) r += m[s * n + u];
      for (int u = 0; u < n; ++u) m[s * n + u] /= std::max(r, kSinkhornFloor);
    }
  }
  return m;
}

}  // namespace attnlab::kernels
