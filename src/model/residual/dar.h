// DAR, Dual Attention Residuals: docs/mechanisms.md §6 (this project's reconstruction, version 1).
//
// Two residual streams j ∈ {0, 1}, each with its history of completed entries (H^j_0 = e) and a partial
// block state P^j. Before sublayer l, each target stream j attends over depth with keys from stream
// ks(j) and values from stream vs(j) (§6.2 routing) through the primitive of §4.1
// (kernels/depth_attention.h); the two reads R⁰, R¹ are mixed per channel, x_l = α∘R⁰ + (1−α)∘R¹, into
// the input of the unchanged sublayer F_l; its output o_l is written into both partials by a
// near-identity transport ρ_l plus a per-stream gate β^j_l (§6.2). A block closes every K sublayers
// (and after the last one), appending both partials to their histories. The read-out attends over
// every entry of both streams with its own queries and mix.
//
// Storage (§6.5): every partial state after a write, P^j_l (= S^j_l below), is kept once: it is the
// next sublayer's P_old (needed for the transport, its backward and as the partial candidate) or, at
// a block's last sublayer, history entry m of stream j. Each state's key normalisation 1/ρ is computed
// once when it is written. Per sublayer the reads R^j, the mix input x_l (the sublayer's norm input),
// the output o_l (for the gates' gradient), R̄^j with sep_v, and the depth weights a^j are kept.
// Everything is planned in an Arena (two passes); a step allocates nothing. The backward forms each
// history entry's gradient once, from all of its readers, when it reaches the sublayer that
// appended the entry (see "Backward" in dar.cpp for why).
//
// Driving it (the call sequence of the residual interface, src/model/residual/residual.h):
//   F writes the embedding into embedding();  begin(N)
//   for l = 1..S:  h = read(l, N);  F_l(h) into branch(l);  write(l, N)
//   x_F = read_out(N)                          → Norm_f → LM head
//   Norm_f's backward accumulates into read_out_grad(N) (zeroed there);  read_out_backward(N)
//   for l = S..1:  do = branch_grad(l, N);  F_l's backward accumulates into input_grad(l, N) (zeroed
//                  there);  read_backward(l, N)
//   embedding_grad(N)                          d e = δH⁰_0 + δH¹_0, for the embedding backward
// Parameter gradients accumulate (+=) into the bound gradient buffer.
#pragma once
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "model/params.h"

namespace attnlab {

// §6.2 routing table: for target j, keys from stream ks(j), values from stream vs(j).
enum class DarRouting { Reciprocal, SelfKV, CrossV, FixedKV };
DarRouting parse_dar_routing(const std::string& name);  // reciprocal | self_kv | cross_v | fixed_kv
const char* dar_routing_name(DarRouting r);
inline int dar_key_stream(DarRouting r, int j) {
  return r == DarRouting::Reciprocal ? 1 - j : r == DarRouting::FixedKV ? 0 : j;
}
inline int dar_value_stream(DarRouting r, int j) {
  return r == DarRouting::CrossV ? 1 - j : r == DarRouting::FixedKV ? 1 : j;
}

// The `dar.*` and `residual.block_size` keys of §6.6.
struct DarOptions {
  int block_size = 2;  // K, in sublayers; 1 = Full DAR
  DarRouting routing = DarRouting::Reciprocal;
  bool sep_v = false;            // W^j_V on the reads
  bool include_partial = true;   // the partial block state is a candidate
  bool parity_init = true;       // dar.init = parity (true) | uniform (false)
  double tau_init = -6.0;        // τ_l init: t = 0.5σ(−6) = 0.0012363
  double other_b_init = -2.0;    // b on the non-home stream under parity init: β = 2σ(−2) = 0.2384
};

// The options of a resolved configuration (residual.kind = dar).
DarOptions dar_options(const Config& cfg);

// Activation storage per token, in floats, in the categories of §6.5.
struct DarMemory {
  double histories = 0;       // the stream states kept: history entries and the P_old of each sublayer
  double reads = 0;           // per read (2L sublayers and the read-out): R⁰, R¹, R̄ (sep_v), weights, 1/ρ
  double inputs_outputs = 0;  // x_l (the sublayer's norm input: the standard residual keeps x_l too), o_l, x_F
  double backward = 0;        // training: gradients of entries and partials, do, dx, dR (sep_v), D per read
  double forward() const { return histories + reads; }  // what §6.5 counts
};
// §6.5's estimate: histories 2(1 + ceil(2L/K))·d plus P_old 2d at each sublayer with a partial (K ≥ 2);
// per read R⁰, R¹ 2d, R̄ 2d with sep_v, the weights 2N and the partial's 1/ρ (2, where one exists). The
// read-out is not a sublayer in §6.5; it is counted here (2d + 2N) as in ours, so the two compare.
DarMemory dar_memory_estimate(const DarOptions& opt, int n_sublayers, int C);

template <class T>
class Dar {
 public:
  Dar(const DarOptions& opt, int n_sublayers, int C);

