// attnlab kernels: the tied LM head fused with softmax cross-entropy (docs/mechanisms.md §1.1).
//   logits = Norm_f(x)·Eᵀ with E = wte [V,C] tied to the token embedding; loss = CE over the
//   next-token targets (the caller turns the returned SUM into a mean).
// Why fused and chunked: a batch's full (N,V) logits (4096×8192 floats = 128 MB) would be the largest
// activation of the model, cost a slow first touch (docs/performance.md pitfall 2) and three trips through
// DRAM. Instead rows are processed chunk_rows at a time through one caller-owned (chunk_rows,V)
// scratch: logits → softmax/loss → dlogits overwrite the logits in place → the two backward GEMMs.
// The scratch is reused every chunk, so it stays warm and the step does not allocate.
//
// Backward of softmax cross-entropy (standard; docs/mechanisms.md §1.1 "loss = mean CE"):
//   p = softmax(logits), loss_i = logsumexp(logits_i) − logits_i[t_i],  dlogits_i = s·(p_i − onehot(t_i))
//   dx = dlogits·E (WRITTEN),  dE += dlogitsᵀ·x (ACCUMULATED: E also receives the embedding gradient).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"
#include "kernels/math.h"

namespace attnlab::kernels {

// Chunk size chosen with bench/cross_entropy_bench.cpp for (N,C,V) = (4096,256,8192) and
// (4096,768,8192): chunks of 512–2048 rows run the fused op at 93–100% of one unchunked logits GEMM,
// 128 rows loses 10–20%; 1024 rows was never worse than 5% from the best and needs a 32 MB scratch
// at V = 8192. The measurements are in the bench's header comment.
inline constexpr int lm_head_default_chunk_rows = 1024;

// Elements of T the scratch must hold: the (chunk_rows,V) logits/dlogits block plus chunk_rows row
// losses (kept so the returned sum is added in a fixed order, hence reproducible bit for bit).
inline size_t lm_head_scratch_size(int chunk_rows, int V) {
  return (size_t)chunk_rows * (size_t)V + (size_t)chunk_rows;
}

// Number of targets that contribute to the loss (target >= 0): the caller's mean and grad_scale
// divide by this (summed over micro-batches when accumulating gradients).
inline int lm_head_count_targets(const int32_t* targets, int N) {
  int n = 0;
  for (int i = 0; i < N; ++i) n += targets[i] >= 0;
  return n;
}

namespace ce_detail {

using kernels::exp_nonpositive;  // kernels/math.h

template <class T>
T row_max(const T* row, int V) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int v = 0; v < V; ++v) m = row[v] > m ? row[v] : m;
  return m;
}

// Σ_v exp(row[v] − m), summed in double (8192 float terms summed in float would lose ~1e-5).
template <class T>
double row_sum_exp(const T* row, int V, T m) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int v = 0; v < V; ++v) s += (double)exp_nonpositive(T(row[v] - m));
  return s;
}

}  // namespace ce_detail

// Forward and backward of softmax cross-entropy for one row, in place. row (V): logits on entry,
// grad_scale·(softmax − onehot(target)) on exit; all zeros when target < 0 (ignored). Returns the loss
// (0 when ignored). target < V is checked once per call by the chunked functions below.
template <class T>
T softmax_ce_row_forward_backward(T* row, int V, int32_t target, T grad_scale) {
  if (target < 0) {
    std::fill(row, row + V, T(0));
    return T(0);
  }
  const T m = ce_detail::row_max(row, V);
  const T target_logit = row[target];
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int v = 0; v < V; ++v) {
    const T e = ce_detail::exp_nonpositive(T(row[v] - m));
    row[v] = e;
    s += (double)e;
  }
  const T scale = T((double)grad_scale / s);
#pragma omp simd
  for (int v = 0; v < V; ++v) row[v] *= scale;
  row[target] -= grad_scale;
  return T((double)m - (double)target_logit + std::log(s));
}

