// attnlab kernels, fused attention: what a call is. AttentionShape (sizes and strides of q, k, v and
// the output), AttentionExtras (the optional terms besides the sink) and their checks. The kernel,
// its layout and its algorithm: kernels/attention.h, the header to include.
#pragma once
#include "core/error.h"

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

// Checks that the optional terms come with what they need (a programming error upstream if not).
template <class T>
void check_attention_extras(const AttentionExtras<T>& x, const T* sink, const char* who) {
  if (x.sink_slope && !sink) fail(who, ": sink_slope needs the sink logits");
  if (x.dsink_slope && !x.sink_slope) fail(who, ": dsink_slope is given but sink_slope is null");
  if (x.xsa_gamma && !x.xsa_c) fail(who, ": XSA needs the row buffer xsa_c [B, H, Tq]");
  if (x.dxsa_gamma && !x.xsa_gamma) fail(who, ": dxsa_gamma is given but xsa_gamma is null");
}

}  // namespace attnlab::kernels
