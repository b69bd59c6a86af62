// LayerNorm and RMSNorm, forward and backward: the Norms table of docs/mechanisms.md §1.1.
//   LayerNorm (ε = 1e-5, biased variance): x̂ = (x−μ)·r, r = 1/sqrt(var+ε), y = γ∘x̂ + β.
//   RMSNorm   (ε = 1e-6):                  x̂ = x·r,     r = 1/sqrt(mean(x²)+ε), y = γ∘x̂.
// Backward with g = dy∘γ: LayerNorm dx = r(g − mean(g) − x̂·mean(g∘x̂)); RMSNorm dx = r(g − x̂·mean(g∘x̂));
// dγ = Σ_tok dy∘x̂; dβ = Σ_tok dy.
//
// Header-only templates on the scalar type `Real` (float for training, double for the finite-difference
// tests). Rows are independent in the forward and in dx, so those loops run OpenMP over rows with SIMD
// over C. dγ and dβ sum over rows: a second pass splits the columns among threads instead (each thread
// owns a column range and walks every row), which is race-free without scratch memory. The backward
// alternates the two passes over blocks of kNormRowBlock rows, so that the second pass reads dy and x
// from cache rather than from memory a second time. The passes share no outputs (pass 1 writes dx,
// pass 2 dγ, dβ, both only read inputs), so the blocks need no barrier between them (`nowait`): a
// thread that gets preempted on the shared machine does not stall the other at every block.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "core/bf16.h"
#include "kernels/parallel.h"

namespace attnlab::kernels {

inline constexpr double kLayerNormEps = 1e-5;  // §1.1 table
inline constexpr double kRmsNormEps = 1e-6;    // §1.1 table
// Rows per block of the backward: 2 inputs × 64 rows × C ≤ 1024 floats = 512 KiB, within L2.
inline constexpr int kNormRowBlock = 64;

// ---------------------------------------------------------------------------------------------
// LayerNorm forward.
// out (N,C); mean (N), rstd (N) saved for the backward (either may be nullptr when no backward
// follows); inp (N,C); weight γ (C); bias β (C) or nullptr (model.bias = false).
// Two passes over the row (mean, then the centred sum of squares) rather than E[x²]−μ²: the residual
// stream can have |μ| ≫ σ, where the one-pass form cancels catastrophically in fp32. For the same
// reason the mean is summed relative to the row's first element: a plain fp32 sum of C terms of size
// |μ| puts several ulp(|μ|) of error into μ (measured 2.4e-6 of the output scale at |μ| = 60), the
// shifted sum only μ's own fp32 rounding (6.7e-7, the same as double accumulation, which costs
// 30–50% more time single-threaded).
// Out = bf16 (train.precision = bf16, Real = float): out is the bf16 input of the next linear layer,
// rounded from a float tile in L1 (store_row), never stored in float; the statistics stay float.
template <class Real, class Out = Real>
void layernorm_forward(Out* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                       int N, int C) {
  const double eps = kLayerNormEps;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= kParallelMinElements)
  for (int i = 0; i < N; ++i) {
    const Real* x = inp + (size_t)i * C;
    Out* y = out + (size_t)i * C;
    const Real shift = x[0];
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c] - shift;
    const Real mu = shift + sum / Real(C);
    Real sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += (x[c] - mu) * (x[c] - mu);
    const Real r = Real(1.0 / std::sqrt(double(sq) / C + eps));
    if constexpr (!std::is_same_v<Out, Real>) {
      if (bias) store_row(y, C, [&](int c) { return (x[c] - mu) * r * weight[c] + bias[c]; });
      else store_row(y, C, [&](int c) { return (x[c] - mu) * r * weight[c]; });
    } else if (bias) {
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] = (x[c] - mu) * r * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) y[c] = (x[c] - mu) * r * weight[c];
    }
    if (mean) mean[i] = mu;
    if (rstd) rstd[i] = r;
  }
}