// Loss only, for one row of logits (V). Same max and sum as the fused row above.
template <class T>
T softmax_ce_row_forward(const T* row, int V, int32_t target) {
  if (target < 0) return T(0);
  const T m = ce_detail::row_max(row, V);
  const double s = ce_detail::row_sum_exp(row, V, m);
  return T((double)m - (double)row[target] + std::log(s));
}

namespace ce_detail {
// Below this many logits a chunk's softmax runs on one thread: waking the team costs more than the
// ~0.6 ns/element the work takes (tiny test and sampling shapes).
inline constexpr size_t kParallelMinElements = 32768;
// User-facing: targets come from token data, which may not match the model's vocabulary.
inline void check_targets(const int32_t* targets, int N, int V) {
  for (int i = 0; i < N; ++i)
    if (targets[i] >= V)
      fail("lm head: target token ", targets[i], " at row ", i, " is outside the vocabulary [0, ", V,
           "); the token data was made with a larger vocabulary than model.vocab_size: re-tokenize or raise it");
}
inline void check_args(int N, int C, int V, const void* scratch, int chunk_rows) {
  ATTNLAB_CHECK(N >= 0 && C > 0 && V > 0, "N=", N, " C=", C, " V=", V);
  ATTNLAB_CHECK(chunk_rows > 0, "chunk_rows=", chunk_rows);
  ATTNLAB_CHECK(scratch != nullptr || N == 0, "scratch of lm_head_scratch_size() elements is required");
}
}  // namespace ce_detail

// train.precision = bf16: the head's products take bf16 operands with float results: wte's bf16
// copy, each chunk's rows of x rounded into `x`, and the chunk's dlogits rounded into `dlogits`
// (softmax, loss and dlogits themselves stay float). Only for T = float.
struct LmHeadBf16 {
  const bf16* wte = nullptr;  // (V, C)
  bf16* x = nullptr;          // chunk_rows × C scratch
  bf16* dlogits = nullptr;    // chunk_rows × V scratch (training only)
};

namespace ce_detail {
// logits (n,V) = x_rows (n,C) · wteᵀ (C,V), in T or through the bf16 copies.
template <class T>
void chunk_logits(T* logits, const T* xr, const T* wte, int n, int C, int V, const LmHeadBf16* half) {
  if constexpr (std::is_same_v<T, float>) {
    if (half) {
      to_bf16_rows(half->x, C, xr, C, n, C);
      return gemm(false, true, n, V, C, 1.0f, half->x, C, half->wte, C, 0.0f, logits, V);
    }
  }
  gemm(false, true, n, V, C, T(1), xr, C, wte, C, T(0), logits, V);
}
}  // namespace ce_detail

