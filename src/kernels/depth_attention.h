// Depth attention: the primitive of MECHANISMS.md §4.1, shared by AttnRes (§4) and DAR (§6).
// Per token, over N candidates with key sources K_r and value sources V_r (AttnRes: K_r = V_r = C_r;
// DAR: keys from one stream, values from another, §6.2 routing) and a query w ∈ R^C:
//   ρ_r = sqrt(mean(K_r²) + 1e-6);  k_r = K_r/ρ_r;  s_r = w·k_r;  a = softmax_r(s);  out = Σ_r a_r V_r
// Backward (§4.1, §6.4 DepthAttnBackward):
//   e_r = dout·V_r;  ds_r = a_r (e_r − dout·out);  dw += Σ_tok Σ_r ds_r k_r
//   dV_r += a_r dout;   dK_r += (ds_r/ρ_r)(w − (s_r/C) k_r)          (uses k_r·w = s_r)
//
// Candidates are passed as tables of row-major (N, C) buffers, one pointer per candidate, so the
// histories are stored once and never gathered; each key source comes with its 1/ρ (N), computed once
// when the entry is written (§4.4: completed entries are immutable). The scores are recomputed in
// the backward from w and the keys (one dot product per candidate, next to the reads the backward does
// anyway) rather than stored.
//
// The row functions (depth_softmax_row, depth_values_row, depth_score_grads_row) are the building
// blocks: the generic kernels below loop them over rows with OpenMP, and DAR (src/model/dar.cpp) fuses
// them for its two targets and its mix. Header-only templates on the scalar type `Real`.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace attnlab::kernels {

inline constexpr double kDepthKeyEps = 1e-6;  // RMSNorm_ng, §0 helper functions

// ---------------------------------------------------------------------------------------------
// 1/ρ of one row x (C): the key normalisation of §4.1 (RMSNorm_ng, no gain).
template <class Real>
inline Real depth_key_inv_rms_row(const Real* x, int C) {
  Real sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; ++c) sq += x[c] * x[c];
  return Real(1.0 / std::sqrt(double(sq) / C + kDepthKeyEps));
}

// inv_rms (N) = 1/ρ of each row of x (N,C).
template <class Real>
void depth_key_inv_rms(Real* inv_rms, const Real* x, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) inv_rms[i] = depth_key_inv_rms_row(x + (size_t)i * C, C);
}

// ---------------------------------------------------------------------------------------------
// Row i of the forward, part 1: a (Nc) = softmax_r(w·K_r[i]/ρ_r[i]), max-subtracted (§6.5 numerics).
// keys[r] (N,C), key_inv_rms[r] (N), w (C).
template <class Real>
inline void depth_softmax_row(Real* a, const Real* const* keys, const Real* const* key_inv_rms, const Real* w, size_t i,
                              int Nc, int C) {
  Real mx = -std::numeric_limits<Real>::infinity();
  for (int r = 0; r < Nc; ++r) {
    const Real* k = keys[r] + i * C;
    Real s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += w[c] * k[c];
    a[r] = s * key_inv_rms[r][i];
    mx = std::max(mx, a[r]);
  }
  Real z = 0;
  for (int r = 0; r < Nc; ++r) {
    a[r] = std::exp(a[r] - mx);
    z += a[r];
  }
  const Real inv_z = Real(1) / z;
  for (int r = 0; r < Nc; ++r) a[r] *= inv_z;
}

// Row i of the forward, part 2: out (C) = Σ_r a_r V_r[i]. values[r] (N,C).
template <class Real>
inline void depth_values_row(Real* out, const Real* a, const Real* const* values, size_t i, int Nc, int C) {
  const Real* v0 = values[0] + i * C;
  const Real a0 = a[0];
#pragma omp simd
  for (int c = 0; c < C; ++c) out[c] = a0 * v0[c];
  for (int r = 1; r < Nc; ++r) {
    const Real* v = values[r] + i * C;
    const Real ar = a[r];
#pragma omp simd
    for (int c = 0; c < C; ++c) out[c] += ar * v[c];
  }
}

// Row i of the backward: the per-candidate coefficients of the key path.
//   dsn_r = ds_r/ρ_r   (so dw += Σ_r dsn_r K_r and dK_r += dsn_r w − key_coef_r K_r)
//   key_coef_r = dsn_r (s_r/C)/ρ_r
// dout, out (C) = dR̄, R̄ of this row; a (Nc) the saved weights; keys/values as in the forward.
template <class Real>
inline void depth_score_grads_row(Real* dsn, Real* key_coef, const Real* dout, const Real* out, const Real* a,
                                  const Real* const* keys, const Real* const* key_inv_rms, const Real* const* values,
                                  const Real* w, size_t i, int Nc, int C) {
  Real D = 0;
#pragma omp simd reduction(+ : D)
  for (int c = 0; c < C; ++c) D += dout[c] * out[c];
  for (int r = 0; r < Nc; ++r) {
    const Real* k = keys[r] + i * C;
    const Real* v = values[r] + i * C;
    Real e = 0, s = 0;
#pragma omp simd reduction(+ : e, s)
    for (int c = 0; c < C; ++c) {
      e += dout[c] * v[c];
      s += w[c] * k[c];
    }
    const Real inv = key_inv_rms[r][i];
    s *= inv;
    const Real ds = a[r] * (e - D);
    dsn[r] = ds * inv;
    key_coef[r] = dsn[r] * (s / Real(C)) * inv;
  }
}

