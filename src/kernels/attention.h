// attnlab kernels: fused causal self-attention (flash-style), docs/mechanisms.md §1.1 (forward and
// Backward), §1.3 (learned sink), §1.2 (ALiBi bias). The invariants of §1.5 are tested in
// tests/kernels/test_attention.cpp; bench/attention_bench.cpp measures GFLOP/s.
//
// Layout. q, k, v usually live in one packed qkv buffer (B, T, (H + 2·Hkv)·Dh): a token's query
// heads, then its key heads, then its value heads. AttentionShape carries the strides, so the same
// kernel also reads a KV cache (k/v in their own (B, capacity, Hkv·Dh) buffers) with Tq < Tk.
//
// Algorithm (fast path). Nothing of size T×T is ever stored:
// - Forward, one task per (b, h, query tile of kTile rows): online softmax over key tiles; only the
//   row log-sum-exp is saved. Scores are computed transposed, Sᵀ[key][query], so the running max and
//   sum are vectors over queries (no horizontal reductions).
// - Backward, one task per (b, kv head): it owns dk, dv of its keys and dq of its G query heads, so
//   nothing is shared between threads (no atomics). Key tiles are the outer loop (dK, dV stay in
//   local tiles); probabilities are recomputed from lse; D_i = dout_i·out_i is computed once per task.
//   With few (b, kv head) pairs (long contexts at B = 1), and a scratch from the caller, each pair's
//   queries are cut into chunks of equal work, one task each, whose partial dK, dV are added up in
//   chunk order afterwards (attention_backward): both cores work, still without atomics.
// - Every matrix product of a tile goes through one register-blocked micro-kernel (tile_product):
//   C[r][lanes] (+)= Σ_k A[r,k]·B[k][lanes], A broadcast from any strided layout, B loaded as
//   vectors from a contiguous copy. On tiles that cross the diagonal, the products skip the
//   (query, key) blocks that are entirely masked (KBand and bands of kBand rows).
// - float runs the widest kernel set the CPU has, chosen at run time (AVX-512, AVX2 + FMA, NEON on
//   AArch64, else one lane; "Kernel sets" below); double (the finite-difference tests) runs the
//   one-lane path of the same code. The kernels' body is kernels/attention_impl.h.
// - No heap allocation: tiles live on the stack, sized for Dh <= kAttentionMaxHeadDim (about
//   210 KiB per thread in the forward and 520 KiB in the backward, in float; the default 8 MiB
//   thread stacks hold them, OMP_STACKSIZE must not be set below 1 MiB).
//
// Mechanisms inside the kernel (AttentionExtras):
// - ALiBi (§1.2): a per-(i, j) bias added after the Sᵀ product (forward) and in the element-wise
//   loop of the backward.
// - XSA (§2): a per-row epilogue of the forward (z = y − γ(y·v̂)v̂, c saved); in the backward the
//   copied dO rows become dy = g − γ(g·v̂)v̂, D_i = g_i·z_i is unchanged, and each key that is also
//   a query adds its direct own-value term to its dV tile before the tile is written.
// - GOAT (§3): its prior rides in extra q/k lanes packed by the model (model/goat.h), so the kernel
//   only needs the row-dependent sink logit of the key form (sink_slope).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#if defined(__SSE__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "core/error.h"

// GCC 12 reports its own AVX-512 intrinsics (which start from _mm512_undefined_*) as "maybe
// uninitialized" once inlined (GCC bug 105593, fixed in GCC 13); the warning is silenced for this
// header only. Simd<float>, which callers may inline anywhere, uses the zero-masking forms
// (_mm512_maskz_*) of such intrinsics instead, which start from zero.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attnlab::kernels {