// Training: the tied LM head and cross-entropy, forward and backward at once, chunk_rows rows at a time.
// dx (N,C) WRITTEN; dwte (V,C) ACCUMULATED; losses (N) per-row loss (0 for ignored rows), may be null;
// x (N,C) final normalized hidden; wte (V,C); targets (N) int32, < 0 = ignored;
// scratch: lm_head_scratch_size(chunk_rows, V) elements. Returns Σ loss over valid targets (double).
// dlogits = grad_scale·(p − onehot): grad_scale is e.g. 1/(valid targets in the batch · grad_accum).
// row_weights (N), optional: per-row loss weights w_i (a synthetic task's answer weighting,
// src/experiment/tasks.h). Row i's gradient is then grad_scale·w_i·(p − onehot) and the return value
// Σ w_i·loss_i; the per-row `losses` stay unweighted.
template <class T>
double lm_head_ce_forward_backward(T* dx, T* dwte, T* losses, const T* x, const T* wte, const int32_t* targets,
                                   int N, int C, int V, T grad_scale, T* scratch, int chunk_rows,
                                   const T* row_weights = nullptr, const LmHeadBf16* half = nullptr) {
  ce_detail::check_args(N, C, V, scratch, chunk_rows);
  ce_detail::check_targets(targets, N, V);
  T* row_loss = scratch + (size_t)chunk_rows * V;
  double total = 0;
  for (int r0 = 0; r0 < N; r0 += chunk_rows) {
    const int n = std::min(chunk_rows, N - r0);
    const T* xr = x + (size_t)r0 * C;
    ce_detail::chunk_logits(scratch, xr, wte, n, C, V, half);
    // With bf16 products, each row of dlogits is rounded into half->dlogits while it is still in cache.
    bf16* dlogits_h = nullptr;
    if constexpr (std::is_same_v<T, float>)
      if (half) dlogits_h = half->dlogits;
#pragma omp parallel for schedule(static) if ((size_t)n * V >= ce_detail::kParallelMinElements)
    for (int i = 0; i < n; ++i) {
      row_loss[i] = softmax_ce_row_forward_backward(scratch + (size_t)i * V, V, targets[r0 + i],
                                                    row_weights ? T(grad_scale * row_weights[r0 + i]) : grad_scale);
      if constexpr (std::is_same_v<T, float>)
        if (dlogits_h) to_bf16(dlogits_h + (size_t)i * V, scratch + (size_t)i * V, size_t(V));
    }
    // dx_rows (n,C) = dlogits (n,V) · wte (V,C); dwte (V,C) += dlogitsᵀ (V,n) · x_rows (n,C). With V
    // a multiple of 1024 and C ≤ 256 on a CPU without AVX-512, gemm reads dlogits through padded
    // copies (core/gemm.h).
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (half) {
        gemm(false, false, n, C, V, 1.0f, half->dlogits, V, half->wte, C, 0.0f, dx + (size_t)r0 * C, C);
        gemm(true, false, V, C, n, 1.0f, half->dlogits, V, half->x, C, 1.0f, dwte, C);
        done = true;
      }
    }
    if (!done) {
      gemm(false, false, n, C, V, T(1), scratch, V, wte, C, T(0), dx + (size_t)r0 * C, C);
      gemm(true, false, V, C, n, T(1), scratch, V, xr, C, T(1), dwte, C);
    }
    if (row_weights)
      for (int i = 0; i < n; ++i) total += (double)row_weights[r0 + i] * (double)row_loss[i];
    else
      for (int i = 0; i < n; ++i) total += (double)row_loss[i];
    if (losses) std::copy(row_loss, row_loss + n, losses + r0);
  }
  return total;
}

// Evaluation: Σ loss over valid targets, same chunking; losses (N) may be null.
// x (N,C), wte (V,C), targets (N); scratch: lm_head_scratch_size(chunk_rows, V) elements.
// argmax (N), optional: the id of each row's largest logit (the lowest id among ties), for accuracy.
template <class T>
double lm_head_ce_forward(T* losses, const T* x, const T* wte, const int32_t* targets, int N, int C, int V,
                          T* scratch, int chunk_rows, int32_t* argmax = nullptr, const LmHeadBf16* half = nullptr) {
  ce_detail::check_args(N, C, V, scratch, chunk_rows);
  ce_detail::check_targets(targets, N, V);
  T* row_loss = scratch + (size_t)chunk_rows * V;
  double total = 0;
  for (int r0 = 0; r0 < N; r0 += chunk_rows) {
    const int n = std::min(chunk_rows, N - r0);
    ce_detail::chunk_logits(scratch, x + (size_t)r0 * C, wte, n, C, V, half);
#pragma omp parallel for schedule(static) if ((size_t)n * V >= ce_detail::kParallelMinElements)
    for (int i = 0; i < n; ++i) row_loss[i] = softmax_ce_row_forward(scratch + (size_t)i * V, V, targets[r0 + i]);
    if (argmax)
      for (int i = 0; i < n; ++i) {
        const T* row = scratch + (size_t)i * V;
        argmax[r0 + i] = int32_t(std::max_element(row, row + V) - row);
      }
    for (int i = 0; i < n; ++i) total += (double)row_loss[i];
    if (losses) std::copy(row_loss, row_loss + n, losses + r0);
  }
  return total;
}

