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
#include <vector>

namespace attnlab::kernels {

inline constexpr double kSinkhornFloor = 1e-30;
inline constexpr int kSinkhornMaxGroup = 16;  // matrices per batched call (ld ≤ this)

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
template <class Real>
void normalize(Real* dst, const Real* src, int n, int ld, bool by_rows) {
  for (int a = 0; a < n; ++a) {
    Real inv[kSinkhornMaxGroup];
    for (int t = 0; t < ld; ++t) inv[t] = 0;
    for (int b = 0; b < n; ++b) {
      const Real* x = src + (size_t)(by_rows ? a * n + b : b * n + a) * ld;
#pragma omp simd
      for (int t = 0; t < ld; ++t) inv[t] += x[t];
    }
#pragma omp simd
    for (int t = 0; t < ld; ++t) inv[t] = Real(1) / std::max(inv[t], Real(kSinkhornFloor));
    for (int b = 0; b < n; ++b) {
      const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * ld;
#pragma omp simd
      for (int t = 0; t < ld; ++t) dst[i + t] = src[i + t] * inv[t];
    }
  }
}

template <class Real>
void exp_shifted(Real* m, const Real* logits, int nn, int ld) {
  Real mx[kSinkhornMaxGroup];
  for (int t = 0; t < ld; ++t) mx[t] = logits[t];
  for (int k = 1; k < nn; ++k)
#pragma omp simd
    for (int t = 0; t < ld; ++t) mx[t] = std::max(mx[t], logits[(size_t)k * ld + t]);
  for (int k = 0; k < nn; ++k)
#pragma omp simd
    for (int t = 0; t < ld; ++t) m[(size_t)k * ld + t] = std::exp(logits[(size_t)k * ld + t] - mx[t]);
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
// Batched over the tokens of a group: `ld` matrices stored entry-major, m[k·ld + g] for entry
// k = s·n + u of matrix g, so that every step is one SIMD operation across the group. The per-token
// functions above are the same arithmetic one matrix at a time (and the tests' reference).

// m (n², ld): logits in, SK(logits) out, for all ld matrices.
template <class Real>
void sinkhorn_forward_batch(Real* m, int n, int iters, int ld) {
  const int nn = n * n;
  batch_detail::exp_shifted(m, m, nn, ld);
  for (int k = 0; k < iters; ++k) {
    batch_detail::normalize(m, m, n, ld, false);
    batch_detail::normalize(m, m, n, ld, true);
  }
}

// dlogits (n², ld) += the gradient through SK of dout (n², ld), for logits (n², ld).
// work: sinkhorn_work_size(n, iters)·ld entries.
template <class Real>
void sinkhorn_backward_batch(Real* dlogits, const Real* dout, const Real* logits, int n, int iters, int ld, Real* work) {
  const int nn = n * n;
  const size_t step = (size_t)nn * ld;
  batch_detail::exp_shifted(work, logits, nn, ld);
  for (int k = 0; k < 2 * iters; ++k) batch_detail::normalize(work + (k + 1) * step, work + k * step, n, ld, k % 2 == 1);
  Real* g = work + (size_t)(2 * iters + 1) * step;
  std::copy(dout, dout + step, g);
  for (int k = 2 * iters - 1; k >= 0; --k) {
    const Real* in = work + k * step;
    const Real* out = work + (k + 1) * step;
    const bool by_rows = k % 2 == 1;
    for (int a = 0; a < n; ++a) {
      Real sum[kSinkhornMaxGroup], dot[kSinkhornMaxGroup];
      for (int t = 0; t < ld; ++t) sum[t] = dot[t] = 0;
      for (int b = 0; b < n; ++b) {
        const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * ld;
#pragma omp simd
        for (int t = 0; t < ld; ++t) {
          sum[t] += in[i + t];
          dot[t] += g[i + t] * out[i + t];
        }
      }
#pragma omp simd
      for (int t = 0; t < ld; ++t) sum[t] = Real(1) / std::max(sum[t], Real(kSinkhornFloor));
      for (int b = 0; b < n; ++b) {
        const size_t i = (size_t)(by_rows ? a * n + b : b * n + a) * ld;
#pragma omp simd
        for (int t = 0; t < ld; ++t) g[i + t] = (g[i + t] - dot[t]) * sum[t];
      }
    }
  }
#pragma omp simd
  for (size_t i = 0; i < step; ++i) dlogits[i] += g[i] * work[i];
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