namespace norm_detail {
// The shared schedule of both norm backwards: over blocks of kNormRowBlock rows, first the rows
// split among threads (row_pass(i): dx for row i), then the same rows, still in cache, with the
// columns split among threads (column_pass(i, c0, c1): the parameter gradients of columns
// [c0, c1) from row i). Columns are owned by one thread, so there are no races and no scratch.
template <class RowPass, class ColumnPass>
void blocked_backward(int N, int C, RowPass row_pass, ColumnPass column_pass) {
#pragma omp parallel
  {
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = ((C + n_threads - 1) / n_threads + 15) / 16 * 16;
    const int c0 = std::min(C, thread * chunk), c1 = std::min(C, c0 + chunk);
    for (int i0 = 0; i0 < N; i0 += kNormRowBlock) {
      const int i1 = std::min(N, i0 + kNormRowBlock);
#pragma omp for schedule(static) nowait
      for (int i = i0; i < i1; ++i) row_pass(i);
      for (int i = i0; i < i1 && c0 < c1; ++i) column_pass(i, c0, c1);
    }
  }
}
}  // namespace norm_detail

// ---------------------------------------------------------------------------------------------
// LayerNorm backward.
// dinp (N,C) ACCUMULATES (+=): the caller passes the residual-stream gradient in place, so the
// branch's gradient adds to the skip path's (§1.1 x_l = x_{l−1} + F_l). dweight (C), dbias (C)
// accumulate; dbias may be nullptr. dout (N,C); inp (N,C); weight (C); mean, rstd (N) from the forward.
template <class Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                        const Real* mean, const Real* rstd, int N, int C) {
  norm_detail::blocked_backward(
      N, C,
      [&](int i) {  // dx += r(g − mean(g) − x̂·mean(g∘x̂)), x̂ recomputed from μ, r
        const Real* x = inp + (size_t)i * C;
        const Real* dy = dout + (size_t)i * C;
        Real* dx = dinp + (size_t)i * C;
        const Real mu = mean[i], r = rstd[i];
        Real sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int c = 0; c < C; ++c) {
          const Real g = dy[c] * weight[c];
          sum_g += g;
          sum_gx += g * (x[c] - mu) * r;
        }
        const Real mean_g = sum_g / Real(C), mean_gx = sum_gx / Real(C);
#pragma omp simd
        for (int c = 0; c < C; ++c) dx[c] += r * (dy[c] * weight[c] - mean_g - (x[c] - mu) * r * mean_gx);
      },
      [&](int i, int c0, int c1) {  // dγ += Σ dy∘x̂, dβ += Σ dy
        const Real* x = inp + (size_t)i * C;
        const Real* dy = dout + (size_t)i * C;
        const Real mu = mean[i], r = rstd[i];
#pragma omp simd
        for (int c = c0; c < c1; ++c) dweight[c] += dy[c] * (x[c] - mu) * r;
        if (dbias) {
#pragma omp simd
          for (int c = c0; c < c1; ++c) dbias[c] += dy[c];
        }
      });
}

