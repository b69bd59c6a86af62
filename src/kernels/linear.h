// Linear layer y = x·W + b, forward and backward. Matrices are stored [in, out] (docs/mechanisms.md §0
// "Vectors are rows, and matrices are stored [in, out]"); biases exist when model.bias = true (§1.1).
// Every matrix product goes through attnlab::gemm (oneDNN for float, the naive triple loop for double).
//
// Header-only templates on the scalar type `Real`.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "core/bf16.h"
#include "core/error.h"
#include "core/gemm.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
namespace detail {
// Decoding multiplies one row per sequence by each weight matrix: the product is a read of W with
// little arithmetic (2 FLOPs per 4 bytes), bound by memory bandwidth. This path reads W exactly
// once: each thread takes a contiguous band of W's rows (its share of the C inputs), adds x_c·W[c, :]
// four rows at a time (from four parts of the band) into accumulators in L1 (a pass of
// few_pass<NR>() columns), and the threads' partial sums are added at the end, in thread order: the
// same bits for the same thread count (not across counts). Up to kFewRows rows of x share each read
// of W. With it, the one-row LM head and attention, decoding ran 1.2–2.1× faster than through
// oneDNN's matmul and the tiled kernels (docs/performance.md, Decode).
constexpr int kFewRows = 4;
constexpr int kFewMaxThreads = 64;
template <int NR>
constexpr int few_pass() { return 2048 / NR; }  // NR·pass accumulators: 8 KiB of float
// Parts of a band read side by side, and how many rows ahead each part's next rows are prefetched.
// Four, not eight: eight parts ran at half the speed of four from the last-level cache, also with
// their starts staggered by a row (which cured the LM head's eight parts of sharing one L1 set), so
// the cause is not only the parts' 4 KiB alignment (docs/performance.md, Decode).
constexpr int kFewParts = 4;
constexpr int kFewPrefetchRows = 2;

// Where column j of a pass lies in a row's accumulators: j for float weights; for bf16 weights, read
// as pairs (bf16_pair), the even columns first and the odd ones from few_odd (P/2 and 16 more: the
// two halves' same entries 4 KiB apart stalled every load behind the other half's stores), each
// row's accumulators few_stride floats apart.
template <int NR>
constexpr int few_odd() { return few_pass<NR>() / 2 + 16; }
template <int NR, class Wt>
constexpr int few_stride() { return std::is_same_v<Wt, bf16> ? few_pass<NR>() + 32 : few_pass<NR>(); }
template <int NR, class Wt>
inline int few_slot(int j) {
  static_assert(few_pass<NR>() % 2 == 0, "the pass splits into even and odd columns");
  if constexpr (std::is_same_v<Wt, bf16>) return (j & 1) ? few_odd<NR>() + j / 2 : j / 2;
  else return j;
}

// acc (NR, width) += inp (NR, rows c0..c1) · weight[c0..c1, j0..j0+width). The band's rows are cut
// into four equal parts read side by side, one row of each per step (four sequential streams far
// apart, each prefetched kFewPrefetchRows rows ahead): acc += (x_a·w_a + x_b·w_b) + (x_c·w_c +
// x_d·w_d). Rows past 4·(band/4): one at a time. Wt is Real, or bf16 (decoding with bf16 weights):
// each weight widened exactly, two columns per 32-bit word (bf16_pair), and each column's products
// and sums in Real in the same order as for Real weights; the accumulators hold a pass's columns in
// the order few_slot gives.
template <class Real, int NR, class Wt = Real>
void few_rows_band(Real* acc, const Real* inp, const Wt* weight, int C, int OC, int c0, int c1, int j0, int width) {
  constexpr int RS = few_stride<NR, Wt>();  // from one row's accumulators to the next
  constexpr int kLine = 64 / int(sizeof(Wt));  // elements per cache line
  const int Q = (c1 - c0) / kFewParts;
  const size_t S = (size_t)Q * OC;  // from one part to the next
  for (int i = 0; i < Q; ++i) {
    const int c = c0 + i;
    const Wt* w = weight + (size_t)c * OC + j0;
    if (i + kFewPrefetchRows < Q)
      for (int k = 0; k < kFewParts; ++k) {
        const Wt* ahead = w + k * S + (size_t)kFewPrefetchRows * OC;
        for (int j = 0; j < width; j += kLine) __builtin_prefetch(ahead + j);
      }
    for (int n = 0; n < NR; ++n) {
      const Real* x = inp + (size_t)n * C + c;
      const Real x0 = x[0], x1 = x[Q], x2 = x[2 * Q], x3 = x[3 * Q];
      Real* a = acc + n * RS;
      if constexpr (std::is_same_v<Wt, bf16>) {
        // Pairs of columns per 32-bit word: even columns into a[0, P/2), odd ones from few_odd.
        const bf16_pair *p0 = bf16_pairs(w), *p1 = bf16_pairs(w + S), *p2 = bf16_pairs(w + 2 * S),
                        *p3 = bf16_pairs(w + 3 * S);
        Real* odd = a + few_odd<NR>();
#pragma omp simd
        for (int i = 0; i < width / 2; ++i) {
          a[i] += (x0 * bf16_even(p0[i]) + x1 * bf16_even(p1[i])) + (x2 * bf16_even(p2[i]) + x3 * bf16_even(p3[i]));
          odd[i] += (x0 * bf16_odd(p0[i]) + x1 * bf16_odd(p1[i])) + (x2 * bf16_odd(p2[i]) + x3 * bf16_odd(p3[i]));
        }
        if (width & 1) {
          const int j = width - 1;
          a[j / 2] += (x0 * value_as<Real>(w, j) + x1 * value_as<Real>(w + S, j)) +
                      (x2 * value_as<Real>(w + 2 * S, j) + x3 * value_as<Real>(w + 3 * S, j));
        }
      } else {
#pragma omp simd
        for (int j = 0; j < width; ++j)
          a[j] += (x0 * w[j] + x1 * w[S + j]) + (x2 * w[2 * S + j] + x3 * w[3 * S + j]);
      }
    }
  }
  for (int c = c0 + kFewParts * Q; c < c1; ++c) {
    const Wt* w = weight + (size_t)c * OC + j0;
    for (int n = 0; n < NR; ++n) {
      const Real xc = inp[(size_t)n * C + c];
      Real* a = acc + n * RS;
#pragma omp simd
      for (int j = 0; j < width; ++j) a[few_slot<NR, Wt>(j)] += xc * value_as<Real>(w, j);
    }
  }
}

template <class Real, int NR, class Wt = Real>
void few_rows_forward(Real* out, const Real* inp, const Wt* weight, const Real* bias, int C, int OC) {
  constexpr int P = few_pass<NR>();
  // Threads only when there is enough of W to read: below 64k elements a fork/join costs more.
  const int threads = (size_t)C * OC >= 65536 ? std::min(omp_get_max_threads(), kFewMaxThreads) : 1;
  Real* partial[kFewMaxThreads];  // each thread's accumulators (on its own stack), shared for the sum
  // One thread's part; the barriers separate the bands' sums from their reduction when there are
  // several (orphaned: they bind to the parallel region below). One thread runs it directly,
  // without a parallel region: a decoding step makes ~16 of these calls.
  auto band = [&](int nt, int t) {
    // Bands of W's rows, as equal as possible.
    const int c0 = int((long)C * t / nt), c1 = int((long)C * (t + 1) / nt);
    constexpr int RS = few_stride<NR, Wt>();
    alignas(64) Real acc[NR * RS];
    partial[t] = acc;
    for (int j0 = 0; j0 < OC; j0 += P) {
      const int width = std::min(P, OC - j0);
      for (int n = 0; n < NR; ++n) std::fill(acc + n * RS, acc + n * RS + (std::is_same_v<Wt, bf16> ? RS : width), Real(0));
      few_rows_band<Real, NR, Wt>(acc, inp, weight, C, OC, c0, c1, j0, width);
      if (nt > 1) {
#pragma omp barrier
      }
      // out = bias + the bands' sums in thread order; each thread writes a slice of the columns.
      const int s0 = int((long)width * t / nt), s1 = int((long)width * (t + 1) / nt);
      for (int n = 0; n < NR; ++n)
        for (int j = s0; j < s1; ++j) {
          Real v = bias ? bias[j0 + j] : Real(0);
          for (int u = 0; u < nt; ++u) v += partial[u][n * RS + few_slot<NR, Wt>(j)];
          out[(size_t)n * OC + j0 + j] = v;
        }
      if (nt > 1) {
#pragma omp barrier
      }
    }
  };
  if (threads == 1) return band(1, 0);
#pragma omp parallel num_threads(threads)
  band(omp_get_num_threads(), omp_get_thread_num());
}

// few_rows_forward for N <= kFewRows rows (its row count is a template parameter); false, and
// nothing done, for more rows.
template <class Real, class Wt>
bool few_rows(Real* out, const Real* inp, const Wt* weight, const Real* bias, int N, int C, int OC) {
  switch (N) {
    case 1: few_rows_forward<Real, 1>(out, inp, weight, bias, C, OC); return true;
    case 2: few_rows_forward<Real, 2>(out, inp, weight, bias, C, OC); return true;
    case 3: few_rows_forward<Real, 3>(out, inp, weight, bias, C, OC); return true;
    case 4: few_rows_forward<Real, 4>(out, inp, weight, bias, C, OC); return true;
    default: return false;
  }
}
}  // namespace detail