  // §6.3 parameters (none weight-decayed) under the names of dar_param_name(): per sublayer
  // l = 1..S the queries w⁰_l, w¹_l (C, 0), the mix logit g_l (C, 0), the transport logit τ_l (1,
  // tau_init), the gate logits b⁰_l, b¹_l (C; parity: 0 on the home stream — 0 for attention, 1 for
  // the MLP — and other_b_init on the other); the read-out's w⁰_F, w¹_F, g_F (C, 0); with sep_v the
  // value maps W⁰_V, W¹_V (C×C, identity).
  static void add_params(ParamRegistry& reg, const DarOptions& opt, int n_sublayers, int C);
  // Binds the parameter and gradient pointers (buffers laid out by reg).
  void bind(const ParamRegistry& reg, T* params, T* grads);

  // Plans storage for up to `rows` tokens per call. Call once per arena pass (the first pass counts,
  // the second, after commit, hands out the buffers and builds the candidate tables). Without
  // `training` only the forward's storage is planned, and the per-sublayer reads, weights, inputs
  // and outputs share one set of buffers (the inference workspace of a KV-cache decoder).
  void plan(Arena& arena, int rows, bool training);
  int planned_rows() const { return cap_rows_; }
  // What plan() takes per token (the thread scratch, independent of the rows, is left out).
  DarMemory memory_per_token(bool training) const;

  // ---- forward ----
  T* embedding() const { return e_; }  // (rows,C): e = x_0, history entry 0 of both streams
  void begin(int N);
  const T* read(int l, int N);          // computes x_l (N,C), l = 1..S
  T* branch(int l) const { return slots_[l].o; }  // (N,C): where F_l writes o_l
  void write(int l, int N);             // the gated write of o_l into both partials (and the block close)
  const T* read_out(int N);             // the read-out x_F (N,C)
  const T* input(int l) const { return slots_[l].x; }       // the saved x_l
  const T* final_input() const { return slots_[S_ + 1].x; }  // the saved x_F

  // ---- backward (training plans only) ----
  T* read_out_grad(int N);              // zeroed (N,C) for Norm_f's backward to accumulate dx_F into
  void read_out_backward(int N);
  const T* branch_grad(int l, int N);   // computes do_l (N,C); accumulates db⁰_l, db¹_l, dτ_l (and, at a
                                        // block's last sublayer, first the appended entry's gradient)
  T* input_grad(int l, int N);          // zeroed (N,C) for F_l's backward to accumulate dx_l into
  void read_backward(int l, int N);     // accumulates dg, dW_V and the partial candidate's gradient; at
                                        // l = 1 also forms d e and adds the query gradients into dw
  const T* embedding_grad(int) const { return d_e_; }

  // ---- introspection (tests, diagnostics) ----
  int n_sublayers() const { return S_; }
  int n_entries() const { return M_; }  // 1 + ceil(S/K)
  int num_candidates(int q) const { return slots_[q].n_cand; }  // q = 1..S, or S+1 for the read-out
  const T* depth_weights(int q, int j) const { return slots_[q].a[j]; }  // (rows, num_candidates(q))
  const T* stream_read(int q, int j) const { return slots_[q].R[j]; }     // R^j (rows,C), after the forward