struct AttentionShape {
  int B, Tq, Tk, H, Hkv, Dh;  // query heads H, KV heads Hkv (H % Hkv == 0, query head h reads kv head h/(H/Hkv))
  int q_stride;               // elements between consecutive query tokens (packed qkv: (H+2Hkv)*Dh)
  long q_batch_stride;        // elements between batches of q (usually Tq*q_stride)
  int kv_stride;              // elements between consecutive key tokens in k and v
  long kv_batch_stride;       // elements between batches of k/v (a KV cache: capacity*kv_stride)
  int out_stride;             // elements between output tokens (H*Dh), out batch stride = Tq*out_stride
  int pos_offset;             // query i sits at absolute position pos_offset+i and sees keys 0..pos_offset+i (Tk >= pos_offset+Tq)
};

// Optional terms of the attention computation besides the sink. All pointers may be null (off).
// - alibi_slopes [H]: ALiBi bias −m_h(t_i − t_j) on every logit (§1.2).
// - sink_slope [H]: the sink logit of query row i becomes sink[h] + sink_slope[h]·t_i (t_i =
//   pos_offset + i). GOAT's key form (§3.4) shifts every logit of row i by softplus(ρ)·t_i; the
//   sink must move with them to keep the relative-form probabilities. Needs a sink.
// - xsa_gamma [H]: XSA (§2.1): the output row is z = y − γ_h (y·v̂)v̂ with v̂ the token's own
//   value (key pos_offset + i of the query's KV head); γ = 1 is mode "on", tanh(a) the gated mode.
//   Needs xsa_c: [B, H, Tq], c = y·v̂ per row, WRITTEN by the forward and read by the backward
//   (it recovers y = z + γ·c·v̂ without storing y).
// Backward outputs (+=, may be null): dsink_slope [H] (needs sink_slope); dxsa_gamma [H] = dL/dγ_h
// (the caller applies the chain rule of its own parametrization, e.g. 1 − γ² for γ = tanh a).
template <class T>
struct AttentionExtras {
  const T* alibi_slopes = nullptr;
  const T* sink_slope = nullptr;
  const T* xsa_gamma = nullptr;
  T* xsa_c = nullptr;
  T* dsink_slope = nullptr;
  T* dxsa_gamma = nullptr;
};

// XSA's norm floor ε of §2.3 (on ‖v‖, not ‖v‖²).
inline constexpr double kXsaEps = 1e-12;

// The shape of plain self-attention over a packed qkv buffer (B, T, (H+2Hkv)*Dh): q at qkv,
// k at qkv + H*Dh, v at qkv + (H+Hkv)*Dh, output (B, T, H*Dh).
inline AttentionShape packed_attention_shape(int B, int T, int H, int Hkv, int Dh) {
  const int stride = (H + 2 * Hkv) * Dh;
  return AttentionShape{B, T, T, H, Hkv, Dh, stride, long(T) * stride, stride, long(T) * stride, H * Dh, 0};
}

// The largest head size the fast path's stack tiles hold (kMaxHeadDim·kTile values per tile).
inline constexpr int kAttentionMaxHeadDim = 256;

// Shapes come from the model configuration, so a bad one is a programming error upstream; it is
// still reported, never a crash.
inline void check_attention_shape(const AttentionShape& s, const char* who) {
  if (s.B < 1 || s.Tq < 1 || s.Tk < 1 || s.H < 1 || s.Hkv < 1 || s.Dh < 1)
    fail(who, ": B, Tq, Tk, H, Hkv and Dh must be positive (got B=", s.B, " Tq=", s.Tq, " Tk=", s.Tk, " H=", s.H,
         " Hkv=", s.Hkv, " Dh=", s.Dh, ")");
  if (s.H % s.Hkv != 0) fail(who, ": n_head ", s.H, " is not a multiple of kv_heads ", s.Hkv, "; choose kv_heads dividing n_head");
  if (s.pos_offset < 0 || s.Tk < s.pos_offset + s.Tq)
    fail(who, ": need 0 <= pos_offset and Tk >= pos_offset + Tq (got pos_offset=", s.pos_offset, " Tq=", s.Tq, " Tk=", s.Tk, ")");
  if (s.Dh > kAttentionMaxHeadDim)
    fail(who, ": head size ", s.Dh, " exceeds the supported maximum ", kAttentionMaxHeadDim, "; use more heads");
  if (s.q_stride < s.H * s.Dh || s.kv_stride < s.Hkv * s.Dh || s.out_stride < s.H * s.Dh ||
      s.q_batch_stride < long(s.Tq - 1) * s.q_stride + s.H * s.Dh ||
      s.kv_batch_stride < long(s.Tk - 1) * s.kv_stride + s.Hkv * s.Dh)
    fail(who, ": strides are too small for the heads they hold (q_stride=", s.q_stride, " kv_stride=", s.kv_stride,
         " out_stride=", s.out_stride, ")");
}