// Forward. out (N,OC) = inp (N,C) · weight (C,OC) + bias (OC); bias may be nullptr.
// With a bias, the rows of out are first set to b and the product is added on top (gemm beta = 1,
// oneDNN's sum post-op): one write-only pass instead of a read-modify-write pass after the product.
// For N <= detail::kFewRows (decoding, short prompts) the product streams W once through the few-rows
// path above; otherwise it is one GEMM.
template <class Real>
void linear_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int C, int OC) {
  if (detail::few_rows(out, inp, weight, bias, N, C, OC)) return;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::copy(bias, bias + OC, out + (size_t)i * OC);
  }
  gemm(false, false, N, OC, C, Real(1), inp, C, weight, OC, bias ? Real(1) : Real(0), out, OC);
}

// Decoding with bf16 weights (GPT::round_weights_to_bf16): out (N,OC) = inp (N,C) · weight (C,OC)
// + bias for N <= detail::kFewRows through the few-rows path above, reading W as bf16 (half the
// bytes) and widening each weight exactly: the same float arithmetic as linear_forward on the
// widened weights, so the same bound holds (tests/kernels/test_linear.cpp).
template <class Real>
void few_rows_linear(Real* out, const Real* inp, const bf16* weight, const Real* bias, int N, int C, int OC) {
  const bool done = detail::few_rows(out, inp, weight, bias, N, C, OC);
  ATTNLAB_CHECK(done, "few_rows_linear: ", N, " rows, more than ", detail::kFewRows);
}