// ---------------------------------------------------------------------------------------------
// Forward. out (N,C); weights (N,Nc) saved for the backward; keys[r], values[r] (N,C) for r < Nc;
// key_inv_rms[r] (N); w (C).
template <class Real>
void depth_attention_forward(Real* out, Real* weights, const Real* const* keys, const Real* const* key_inv_rms,
                             const Real* const* values, const Real* w, int Nc, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    Real* a = weights + (size_t)i * Nc;
    depth_softmax_row(a, keys, key_inv_rms, w, (size_t)i, Nc, C);
    depth_values_row(out + (size_t)i * C, a, values, (size_t)i, Nc, C);
  }
}

// Backward. dkeys[r], dvalues[r] (N,C) ACCUMULATE (+=; a candidate that is both a key and a value
// source may pass the same buffer twice); dw (C) accumulates. dout (N,C); out, weights from the
// forward; the rest as in the forward. scratch (N, 2·Nc): dsn and key_coef per row; dsn is read back
// by the column pass of dw. Rows are split among threads for the candidate gradients; then the
// columns of dw are split among threads, each walking every row (race-free without per-thread
// copies, and the same sums whatever the thread count).
template <class Real>
void depth_attention_backward(Real* const* dkeys, Real* const* dvalues, Real* dw, Real* scratch, const Real* dout,
                              const Real* out, const Real* weights, const Real* const* keys,
                              const Real* const* key_inv_rms, const Real* const* values, const Real* w, int Nc, int N,
                              int C) {
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = (size_t)i * C;
      const Real* a = weights + (size_t)i * Nc;
      Real* dsn = scratch + (size_t)i * 2 * Nc;
      Real* key_coef = dsn + Nc;
      depth_score_grads_row(dsn, key_coef, dout + row, out + row, a, keys, key_inv_rms, values, w, (size_t)i, Nc, C);
      for (int r = 0; r < Nc; ++r) {
        const Real ar = a[r], dn = dsn[r], kc = key_coef[r];
        const Real* k = keys[r] + row;
        Real* dv = dvalues[r] + row;
#pragma omp simd
        for (int c = 0; c < C; ++c) dv[c] += ar * dout[row + c];
        Real* dk = dkeys[r] + row;
#pragma omp simd
        for (int c = 0; c < C; ++c) dk[c] += dn * w[c] - kc * k[c];
      }
    }  // implicit barrier: the column pass reads every row's dsn
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = ((C + n_threads - 1) / n_threads + 15) / 16 * 16;
    const int c0 = std::min(C, thread * chunk), c1 = std::min(C, c0 + chunk);
    for (int i = 0; i < N && c0 < c1; ++i)
      for (int r = 0; r < Nc; ++r) {
        const Real* k = keys[r] + (size_t)i * C;
        const Real dn = scratch[(size_t)i * 2 * Nc + r];
#pragma omp simd
        for (int c = c0; c < c1; ++c) dw[c] += dn * k[c];
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Naive references: the §4.1 formulas written literally, serial, double accumulators, ρ recomputed
// from the keys (key_inv_rms is not an input). Same accumulation rules as above.
template <class Real>
void depth_attention_forward_naive(Real* out, Real* weights, const Real* const* keys, const Real* const* values,
                                   const Real* w, int Nc, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    std::vector<double> s(Nc);
    double mx = -1e300, z = 0;
    for (int r = 0; r < Nc; ++r) {
      double sq = 0, dot = 0;
      for (int c = 0; c < C; ++c) sq += double(keys[r][row + c]) * keys[r][row + c];
      const double rho = std::sqrt(sq / C + kDepthKeyEps);
      for (int c = 0; c < C; ++c) dot += double(w[c]) * (keys[r][row + c] / rho);
      s[r] = dot;
      mx = std::max(mx, dot);
    }
    for (int r = 0; r < Nc; ++r) z += std::exp(s[r] - mx);
    for (int r = 0; r < Nc; ++r) weights[(size_t)i * Nc + r] = Real(std::exp(s[r] - mx) / z);
    for (int c = 0; c < C; ++c) {
      double o = 0;
      for (int r = 0; r < Nc; ++r) o += std::exp(s[r] - mx) / z * values[r][row + c];
      out[row + c] = Real(o);
    }
  }
}

template <class Real>
void depth_attention_backward_naive(Real* const* dkeys, Real* const* dvalues, Real* dw, const Real* dout,
                                    const Real* const* keys, const Real* const* values, const Real* w, int Nc, int N,
                                    int C) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    std::vector<double> s(Nc), a(Nc), rho(Nc);
    double mx = -1e300, z = 0;
    for (int r = 0; r < Nc; ++r) {
      double sq = 0, dot = 0;
      for (int c = 0; c < C; ++c) sq += double(keys[r][row + c]) * keys[r][row + c];
      rho[r] = std::sqrt(sq / C + kDepthKeyEps);
      for (int c = 0; c < C; ++c) dot += double(w[c]) * (keys[r][row + c] / rho[r]);
      s[r] = dot;
      mx = std::max(mx, dot);
    }
    for (int r = 0; r < Nc; ++r) z += std::exp(s[r] - mx);
    for (int r = 0; r < Nc; ++r) a[r] = std::exp(s[r] - mx) / z;
    double D = 0;
    for (int c = 0; c < C; ++c) {
      double o = 0;
      for (int r = 0; r < Nc; ++r) o += a[r] * values[r][row + c];
      D += double(dout[row + c]) * o;
    }
    for (int r = 0; r < Nc; ++r) {
      double e = 0;
      for (int c = 0; c < C; ++c) e += double(dout[row + c]) * values[r][row + c];
      const double ds = a[r] * (e - D);
      for (int c = 0; c < C; ++c) {
        const double k = keys[r][row + c] / rho[r];
        dvalues[r][row + c] += Real(a[r] * dout[row + c]);
        dkeys[r][row + c] += Real(ds / rho[r] * (w[c] - s[r] / C * k));
        dw[c] += Real(ds * k);
      }
    }
  }
}

}  // namespace attnlab::kernels