// ---------------------------------------------------------------------------------------------
// Naive references: the oracle of the tests and the plain statement of the math (§1.1, §1.3).
// One softmax row at a time, in double, with no tiling and no saved state.
// ---------------------------------------------------------------------------------------------

// XSA's projection of one row in double (§2.1): z = y − γ c v̂, c = y·v̂; returns c. Also used by
// the naive backward to rebuild z from y.
inline double xsa_project_naive(double* z, const double* y, const double* v, double gamma, int Dh) {
  double n2 = 0;
  for (int d = 0; d < Dh; ++d) n2 += v[d] * v[d];
  const double n = std::max(std::sqrt(n2), kXsaEps);
  double c = 0;
  for (int d = 0; d < Dh; ++d) c += y[d] * v[d] / n;
  for (int d = 0; d < Dh; ++d) z[d] = y[d] - gamma * c * v[d] / n;
  return c;
}

// out (B,Tq,H*Dh) at out_stride; lse (B,H,Tq). q, k, v, sink, x as in attention_forward.
template <class T>
void attention_forward_naive(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                             const AttentionShape& s, const AttentionExtras<T>& x = {}) {
  check_attention_shape(s, "attention_forward_naive");
  const int G = s.H / s.Hkv;
  std::vector<double> logit(s.Tk), acc(s.Dh), vown(s.Dh), z(s.Dh);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.Tq; ++i) {
        const T* qi = q + b * s.q_batch_stride + long(i) * s.q_stride + h * s.Dh;
        const int kappa = h / G, pos = s.pos_offset + i;
        const double sink_logit =
            sink ? double(sink[h]) + (x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0) : -INFINITY;
        double m = sink_logit;
        for (int j = 0; j <= pos; ++j) {
          const T* kj = k + b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * s.Dh;
          double dot = 0;
          for (int d = 0; d < s.Dh; ++d) dot += double(qi[d]) * double(kj[d]);
          logit[j] = dot * double(scale) - (x.alibi_slopes ? double(x.alibi_slopes[h]) * (pos - j) : 0.0);
          m = std::max(m, logit[j]);
        }
        double Z = sink ? std::exp(sink_logit - m) : 0.0;  // the sink joins Z with a zero value vector
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j <= pos; ++j) {
          const T* vj = v + b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * s.Dh;
          const double p = std::exp(logit[j] - m);
          Z += p;
          for (int d = 0; d < s.Dh; ++d) acc[d] += p * double(vj[d]);
        }
        for (int d = 0; d < s.Dh; ++d) acc[d] /= Z;
        T* oi = out + (long(b) * s.Tq + i) * s.out_stride + h * s.Dh;
        if (x.xsa_gamma) {
          const T* vi = v + b * s.kv_batch_stride + long(pos) * s.kv_stride + kappa * s.Dh;
          for (int d = 0; d < s.Dh; ++d) vown[d] = double(vi[d]);
          const double c = xsa_project_naive(z.data(), acc.data(), vown.data(), double(x.xsa_gamma[h]), s.Dh);
          x.xsa_c[(long(b) * s.H + h) * s.Tq + i] = T(c);
          for (int d = 0; d < s.Dh; ++d) oi[d] = T(z[d]);
        } else {
          for (int d = 0; d < s.Dh; ++d) oi[d] = T(acc[d]);
        }
        lse[(long(b) * s.H + h) * s.Tq + i] = T(m + std::log(Z));
      }
}