// ---------------------------------------------------------------------------------------------
// Backward. dout (N,OC); inp (N,C); weight (C,OC).
//   dinp (N,C)     = dout · Wᵀ   WRITTEN; skipped when dinp == nullptr (e.g. nothing upstream needs it).
//   dweight (C,OC) += inpᵀ · dout  (gemm beta = 1).
//   dbias (OC)     += column sums of dout, if dbias is non-null.
// The column sums run with threads splitting the columns (each walks all rows over its own range),
// race-free without scratch. With dout_h (float only), the same pass also rounds dout into it.
template <class Real>
void bias_backward(Real* dbias, const Real* dout, int N, int OC, bf16* dout_h = nullptr) {
#pragma omp parallel
  {
    const int n_threads = omp_get_num_threads(), thread = omp_get_thread_num();
    const int chunk = ((OC + n_threads - 1) / n_threads + 15) / 16 * 16;
    const int c0 = std::min(OC, thread * chunk), c1 = std::min(OC, c0 + chunk);
    for (int i = 0; i < N && c0 < c1; ++i) {
      const Real* dy = dout + (size_t)i * OC;
      if constexpr (std::is_same_v<Real, float>)
        if (dout_h) to_bf16(dout_h + (size_t)i * OC + c0, dy + c0, size_t(c1 - c0));
#pragma omp simd
      for (int c = c0; c < c1; ++c) dbias[c] += dy[c];
    }
  }
}

template <class Real>
void linear_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp, const Real* weight,
                     int N, int C, int OC) {
  if (dinp) gemm(false, true, N, C, OC, Real(1), dout, OC, weight, OC, Real(0), dinp, C);
  gemm(true, false, C, OC, N, Real(1), inp, C, dout, OC, Real(1), dweight, OC);
  if (dbias) bias_backward(dbias, dout, N, OC);
}

// ---------------------------------------------------------------------------------------------
// Mixed precision (train.precision = bf16): the same layer with bf16 operands in both products and
// float results. The caller keeps a bf16 copy of W (refreshed from the float master weights before
// each forward) and of the layer's input (written once in the forward, kept for the backward).
// out (N,OC) float = inp_h · W_h + bias.
inline void linear_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N, int C, int OC) {
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::copy(bias, bias + OC, out + (size_t)i * OC);
  }
  gemm(false, false, N, OC, C, 1.0f, inp, C, weight, OC, bias ? 1.0f : 0.0f, out, OC);
}

// dout (N,OC) float is rounded to bf16 into dout_h (N·OC scratch), then
//   dinp (N,C) = dout_h · W_hᵀ  WRITTEN (skipped when null);  dweight (C,OC) += inp_hᵀ · dout_h (float);
//   dbias += column sums of the float dout.
// With a bias, the rounding and the column sums read dout once, together (bias_backward).
inline void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, bf16* dout_h, const bf16* inp,
                            const bf16* weight, int N, int C, int OC) {
  if (dbias) bias_backward(dbias, dout, N, OC, dout_h);
  else to_bf16_rows(dout_h, OC, dout, OC, N, OC);
  if (dinp) gemm(false, true, N, C, OC, 1.0f, dout_h, OC, weight, OC, 0.0f, dinp, C);
  gemm(true, false, C, OC, N, 1.0f, inp, C, dout_h, OC, 1.0f, dweight, OC);
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