// Logits for a few rows (sampling, `attnlab forward`): logits (N,V) = x (N,C) · wteᵀ; wte (V,C).
// Up to four rows (decoding) read wte once, threads splitting its rows. wte's rows are cut into
// eight parts read side by side, one row of each per step: eight independent sums per query row
// and eight sequential streams far apart (one core reads DRAM faster so than from eight adjacent
// rows, bench/decode_read_bench.cpp). The parts start R = V/8 + 1 rows apart, not V/8: at the
// model's shapes V/8 rows are a multiple of 4 KiB, which put all eight streams in one L1 set (one
// row more: 57 → 65 GB/s from the last-level cache, docs/performance.md, Decode). The rows the
// eight-part steps leave (at most 56, or the last V mod 8 for small V): one at a time. More rows:
// one GEMM. wte may be bf16 for up to four rows (decoding with bf16 weights, GPT::round_weights_to_bf16):
// each weight is widened exactly as it is read and the sums run in T as for T weights.
template <class T, class Wt>
void lm_head_logits(T* logits, const T* x, const Wt* wte, int N, int C, int V) {
  if (N > 4) {
    if constexpr (std::is_same_v<Wt, T>) return gemm(false, true, N, V, C, T(1), x, C, wte, C, T(0), logits, V);
    ATTNLAB_CHECK(false, "lm_head_logits: bf16 weights take at most 4 rows, not ", N);
  }
  const int Q = V / 8;
  const int R = Q >= 16 ? Q + 1 : Q;  // rows from one part's start to the next (7R <= V)
  const int L = V - 7 * R;            // rows of the last part
  const int M = std::min(L, R);       // steps all eight parts take
  const int rest_per_part = R - M, rest = 7 * rest_per_part + (L - M);
  const size_t S = (size_t)R * C;  // from one part to the next
  auto one_row = [&](int r) {
    const Wt* wr = wte + (size_t)r * C;
    for (int n = 0; n < N; ++n) {
      const T* xr = x + (size_t)n * C;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int c = 0; c < C; ++c) s += xr[c] * value_as<T>(wr, c);
      logits[(size_t)n * V + r] = s;
    }
  };
  // bf16 weights are read as pairs (bf16_pair: two exact floats per 32-bit word, no shuffle), so x's
  // even and odd entries go to two arrays first (on the stack, up to kSplitC entries; beyond that,
  // or for odd C, each weight is widened on its own).
  constexpr int kSplitC = 4096;
  constexpr bool kHalf = std::is_same_v<Wt, bf16>;
  const bool split = kHalf && C % 2 == 0 && C <= kSplitC;
  alignas(64) T xs[kHalf ? 4 * kSplitC : 1];
  if constexpr (kHalf)
    if (split)
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < C / 2; ++i) {
          xs[(size_t)n * C + i] = x[(size_t)n * C + 2 * i];
          xs[(size_t)n * C + C / 2 + i] = x[(size_t)n * C + 2 * i + 1];
        }