// dq, dk, dv WRITTEN (layouts of q, k, v); dsink += (if non-null); x.dsink_slope, x.dxsa_gamma +=.
// dout is dL/d(out): with XSA that is g = dL/dz. The reference recomputes the probabilities, y and
// z in double from q, k, v, so it ignores `out`, `lse` and x.xsa_c (kept for the signature).
template <class T>
void attention_backward_naive(T* dq, T* dk, T* dv, T* dsink, const T* dout, const T* /*out*/, const T* /*lse*/,
                              const T* q, const T* k, const T* v, const T* sink, T scale, const AttentionShape& s,
                              const AttentionExtras<T>& x = {}) {
  check_attention_shape(s, "attention_backward_naive");
  const int G = s.H / s.Hkv, Dh = s.Dh;
  std::vector<double> a(s.Tk), y(Dh), dqi(Dh), g(Dh), z(Dh), vhat(Dh);
  std::vector<double> dk_acc(size_t(s.Tk) * Dh), dv_acc(size_t(s.Tk) * Dh);
  for (int b = 0; b < s.B; ++b)
    for (int kappa = 0; kappa < s.Hkv; ++kappa) {
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      const T* kb = k + b * s.kv_batch_stride + kappa * Dh;
      const T* vb = v + b * s.kv_batch_stride + kappa * Dh;
      for (int h = kappa * G; h < (kappa + 1) * G; ++h)
        for (int i = 0; i < s.Tq; ++i) {
          const T* qi = q + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
          const T* gi = dout + (long(b) * s.Tq + i) * s.out_stride + h * Dh;
          const int pos = s.pos_offset + i;
          // a_ij = softmax over j <= pos (and the sink) of the logits (§1.1, §1.3)
          const double sink_logit =
              sink ? double(sink[h]) + (x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0) : -INFINITY;
          double m = sink_logit;
          for (int j = 0; j <= pos; ++j) {
            double dot = 0;
            for (int d = 0; d < Dh; ++d) dot += double(qi[d]) * double(kb[long(j) * s.kv_stride + d]);
            a[j] = dot * double(scale) - (x.alibi_slopes ? double(x.alibi_slopes[h]) * (pos - j) : 0.0);
            m = std::max(m, a[j]);
          }
          double Z = sink ? std::exp(sink_logit - m) : 0.0;
          for (int j = 0; j <= pos; ++j) Z += (a[j] = std::exp(a[j] - m));
          std::fill(y.begin(), y.end(), 0.0);
          for (int j = 0; j <= pos; ++j) {
            a[j] /= Z;
            for (int d = 0; d < Dh; ++d) y[d] += a[j] * double(vb[long(j) * s.kv_stride + d]);
          }
          for (int d = 0; d < Dh; ++d) g[d] = double(gi[d]);
          if (x.xsa_gamma) {
            // §2.2: dy = g − γ(g·v̂)v̂; the own value gets the direct term; dγ = Σ −c·(g·v̂).
            const double gamma = double(x.xsa_gamma[h]);
            const T* vi = vb + long(pos) * s.kv_stride;
            double n2 = 0;
            for (int d = 0; d < Dh; ++d) n2 += double(vi[d]) * double(vi[d]);
            const double nrm = std::sqrt(n2), n = std::max(nrm, kXsaEps);
            for (int d = 0; d < Dh; ++d) vhat[d] = double(vi[d]) / n;
            double c = 0, gv = 0;
            for (int d = 0; d < Dh; ++d) c += y[d] * vhat[d], gv += g[d] * vhat[d];
            double* dvi = &dv_acc[size_t(pos) * Dh];
            for (int d = 0; d < Dh; ++d) {
              const double dvhat = -gamma * (c * g[d] + gv * y[d]);
              dvi[d] += nrm > kXsaEps ? (dvhat + gamma * 2 * c * gv * vhat[d]) / n : dvhat / kXsaEps;
            }
            if (x.dxsa_gamma) x.dxsa_gamma[h] += T(-c * gv);
            for (int d = 0; d < Dh; ++d) g[d] -= gamma * gv * vhat[d];  // g is now dy
          }
          double D = 0;  // D_i = dy_i·y_i
          for (int d = 0; d < Dh; ++d) D += g[d] * y[d];
          std::fill(dqi.begin(), dqi.end(), 0.0);
          for (int j = 0; j <= pos; ++j) {
            double gv = 0;
            for (int d = 0; d < Dh; ++d) gv += g[d] * double(vb[long(j) * s.kv_stride + d]);
            const double dl = a[j] * (gv - D);  // dℓ_ij
            for (int d = 0; d < Dh; ++d) {
              dqi[d] += dl * double(kb[long(j) * s.kv_stride + d]) * double(scale);
              dk_acc[size_t(j) * Dh + d] += dl * double(qi[d]) * double(scale);
              dv_acc[size_t(j) * Dh + d] += a[j] * g[d];
            }
          }
          T* dqo = dq + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
          for (int d = 0; d < Dh; ++d) dqo[d] = T(dqi[d]);
          const double dsink_i = -std::exp(sink_logit - m) / Z * D;  // ds = −p_sink·D (§1.3)
          if (dsink) dsink[h] += T(dsink_i);
          if (x.dsink_slope) x.dsink_slope[h] += T(dsink_i * pos);
        }
      for (int j = 0; j < s.Tk; ++j)
        for (int d = 0; d < Dh; ++d) {
          dk[b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * Dh + d] = T(dk_acc[size_t(j) * Dh + d]);
          dv[b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * Dh + d] = T(dv_acc[size_t(j) * Dh + d]);
        }
    }
}