  const T* state(int l, int s) const { return slots_[l].S[s]; }           // P^s after sublayer l
  const T* entry(int r, int s) const;                                     // H^s_r (rows,C)
  const T* entry_grad(int r, int s) const { return r == 0 ? d_e_ : d_entry_[s][r]; }  // δH^s_r after the backward
  const DarOptions& options() const { return opt_; }
  // §8.5 rescue gain: while set, read q's R^j is replaced by src (rows, C) before the mix (null clears).
  void set_read_patch(int q, int j, const T* src);

 private:
  struct Slot {  // one sublayer l = 1..S, or the read-out (index S+1)
    int n_cand = 0, entry_closed = -1;  // entry index appended after l, or -1
    bool partial_present = false;       // a partial block state exists before l
    T *x = nullptr, *o = nullptr, *R[2] = {}, *Rbar[2] = {}, *a[2] = {}, *S[2] = {}, *S_inv[2] = {};
    T *D[2] = {}, *sc[2] = {};  // training: dR̄^j·R̄^j per token; the logits s^j (rows, n_cand)
    const T* patch[2] = {};     // diagnostics (§8.5): replacements of R^j, null when unpatched
    // parameters (and their gradients): queries, mix logit, transport logit, gate logits
    T *w[2] = {}, *g = nullptr, *tau = nullptr, *b[2] = {};
    T *dw[2] = {}, *dg = nullptr, *dtau = nullptr, *db[2] = {};
    // coefficients of this forward: α, 1−α = σ(−g), β^j = 2σ(b^j), t = 0.5σ(τ)
    T *alpha = nullptr, *alpha_c = nullptr, *beta[2] = {};
    T t = 0;
    // candidate tables: for target j, keys from stream ks(j), values from vs(j); per stream s, the
    // candidate C^s_r and (used for the partial candidate) the buffer its gradient accumulates into
    std::vector<const T*> keys[2], key_inv[2], values[2], cand[2];
    std::vector<T*> dcand[2];
  };
  int entry_sublayer(int r) const;  // the sublayer whose state is entry r ≥ 1
  void build_tables();
  void depth_read(Slot& q);
  void apply_patch(Slot& q);
  void depth_read_backward(Slot& q, const T* dx);
  void entry_backward(int r);
  T* query_partial(int tid, int q, int j) const;
  void compute_coefficients();

  DarOptions opt_;
  int S_, C_, K_, M_;
  T *value_w_[2] = {}, *dvalue_w_[2] = {};  // W^j_V (C,C), sep_v only
  std::vector<Slot> slots_;                  // [0] unused, [1..S] sublayers, [S+1] read-out
  std::vector<std::vector<int>> readers_;    // per entry r: the reads (slot indices) that take it
  T *e_ = nullptr, *e_inv_ = nullptr;
  int rows_ = 0, cap_rows_ = 0, n_threads_ = 0;
  bool training_ = false;
  // backward storage
  T *d_e_ = nullptr, *d_final_ = nullptr;
  std::vector<T*> d_entry_[2];       // δH^s_r for r ≥ 1
  T* d_partial_[2][2] = {};          // [parity of l][stream]: δP_old of sublayer l (ping-pong)
  T *d_out_ = nullptr, *d_in_ = nullptr, *d_read_[2] = {}, *d_read_bar_[2] = {};
  T *entry_dsn_[2] = {}, *entry_w_[2] = {}, *entry_dw_[2] = {};  // entry_backward's products
  T* thread_scratch_ = nullptr;      // per thread: partial sums of parameter gradients and row temporaries
  size_t thread_stride_ = 0;
  T* coef_ = nullptr;
};

// Checkpoint names of the §6.3 parameters, in the residual kinds' scheme: "residual.<l>.<what>" for
// l = 1..S (query0, query1, mix, transport, gate0, gate1), "residual.final.<what>" for l = kDarFinal
// (query0, query1, mix), and the shared value maps "residual.value0", "residual.value1" (l = kDarShared).
inline constexpr int kDarFinal = -1, kDarShared = 0;
std::string dar_param_name(int l, const std::string& what);

extern template class Dar<float>;
extern template class Dar<double>;

}  // namespace attnlab