#pragma omp parallel if ((size_t)V * C >= 65536)
  {
#pragma omp for schedule(static) nowait
    for (int v = 0; v < M; ++v) {
      const Wt* w = wte + (size_t)v * C;
      for (int n = 0; n < N; ++n) {
        const T* xr = x + (size_t)n * C;
        T* out = logits + (size_t)n * V;
        T s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        if constexpr (kHalf) {
          if (split) {
            const T *xe = xs + (size_t)n * C, *xo = xe + C / 2;
            const bf16_pair *p0 = bf16_pairs(w), *p1 = bf16_pairs(w + S), *p2 = bf16_pairs(w + 2 * S),
                            *p3 = bf16_pairs(w + 3 * S), *p4 = bf16_pairs(w + 4 * S), *p5 = bf16_pairs(w + 5 * S),
                            *p6 = bf16_pairs(w + 6 * S), *p7 = bf16_pairs(w + 7 * S);
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
            for (int i = 0; i < C / 2; ++i) {
              const T e = xe[i], o = xo[i];
              s0 += e * bf16_even(p0[i]) + o * bf16_odd(p0[i]), s1 += e * bf16_even(p1[i]) + o * bf16_odd(p1[i]);
              s2 += e * bf16_even(p2[i]) + o * bf16_odd(p2[i]), s3 += e * bf16_even(p3[i]) + o * bf16_odd(p3[i]);
              s4 += e * bf16_even(p4[i]) + o * bf16_odd(p4[i]), s5 += e * bf16_even(p5[i]) + o * bf16_odd(p5[i]);
              s6 += e * bf16_even(p6[i]) + o * bf16_odd(p6[i]), s7 += e * bf16_even(p7[i]) + o * bf16_odd(p7[i]);
            }
          }
        }
        if (!split) {
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
          for (int c = 0; c < C; ++c) {
            const T xc = xr[c];
            s0 += xc * value_as<T>(w, c), s1 += xc * value_as<T>(w + S, c);
            s2 += xc * value_as<T>(w + 2 * S, c), s3 += xc * value_as<T>(w + 3 * S, c);
            s4 += xc * value_as<T>(w + 4 * S, c), s5 += xc * value_as<T>(w + 5 * S, c);
            s6 += xc * value_as<T>(w + 6 * S, c), s7 += xc * value_as<T>(w + 7 * S, c);
          }
        }
        out[v] = s0, out[R + v] = s1, out[2 * R + v] = s2, out[3 * R + v] = s3;
        out[4 * R + v] = s4, out[5 * R + v] = s5, out[6 * R + v] = s6, out[7 * R + v] = s7;
      }
    }
    // The rest: rows M..R of parts 0..6, then rows M..L of the last part.
#pragma omp for schedule(static)
    for (int t = 0; t < rest; ++t)
      one_row(t < 7 * rest_per_part ? (t / rest_per_part) * R + M + t % rest_per_part
                                    : 7 * R + M + (t - 7 * rest_per_part));
  }
}

// Naive reference (test oracle; allocates): full logits and log-softmax in double, straight loops.
// dx (N,C) WRITTEN and dwte (V,C) ACCUMULATED unless null; losses (N) may be null; returns Σ loss.
template <class T>
double lm_head_ce_naive(T* dx, T* dwte, T* losses, const T* x, const T* wte, const int32_t* targets, int N, int C,
                        int V, T grad_scale) {
  std::vector<double> logit(V);
  double total = 0;
  for (int i = 0; i < N; ++i) {
    const int32_t t = targets[i];
    if (t < 0) {
      if (losses) losses[i] = T(0);
      if (dx) std::fill(dx + (size_t)i * C, dx + (size_t)(i + 1) * C, T(0));
      continue;
    }
    double m = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < V; ++v) {
      double acc = 0;
      for (int c = 0; c < C; ++c) acc += (double)x[(size_t)i * C + c] * (double)wte[(size_t)v * C + c];
      logit[v] = acc;
      m = std::max(m, acc);
    }
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(logit[v] - m);
    const double lse = m + std::log(s);
    const double loss = lse - logit[t];
    total += loss;
    if (losses) losses[i] = T(loss);
    for (int v = 0; v < V; ++v) logit[v] = (double)grad_scale * (std::exp(logit[v] - lse) - (v == t ? 1.0 : 0.0));
    if (dx)
      for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int v = 0; v < V; ++v) acc += logit[v] * (double)wte[(size_t)v * C + c];
        dx[(size_t)i * C + c] = T(acc);
      }
    if (dwte)
      for (int v = 0; v < V; ++v)
        for (int c = 0; c < C; ++c) dwte[(size_t)v * C + c] += T(logit[v] * (double)x[(size_t)i * C + c]);
  }
  return total;
}

}  // namespace attnlab::kernels