// Checks that the optional terms come with what they need (a programming error upstream if not).
template <class T>
void check_attention_extras(const AttentionExtras<T>& x, const T* sink, const char* who) {
  if (x.sink_slope && !sink) fail(who, ": sink_slope needs the sink logits");
  if (x.dsink_slope && !x.sink_slope) fail(who, ": dsink_slope is given but sink_slope is null");
  if (x.xsa_gamma && !x.xsa_c) fail(who, ": XSA needs the row buffer xsa_c [B, H, Tq]");
  if (x.dxsa_gamma && !x.xsa_gamma) fail(who, ": dxsa_gamma is given but xsa_gamma is null");
}

// The backward's split over queries (see attention_backward): with fewer than kAttentionBackwardTasks
// (b, kv head) pairs, each pair's queries are cut into chunks of about equal work, up to
// kAttentionMaxQueryChunks and at most one per query tile (tile: the kernel set's, e.g.
// attention_kernels().tile). The count depends on the shape and the tile only, never on the thread
// count, so the results do not either.
inline constexpr int kAttentionBackwardTasks = 8;
inline constexpr int kAttentionMaxQueryChunks = 8;

inline int attention_query_chunks(const AttentionShape& s, int tile) {
  const long pairs = long(s.B) * s.Hkv;
  if (pairs >= kAttentionBackwardTasks) return 1;
  const long tiles = (s.Tq + tile - 1) / tile;
  return int(std::min({(kAttentionBackwardTasks + pairs - 1) / pairs, tiles, long(kAttentionMaxQueryChunks)}));
}

// bounds[0..n]: query chunk c is [bounds[c], bounds[c+1]), whole query tiles (the last one may be
// short), each at least one tile, cut where the work Σ_i (pos_offset + i + 1) (keys seen, summed
// over the chunk's rows) first reaches c/n of the total. Integer arithmetic: the same cuts always.
inline void split_attention_queries(const AttentionShape& s, int n, int tile, int* bounds) {
  const long tiles = (s.Tq + tile - 1) / tile;
  auto work = [&](long rows) { return rows * s.pos_offset + rows * (rows + 1) / 2; };  // rows 0..rows−1
  const long total = work(s.Tq);
  bounds[0] = 0;
  long t = 0;
  for (int c = 1; c < n; ++c) {
    while (t < tiles && work(std::min(t * tile, long(s.Tq))) < total * c / n) ++t;
    t = std::clamp(t, long(bounds[c - 1] / tile + 1), tiles - (n - c));
    bounds[c] = int(t * tile);
  }
  bounds[n] = s.Tq;
}

}  // namespace attnlab::kernels

