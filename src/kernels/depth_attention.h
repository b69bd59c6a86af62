// The depth-attention primitive of docs/mechanisms.md §4.1 (AttnRes, §4; DAR, §6), per token (row):
//   ρ_r = sqrt(mean(K_r²) + 1e-6);  k_r = K_r/ρ_r;  s_r = w·k_r;  a = softmax_r(s);  out = Σ_r a_r V_r
// over R candidates. Keys and values are separate candidate lists because DAR takes them from
// different streams; AttnRes passes the same list twice. Backward [Derived, §4.1]:
//   e_r = dout·V_r;  ds_r = a_r (e_r − Σ_r' a_r' e_r');  dw += Σ_tok Σ_r ds_r k_r
//   dV_r += a_r dout;  dK_r += (ds_r/ρ_r)(w − (s_r/C) k_r)           (RMSNorm_ng backward, §0)
//
// Candidates are given as arrays of R row pointers ((N, C) each) plus, per key candidate, its
// inverse RMS 1/ρ_r (N): a completed history entry never changes, so its 1/ρ is computed once when
// it is appended (§4.4) by rms_inverse() and shared by every later sublayer. Header-only templates
// on the scalar type (float for training, double for the finite-difference tests); rows run in
// parallel, dw is reduced over rows with the columns split among threads (no scratch, no races).
//
// The row form (rms_inverse_row, depth_softmax_row) is what the whole-matrix kernels do per row,
// for callers that fuse their own work around each row (DAR's two targets per read, §6.2): the
// same code, so the same bits.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/math.h"

namespace attnlab::kernels {

inline constexpr double kDepthKeyEps = 1e-6;  // RMSNorm_ng ε (§0)

// 1/sqrt(mean(x²) + 1e-6) of one row x (C): the key normalisation (RMSNorm_ng, no gain).
template <class Real>
inline Real rms_inverse_row(const Real* x, int C) {
  Real sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; ++c) sq += x[c] * x[c];
  return Real(1.0 / std::sqrt(double(sq) / C + kDepthKeyEps));
}

// inv_rms (N) = 1/sqrt(mean(x²) + 1e-6) of each row of x (N, C).
template <class Real>
void rms_inverse(Real* inv_rms, const Real* x, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) inv_rms[i] = rms_inverse_row(x + (size_t)i * C, C);
}

namespace depth_detail {
// out[r] = a·(rows[r] + off) for r < R, four candidates at a time (kernels::dots4).
template <class Real>
void row_dots(Real* out, const Real* a, const Real* const* rows, size_t off, int R, int C) {
  for (int r = 0; r < R; r += 4) {
    const int m = std::min(4, R - r);
    const Real* b[4];
    for (int k = 0; k < 4; ++k) b[k] = rows[r + std::min(k, m - 1)] + off;
    dots4(out + r, a, b, m, C);
  }
}
}  // namespace depth_detail

// Row i of the forward's weights: a (R) = softmax_r(w·K_r[i]·(1/ρ_r[i])), max-subtracted, no
// temperature (§4.1); the logits s_r too when `logits` is given (DAR keeps them for its key path).
// keys: R pointers to (N,C); key_inv_rms: R pointers to (N); w (C).
// noipa (not inlined, not cloned for constant arguments): one compiled body serves the whole-matrix
// forward and every row-form caller, so they agree bit for bit whatever the caller knows. Specialised
// where R is a constant, the compiler unrolls the loops, keeps a[r] in registers and may contract
// a[r]·(1/ρ_r) − max into one FMA (one rounding fewer): that happened on an Intel Xeon (Sapphire
// Rapids, g++ 12, -march=native; noinline alone still let it clone the function for R = 6), not on
// AMD Zen 5.
template <class Real>
[[gnu::noipa]] void depth_softmax_row(Real* a, Real* logits, const Real* const* keys, const Real* const* key_inv_rms, const Real* w,
                              size_t i, int R, int C) {
  Real mx = -INFINITY;
  depth_detail::row_dots(a, w, keys, i * C, R, C);
  for (int r = 0; r < R; ++r) {
    a[r] *= key_inv_rms[r][i];
    mx = std::max(mx, a[r]);
  }
  if (logits)
    for (int r = 0; r < R; ++r) logits[r] = a[r];
  Real z = 0;
  for (int r = 0; r < R; ++r) z += (a[r] = std::exp(a[r] - mx));
  const Real inv_z = Real(1) / z;
  for (int r = 0; r < R; ++r) a[r] *= inv_z;
}

// out (N,C); weights a (N,R), saved for the backward; keys, values: R pointers to (N,C);
// key_inv_rms: R pointers to (N); w (C). R >= 1.
template <class Real>
void depth_attention_forward(Real* out, Real* weights, const Real* const* keys, const Real* const* key_inv_rms,
                             const Real* const* values, const Real* w, int N, int R, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    Real* a = weights + (size_t)i * R;
    const size_t row = (size_t)i * C;
    depth_softmax_row<Real>(a, nullptr, keys, key_inv_rms, w, (size_t)i, R, C);
    Real* y = out + row;
    for (int r = 0; r < R; r += 4) {  // y = Σ_r a_r V_r, four candidates per pass over y
      const int m = std::min(4, R - r);
      const Real* v[4];
      Real c4[4];
      for (int k = 0; k < 4; ++k) {
        v[k] = values[r + std::min(k, m - 1)] + row;
        c4[k] = k < m ? a[r + k] : Real(0);
      }
      const bool first = r == 0;
#pragma omp simd
      for (int c = 0; c < C; ++c)
        y[c] = (first ? Real(0) : y[c]) + c4[0] * v[0][c] + c4[1] * v[1][c] + c4[2] * v[2][c] + c4[3] * v[3][c];
    }
  }
}