// ---------------------------------------------------------------------------------------------
// RMSNorm forward. out (N,C); rstd (N) saved (may be nullptr); inp (N,C); weight γ (C).
// Out = bf16: as layernorm_forward.
template <class Real, class Out = Real>
void rmsnorm_forward(Out* out, Real* rstd, const Real* inp, const Real* weight, int N, int C) {
  const double eps = kRmsNormEps;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= kParallelMinElements)
  for (int i = 0; i < N; ++i) {
    const Real* x = inp + (size_t)i * C;
    Out* y = out + (size_t)i * C;
    Real sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += x[c] * x[c];
    const Real r = Real(1.0 / std::sqrt(double(sq) / C + eps));
    store_row(y, C, [&](int c) { return x[c] * r * weight[c]; });
    if (rstd) rstd[i] = r;
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm backward. dinp (N,C) ACCUMULATES (+=), as for LayerNorm; dweight (C) accumulates.
// dout (N,C); inp (N,C); weight (C); rstd (N) from the forward.
template <class Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp, const Real* weight,
                      const Real* rstd, int N, int C) {
  norm_detail::blocked_backward(
      N, C,
      [&](int i) {  // dx += r(g − x̂·mean(g∘x̂))
        const Real* x = inp + (size_t)i * C;
        const Real* dy = dout + (size_t)i * C;
        Real* dx = dinp + (size_t)i * C;
        const Real r = rstd[i];
        Real sum_gx = 0;
#pragma omp simd reduction(+ : sum_gx)
        for (int c = 0; c < C; ++c) sum_gx += dy[c] * weight[c] * x[c] * r;
        const Real mean_gx = sum_gx / Real(C);
#pragma omp simd
        for (int c = 0; c < C; ++c) dx[c] += r * (dy[c] * weight[c] - x[c] * r * mean_gx);
      },
      [&](int i, int c0, int c1) {  // dγ += Σ dy∘x̂
        const Real* x = inp + (size_t)i * C;
        const Real* dy = dout + (size_t)i * C;
        const Real r = rstd[i];
#pragma omp simd
        for (int c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * r;
      });
}

// ---------------------------------------------------------------------------------------------
// Naive references: the §1.1 formulas written literally, serial, with double accumulators. They are
// the oracles of tests/kernels/test_norm.cpp. Same signatures and accumulation rules as above.
template <class Real>
void layernorm_forward_naive(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight, const Real* bias,
                             int N, int C) {
  for (int i = 0; i < N; ++i) {
    const Real* x = inp + (size_t)i * C;
    double mu = 0, var = 0;
    for (int c = 0; c < C; ++c) mu += x[c];
    mu /= C;
    for (int c = 0; c < C; ++c) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    const double r = 1.0 / std::sqrt(var + kLayerNormEps);
    for (int c = 0; c < C; ++c)
      out[(size_t)i * C + c] = Real(weight[c] * ((x[c] - mu) * r) + (bias ? double(bias[c]) : 0.0));
    if (mean) mean[i] = Real(mu);
    if (rstd) rstd[i] = Real(r);
  }
}

template <class Real>
void layernorm_backward_naive(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                              const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    double mean_g = 0, mean_gx = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[row + c] - double(mean[i])) * rstd[i];
      mean_g += double(dout[row + c]) * weight[c];
      mean_gx += double(dout[row + c]) * weight[c] * xhat;
    }
    mean_g /= C;
    mean_gx /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (inp[row + c] - double(mean[i])) * rstd[i];
      const double g = double(dout[row + c]) * weight[c];
      dinp[row + c] += Real(rstd[i] * (g - mean_g - xhat * mean_gx));
      dweight[c] += Real(dout[row + c] * xhat);
      if (dbias) dbias[c] += dout[row + c];
    }
  }
}

template <class Real>
void rmsnorm_forward_naive(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const Real* x = inp + (size_t)i * C;
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += double(x[c]) * x[c];
    ms /= C;
    const double r = 1.0 / std::sqrt(ms + kRmsNormEps);
    for (int c = 0; c < C; ++c) out[(size_t)i * C + c] = Real(weight[c] * (x[c] * r));
    if (rstd) rstd[i] = Real(r);
  }
}

template <class Real>
void rmsnorm_backward_naive(Real* dinp, Real* dweight, const Real* dout, const Real* inp, const Real* weight,
                            const Real* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    double mean_gx = 0;
    for (int c = 0; c < C; ++c) mean_gx += double(dout[row + c]) * weight[c] * (inp[row + c] * double(rstd[i]));
    mean_gx /= C;
    for (int c = 0; c < C; ++c) {
      const double xhat = inp[row + c] * double(rstd[i]);
      dinp[row + c] += Real(rstd[i] * (double(dout[row + c]) * weight[c] - xhat * mean_gx));
      dweight[c] += Real(dout[row + c] * xhat);
    }
  }
}

}  // namespace attnlab::kernels