// The fast kernels as the compile flags allow them (set `baseline`): double (the finite-difference
// tests) always runs these; float goes through the run-time choice below.
#if defined(__AVX512F__)
#define ATTNLAB_KERNEL_SIMD 2
#elif defined(__AVX2__) && defined(__FMA__)
#define ATTNLAB_KERNEL_SIMD 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#define ATTNLAB_KERNEL_SIMD 3  // NEON is part of every AArch64 CPU: the baseline set is 4-lane there
#else
#define ATTNLAB_KERNEL_SIMD 0
#endif
#define ATTNLAB_KERNEL_SET baseline
#include "kernels/attention_impl.h"
#undef ATTNLAB_KERNEL_SET
#undef ATTNLAB_KERNEL_SIMD

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

// Causal attention forward (§1.1, with the learned sink of §1.3, ALiBi of §1.2, GOAT's sink slope
// of §3.4 and XSA of §2.1: see AttentionExtras).
// q at q + b*q_batch_stride + i*q_stride + h*Dh; k/v at k + b*kv_batch_stride + j*kv_stride + kappa*Dh.
// out (B,Tq,H*Dh) at out_stride (z under XSA); lse (B,H,Tq) = row log-sum-exp (including the sink
// term), saved for the backward. sink: [H] learned sink logits or nullptr. scale = 1/sqrt(Dh)
// normally. No heap allocation (about 210 KiB of stack per thread, in float; see the top of this file).
template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                       const AttentionShape& s, const AttentionExtras<T>& x = {}) {
  baseline::attention_forward(out, lse, q, k, v, sink, scale, s, x);
}

// Scratch elements attention_backward uses for this shape, for a team of omp_get_max_threads()
// threads: to split it over more tasks than B·Hkv, the partial dK, dV sums of every query chunk but
// the last (none when B·Hkv pairs are enough tasks); then one pack per thread, 3·(H/Hkv)·Tq·Dh
// elements (Dh rounded up to whole vectors), where a task keeps its Q, dO and dQ rows contiguous.
template <class T>
size_t attention_backward_scratch_size(const AttentionShape& s) {
  return baseline::attention_backward_scratch_size<T>(s);
}

// Causal attention backward (§1.1 Backward, §1.3, §2.2). dq, dk, dv WRITTEN, with the layouts and
// strides of q, k, v (in the packed dqkv buffer only the q/k/v parts are written). dsink [H] += (if
// non-null; needs sink); x.dsink_slope, x.dxsa_gamma += (if non-null). dout = dL/d(out) (g = dL/dz
// under XSA), out and lse from attention_forward with the same x.
// D_i = dout_i·out_i is computed inside and probabilities are recomputed from lse: no B×H×T×T
// buffer anywhere. No heap allocation (about 550 KiB of stack per thread in float, and the scratch).
// Parallel split: one task per (b, kv head) owns dQ of its G query heads and dK, dV of its keys.
// With fewer pairs than kAttentionBackwardTasks (long contexts at B = 1 leave threads idle
// otherwise) and a caller's scratch of attention_backward_scratch_size(s) elements, each pair's
// queries are cut into chunks of about equal work, one task each: a task owns dQ of its rows and
// writes the dK, dV its rows give to their keys, into the scratch (the last chunk, whose rows see
// every key, into dk, dv); a second pass adds the partial sums to dk, dv in chunk order.
// Deterministic, and since the chunks depend on the shape (and the set's tile) only, independent of
// the thread count. A smaller scratch gives fewer chunks. With room for the packs as well, each
// task copies its query rows (Q, dO) once into its thread's pack and sums dQ there: without them it
// copies a query tile's rows, strided in q and dout, again for every key tile (the same bits).
template <class T>
void attention_backward(T* dq, T* dk, T* dv, T* dsink, const T* dout, const T* out, const T* lse, const T* q,
                        const T* k, const T* v, const T* sink, T scale, const AttentionShape& s,
                        const AttentionExtras<T>& x = {}, T* scratch = nullptr, size_t scratch_size = 0) {
  baseline::attention_backward(dq, dk, dv, dsink, dout, out, lse, q, k, v, sink, scale, s, x, scratch, scratch_size);
}