// Accumulates (+=) into dkeys, dvalues (R pointers to (N,C); a key and a value gradient may be the
// same buffer) and dw (C). dout (N,C); weights (N,R) from the forward; scratch (N,R).
// dw sums over rows. With dw_partials (partial_threads × C entries) each thread accumulates its rows'
// share while the keys are in cache, and the partials are summed at the end; without, a second pass
// over the keys splits the columns among threads. Both are race-free; the first reads the keys once.
template <class Real>
void depth_attention_backward(Real* const* dkeys, Real* const* dvalues, Real* dw, Real* scratch, const Real* dout,
                              const Real* weights, const Real* const* keys, const Real* const* key_inv_rms,
                              const Real* const* values, const Real* w, int N, int R, int C, Real* dw_partials = nullptr,
                              int partial_threads = 0) {
  const bool fused = dw_partials != nullptr;
  const int n_threads = fused ? std::min(partial_threads, omp_get_max_threads()) : omp_get_max_threads();
#pragma omp parallel num_threads(n_threads)
  {
    Real* part = fused ? dw_partials + (size_t)omp_get_thread_num() * C : nullptr;
    if (fused)
      for (int c = 0; c < C; ++c) part[c] = 0;
    // Pass 1 (rows): ds_r/ρ_r into scratch, value and key gradients of every candidate.
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const Real* a = weights + (size_t)i * R;
      Real* g = scratch + (size_t)i * R;
      const size_t row = (size_t)i * C;
      const Real* dy = dout + row;
      Real mean_e = 0;
      depth_detail::row_dots(g, dy, values, row, R, C);  // e_r = dout·V_r
      for (int r = 0; r < R; ++r) mean_e += a[r] * g[r];  // = dout·out
      Real wk[64];  // w·K_r, four at a time when the candidates are few (always, for L ≤ 31 with K = 1)
      const bool few = R <= 64;
      if (few) depth_detail::row_dots(wk, w, keys, row, R, C);
      for (int r = 0; r < R; ++r) {
        const Real ar = a[r];
        Real* dv = dvalues[r] + row;
#pragma omp simd
        for (int c = 0; c < C; ++c) dv[c] += ar * dy[c];
        const Real inv_rho = key_inv_rms[r][i];
        const Real ds = ar * (g[r] - mean_e);
        g[r] = ds * inv_rho;
        const Real* k = keys[r] + row;  // raw K_r; k_r = K_r/ρ_r
        Real s = 0;
        if (few) {
          s = wk[r];
        } else {
#pragma omp simd reduction(+ : s)
          for (int c = 0; c < C; ++c) s += w[c] * k[c];
        }
        // dK_r += (ds/ρ)(w − (s_r/C) k_r) with s_r = (w·K_r)/ρ and k_r = K_r/ρ.
        const Real coef = g[r] * (s * inv_rho) * inv_rho / Real(C);
        Real* dk = dkeys[r] + row;
        const Real gr = g[r];
#pragma omp simd
        for (int c = 0; c < C; ++c) dk[c] += gr * w[c] - coef * k[c];
        if (fused) {
#pragma omp simd
          for (int c = 0; c < C; ++c) part[c] += gr * k[c];
        }
      }
    }  // implicit barrier: every partial (or every scratch row) is complete
    // Pass 2 (columns): dw[c] += Σ_threads part[c], or Σ_i Σ_r (ds_r/ρ_r)·K_r[i,c]; each thread owns a column range.
    const int nt = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = ((C + nt - 1) / nt + 15) / 16 * 16;
    const int c0 = std::min(C, thread * chunk), c1 = std::min(C, c0 + chunk);
    if (fused) {
      for (int t = 0; t < nt; ++t) {
        const Real* pt = dw_partials + (size_t)t * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dw[c] += pt[c];
      }
    } else {
      for (int i = 0; i < N; ++i)
        for (int r = 0; r < R; ++r) {
          const Real g = scratch[(size_t)i * R + r];
          const Real* k = keys[r] + (size_t)i * C;
#pragma omp simd
          for (int c = c0; c < c1; ++c) dw[c] += g * k[c];
        }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Naive reference (double accumulation, the formulas of §4.1 as written): the oracle of the tests.
template <class Real>
void depth_attention_forward_naive(Real* out, Real* weights, const Real* const* keys, const Real* const* values,
                                   const Real* w, int N, int R, int C) {
  for (int i = 0; i < N; ++i) {
    std::vector<double> s(R);
    double mx = -INFINITY, z = 0;
    for (int r = 0; r < R; ++r) {
      double sq = 0, dot = 0;
      for (int c = 0; c < C; ++c) sq += double(keys[r][(size_t)i * C + c]) * keys[r][(size_t)i * C + c];
      const double rho = std::sqrt(sq / C + kDepthKeyEps);
      for (int c = 0; c < C; ++c) dot += double(w[c]) * (keys[r][(size_t)i * C + c] / rho);
      s[r] = dot;
      mx = std::max(mx, dot);
    }
    for (int r = 0; r < R; ++r) z += std::exp(s[r] - mx);
    for (int r = 0; r < R; ++r) weights[(size_t)i * R + r] = Real(std::exp(s[r] - mx) / z);
    for (int c = 0; c < C; ++c) {
      double y = 0;
      for (int r = 0; r < R; ++r) y += std::exp(s[r] - mx) / z * values[r][(size_t)i * C + c];
      out[(size_t)i * C + c] = Real(y);
    }
  }
}

}  // namespace attnlab::kernels
