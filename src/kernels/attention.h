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
//   AArch64, else one lane; "Kernel sets" in attention/kernel_set.h); double (the finite-difference tests) runs the
//   one-lane path of the same code.
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
//
// Where things are. This header is the one to include; it includes the parts, one concern each:
//   attention/shape.h         AttentionShape, AttentionExtras, packed_attention_shape, the checks
//   attention/reference.h     the naive forward and backward (the tests' oracle, the math in plain code)
//   attention/query_chunks.h  the backward's split of queries into chunks (shape and tile only)
//   attention/kernel_set.h    the kernel sets and the run-time choice (defined in attention.cpp)
//   simd.h                    the SIMD layer: Simd<T, Target>, the one vector abstraction of the kernels
// and, once per kernel set, the fast kernels (attention/set_body.h):
//   simd_set.inc              the set's Simd: AVX-512, AVX2 + FMA or NEON intrinsics for float
//   attention/tile.h          tile sizes, the micro-kernel behind tile_product, packing and copies
//   attention/decode.h        a decoding step: one query row per head
//   attention/forward.h       forward tasks (online softmax) and the set's attention_forward
//   attention/backward.h      backward tasks, the chunked split, the set's attention_backward
// The x86 sets are compiled by attention_avx512.cpp and attention_avx2.cpp (attention_set.inc);
// attention.cpp picks one at run time and holds the float entry points.
#pragma once
// What the kernel sets' bodies (attention/set_body.h) use, included here, before any set's target
// region: a standard header first included inside one would be compiled for that instruction set.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "kernels/attention/kernel_set.h"
#include "kernels/attention/query_chunks.h"
#include "kernels/attention/reference.h"
#include "kernels/attention/shape.h"
#include "kernels/simd.h"

// GCC 12 reports its own AVX-512 intrinsics (which start from _mm512_undefined_*) as "maybe
// uninitialized" once inlined (GCC bug 105593, fixed in GCC 13); the warning is silenced for this
// header only. The sets' Simd<float> (kernels/simd_set.inc), which callers may inline anywhere,
// uses the zero-masking forms (_mm512_maskz_*) of such intrinsics instead, which start from zero.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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
#include "kernels/attention/set_body.h"
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

}  // namespace attnlab::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