// float: the kernel set chosen at run time (src/kernels/attention.cpp).
template <>
void attention_forward<float>(float* out, float* lse, const float* q, const float* k, const float* v,
                              const float* sink, float scale, const AttentionShape& s,
                              const AttentionExtras<float>& x);
template <>
size_t attention_backward_scratch_size<float>(const AttentionShape& s);
template <>
void attention_backward<float>(float* dq, float* dk, float* dv, float* dsink, const float* dout, const float* out,
                               const float* lse, const float* q, const float* k, const float* v, const float* sink,
                               float scale, const AttentionShape& s, const AttentionExtras<float>& x, float* scratch,
                               size_t scratch_size);

// ---------------------------------------------------------------------------------------------
// Kernel sets. One build carries the float kernels for several instruction sets and picks one at
// run time, the widest this CPU runs, so a binary built for a portable target (the `portable`
// preset) still uses AVX-512 or AVX2 where the CPU has them. On x86-64: avx512 (16 lanes), avx2
// (AVX2 + FMA, 8 lanes) and baseline (what the compile flags allow: one lane for a plain x86-64
// target, the widest of the two under -march=native). AArch64: baseline only, which is NEON (4
// lanes; every AArch64 CPU has it). Other CPUs: baseline, one lane. The environment
// variable ATTNLAB_KERNELS=<name> forces a set (an error if this CPU cannot run it), as does
// use_attention_kernels. Sets differ by float rounding only; the tests run each set this CPU has
// against the same references.
// ---------------------------------------------------------------------------------------------
struct AttentionKernelSet {
  const char* name;
  int lanes;  // float lanes per vector
  int tile;   // query rows per forward task, keys per backward tile
  void (*forward)(float*, float*, const float*, const float*, const float*, const float*, float,
                  const AttentionShape&, const AttentionExtras<float>&);
  size_t (*backward_scratch_size)(const AttentionShape&);
  void (*backward)(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                   const float*, const float*, const float*, float, const AttentionShape&,
                   const AttentionExtras<float>&, float*, size_t);
  void (*vector_exp)(float*, const float*, int);
};

// The AttentionKernelSet of the kernels in namespace attnlab::kernels::<set> (attention_impl.h),
// named after it. Two levels, so a macro argument (attention_set.inc passes ATTNLAB_KERNEL_SET)
// is expanded before # turns it into the name.
#define ATTNLAB_ATTENTION_KERNEL_SET(set) ATTNLAB_ATTENTION_KERNEL_SET_(set)
#define ATTNLAB_ATTENTION_KERNEL_SET_(set)                                                             \
  ::attnlab::kernels::AttentionKernelSet {                                                           \
    #set, set::detail::Simd<float>::W, set::detail::kTile<float>, &set::attention_forward<float>,    \
        &set::attention_backward_scratch_size<float>, &set::attention_backward<float>,                \
        &set::vector_exp<float>                                                                      \
  }

// The active set: chosen at the first call (ATTNLAB_KERNELS if set, else the widest this CPU runs).
const AttentionKernelSet& attention_kernels();
// Names of the sets this binary carries and this CPU runs, widest first.
std::vector<std::string> attention_kernel_sets();
// Makes `name` the active set; fails, naming the sets available, if it is unknown or this CPU
// cannot run it. Not safe while kernels run on other threads: call it between steps.
void use_attention_kernels(std::string_view name);

}  // namespace attnlab::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
