// The model's tracing hook (docs/analysis.md): an optional observer that GPT::forward calls with
// views of what it has just computed, for the diagnostics of docs/mechanisms.md §8. With no observer
// set (the default, and always in training) the forward pays one null-pointer test per layer and
// allocates nothing. Views point into the forward's own buffers and are valid only during the call.
//
// The observer is called from the uncached forward only (training workspace: eval_loss, logits,
// train_micro_step), never from forward_cached.
#pragma once
#include "kernels/attention/shape.h"
#include "kernels/goat.h"

namespace attnlab {

// One attention layer of the forward, as the fused kernel saw it (§1.1–§3.4). Logit of query row i
// (absolute position t_i = i) and key j ≤ i for query head h, KV head κ = h/(H/Hkv):
//   ℓ_ij = scale·q_i·k_j − alibi[h]·(i − j)           (q, k: the packed lanes below, all Dh of them)
// and a_ij = exp(ℓ_ij − lse_i), where lse includes the sink (with its GOAT row slope) when present.
template <class T>
struct AttentionView {
  int layer = 0;                       // 0-based
  int B = 0, seq = 0, H = 0, Hkv = 0, Dh = 0;  // seq: tokens per sequence (T)
  const T* qkv = nullptr;              // (B, T, (H+2Hkv)·Dh) at qkv_stride: q heads, k heads, v heads; RoPE
  int qkv_stride = 0;                  // applied, GOAT's lanes packed (§3.4: q_c already /sqrt(D_c))
  const T* out = nullptr;              // (B, T, H·Dh): the head outputs z (= y without XSA)
  const T* lse = nullptr;              // (B, H, T): row log-sum-exp of the logits
  T scale = 0;                         // 1/sqrt(Dh), or 1 on GOAT layers
  const T* alibi_slopes = nullptr;     // [H] or null
  const T* sink = nullptr;             // [H] learned sink logits or null
  const T* sink_slope = nullptr;       // [H] GOAT's sink row slope softplus(ρ) or null
  const T* xsa_gamma = nullptr;        // [H] XSA's γ on this layer, null when XSA is off here
  const T* xsa_c = nullptr;            // (B, H, T): c = y·v̂ (§2.1), so y = z + γ·c·v̂
  // GOAT layers (§3): the shape, the parameters and the constant tables; null elsewhere.
  const kernels::GoatShape* goat_shape = nullptr;
  const kernels::GoatParams<T>* goat = nullptr;
  const kernels::GoatTables<T>* goat_tables = nullptr;

  const T* q(int b, int t, int h) const { return qkv + ((size_t)b * seq + t) * qkv_stride + (size_t)h * Dh; }
  const T* k(int b, int t, int kv) const { return qkv + ((size_t)b * seq + t) * qkv_stride + (size_t)(H + kv) * Dh; }
  const T* v(int b, int t, int kv) const { return qkv + ((size_t)b * seq + t) * qkv_stride + (size_t)(H + Hkv + kv) * Dh; }
  const T* z(int b, int t, int h) const { return out + ((size_t)b * seq + t) * H * Dh + (size_t)h * Dh; }
  T row_lse(int b, int h, int t) const { return lse[((size_t)b * H + h) * seq + t]; }
};

// What a residual kind shows of its last forward (Residual::inspect, called by GPT::forward after
// the read-out when an observer asks for it). Sublayers are q = 1..S (S = 2L), the read-out is
// q = S+1. Every callback has a default that ignores it; a kind calls those that apply to it.
template <class T>
class ResidualInspector {
 public:
  virtual ~ResidualInspector() = default;
  // AttnRes (stream 0) and DAR (streams 0, 1): the depth weights of read q, (N, n_cand) row-major.
  // Columns 0..n_entries−1 are history entries 0..n_entries−1; a column beyond is the partial block
  // state. a == nullptr: a single candidate read with weight exactly 1 (AttnRes's h_1 = e).
  virtual void depth_weights(int /*q*/, int /*stream*/, const T* /*a*/, int /*N*/, int /*n_cand*/, int /*n_entries*/) {}
  // AttnRes (stream 0) and DAR: history entry r of a stream, (N, C).
  virtual void history_entry(int /*r*/, int /*stream*/, const T* /*x*/, int /*N*/, int /*C*/) {}
  // DAR: the read R^j of read q (after W_V with sep_v), (N, C).
  virtual void stream_read(int /*q*/, int /*j*/, const T* /*R*/, int /*N*/, int /*C*/) {}
  // HC and mHC: sublayer l's maps, (N, 2n + n²) per token: [pre (n) | post (n) | res (n×n, row-major)],
  // the read weights, the write gains and M with X′_s = Σ_u M_su X_u + post_s·o (mHC: Hpre, Hpost,
  // Hres; HC: m, β and A transposed, §8.3).
  virtual void stream_maps(int /*l*/, const T* /*maps*/, int /*N*/, int /*n*/) {}
  // HC and mHC: the n streams after sublayer l (l = 0: the expanded embedding), (N, n, C).
  virtual void streams(int /*l*/, const T* /*X*/, int /*N*/, int /*n*/, int /*C*/) {}
};

// The observer GPT::forward calls when one is set (GPT::set_observer).
template <class T>
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // After layer view.layer's attention kernel (before W_o).
  virtual void attention(const AttentionView<T>& /*view*/) {}
  // After the read-out: return an inspector to be shown the residual kind's states, or null.
  virtual ResidualInspector<T>* residual() { return nullptr; }
};

}  // namespace attnlab
