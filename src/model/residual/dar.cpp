// DAR, Dual Attention Residuals (docs/mechanisms.md §6): the engine (Dar<T>, see dar.h) and the residual
// kind `dar` that drives it through the residual interface.
#include "model/residual/dar.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/gemm.h"
#include "kernels/depth_attention.h"
#include "model/residual/residual.h"

namespace attnlab {

namespace {
constexpr int kFinal = kDarFinal, kShared = kDarShared;

template <class T>
T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }

size_t round16(size_t n) { return (n + 15) / 16 * 16; }
constexpr int kEntryRows = 16;  // tokens per block of entry_backward

// ---------------------------------------------------------------------------------------------
// The depth-attention primitive (kernels/depth_attention.h, §4.1) in row form: DAR reads for two
// targets and mixes them in one pass over the rows, so it takes the kernel's per-row pieces
// (kernels::depth_softmax_row, kernels::rms_inverse_row) rather than the whole-matrix forward; and it
// forms each candidate's gradient from both targets and all readers at once (see entry_backward),
// so the kernel's backward, one read at a time, does not serve it. tests/test_dar.cpp checks these
// against a literal §6.2 transcription and finite differences.

// Row i of the forward, part 2: out (C) = Σ_r a_r V_r[i]. values[r] (N,C). Not the whole-matrix
// forward's mix: that one adds four candidates per pass to a sum started at +0, padding a short
// group with zero weights. The order and rounding are the same, but its exact zeros are +0 where
// this loop can give −0, and a zero weight times an infinite value adds NaN: taking it would change
// DAR's results in those cases.
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

}  // namespace

DarRouting parse_dar_routing(const std::string& name) {
  if (name == "reciprocal") return DarRouting::Reciprocal;
  if (name == "self_kv") return DarRouting::SelfKV;
  if (name == "cross_v") return DarRouting::CrossV;
  if (name == "fixed_kv") return DarRouting::FixedKV;
  fail("dar.routing = ", name, ": expected one of reciprocal | self_kv | cross_v | fixed_kv");
}

const char* dar_routing_name(DarRouting r) {
  switch (r) {
    case DarRouting::Reciprocal: return "reciprocal";
    case DarRouting::SelfKV: return "self_kv";
    case DarRouting::CrossV: return "cross_v";
    case DarRouting::FixedKV: return "fixed_kv";
  }
  return "?";
}

std::string dar_param_name(int l, const std::string& what) {
  if (l == kShared) return "residual." + what;
  if (l == kFinal) return "residual.final." + what;
  return "residual." + std::to_string(l) + "." + what;
}

DarOptions dar_options(const Config& cfg) {
  DarOptions o;
  o.block_size = cfg.residual.block_size > 0 ? cfg.residual.block_size : 2;
  o.routing = parse_dar_routing(cfg.dar.routing);
  o.sep_v = cfg.dar.sep_v;
  o.include_partial = cfg.dar.include_partial;
  o.parity_init = cfg.dar.init == "parity";
  o.tau_init = cfg.dar.tau_init;
  o.other_b_init = cfg.dar.other_b_init;
  return o;
}

DarMemory dar_memory_estimate(const DarOptions& opt, int n_sublayers, int C) {
  const int K = opt.block_size, S = n_sublayers;
  DarMemory m;
  m.histories = 2.0 * (1 + (S + K - 1) / K) * C;
  for (int l = 1; l <= S + 1; ++l) {
    const bool readout = l == S + 1;
    const int entries = readout ? 1 + (S + K - 1) / K : 1 + (l - 1) / K;
    const bool present = !readout && (l - 1) % K != 0;
    const int N = entries + (present && opt.include_partial ? 1 : 0);
    if (K >= 2 && present) m.histories += 2.0 * C;
    m.reads += 2.0 * C + (opt.sep_v ? 2.0 * C : 0) + 2.0 * N + (present ? 2 : 0);
  }
  return m;
}

template <class T>
Dar<T>::Dar(const DarOptions& opt, int n_sublayers, int C)
    : opt_(opt), S_(n_sublayers), C_(C), K_(opt.block_size), M_(1 + (n_sublayers + opt.block_size - 1) / opt.block_size) {
  ATTNLAB_CHECK(K_ >= 1 && S_ >= 1 && C_ >= 1);
  slots_.resize(S_ + 2);
  for (int l = 1; l <= S_; ++l) {
    Slot& q = slots_[l];
    const int m = 1 + (l - 1) / K_;  // completed entries before l
    q.partial_present = (l - 1) % K_ != 0;
    q.n_cand = m + (q.partial_present && opt_.include_partial ? 1 : 0);
    q.entry_closed = (l % K_ == 0 || l == S_) ? m : -1;
  }
  slots_[S_ + 1].n_cand = M_;
}

template <class T>
void Dar<T>::add_params(ParamRegistry& reg, const DarOptions& opt, int n_sublayers, int C) {
  for (int l = 1; l <= n_sublayers; ++l) {
    reg.add(dar_param_name(l, "query0"), {C}, Init::Zero, 0, false);
    reg.add(dar_param_name(l, "query1"), {C}, Init::Zero, 0, false);
    reg.add(dar_param_name(l, "mix"), {C}, Init::Zero, 0, false);
    reg.add(dar_param_name(l, "transport"), {1}, Init::Constant, opt.tau_init, false);
    // §6.3 symmetry breaking: attention sublayers (odd l) write home to stream 0, MLPs to stream 1.
    const int home = (l % 2 == 1) ? 0 : 1;
    for (int s = 0; s < 2; ++s) {
      const double b = opt.parity_init && s != home ? opt.other_b_init : 0.0;
      reg.add(dar_param_name(l, "gate" + std::to_string(s)), {C}, b == 0 ? Init::Zero : Init::Constant, b, false);
    }
  }
  reg.add(dar_param_name(kFinal, "query0"), {C}, Init::Zero, 0, false);
  reg.add(dar_param_name(kFinal, "query1"), {C}, Init::Zero, 0, false);
  reg.add(dar_param_name(kFinal, "mix"), {C}, Init::Zero, 0, false);
  if (opt.sep_v) {
    std::vector<double> identity((size_t)C * C, 0.0);
    for (int c = 0; c < C; ++c) identity[(size_t)c * C + c] = 1.0;
    reg.add_values(dar_param_name(kShared, "value0"), {C, C}, identity, false);
    reg.add_values(dar_param_name(kShared, "value1"), {C, C}, identity, false);
  }
}

template <class T>
void Dar<T>::bind(const ParamRegistry& reg, T* params, T* grads) {
  auto at = [&](T* base, int l, const std::string& what) -> T* {
    const ParamSpec* s = reg.find(dar_param_name(l, what));
    ATTNLAB_CHECK(s, "DAR parameter ", dar_param_name(l, what), " is not registered");
    return base + s->offset;
  };
  for (int q = 1; q <= S_ + 1; ++q) {
    Slot& slot = slots_[q];
    const int l = q == S_ + 1 ? kFinal : q;
    for (int j = 0; j < 2; ++j) {
      slot.w[j] = at(params, l, "query" + std::to_string(j));
      slot.dw[j] = at(grads, l, "query" + std::to_string(j));
    }
    slot.g = at(params, l, "mix");
    slot.dg = at(grads, l, "mix");
    if (l == kFinal) continue;
    slot.tau = at(params, l, "transport");
    slot.dtau = at(grads, l, "transport");
    for (int s = 0; s < 2; ++s) {
      slot.b[s] = at(params, l, "gate" + std::to_string(s));
      slot.db[s] = at(grads, l, "gate" + std::to_string(s));
    }
  }
  if (opt_.sep_v)
    for (int j = 0; j < 2; ++j) {
      value_w_[j] = at(params, kShared, "value" + std::to_string(j));
      dvalue_w_[j] = at(grads, kShared, "value" + std::to_string(j));
    }
}

template <class T>
DarMemory Dar<T>::memory_per_token(bool training) const {
  // Mirrors plan(); per token, in floats.
  DarMemory m;
  const double C = C_;
  m.histories = C + 2.0 * S_ * C;      // e once (both streams' entry 0), then P⁰, P¹ after every sublayer
  m.reads = 1 + 2.0 * S_;              // 1/ρ of e and of every state
  int n_max = 0;
  for (int q = 1; q <= S_ + 1; ++q) n_max = std::max(n_max, slots_[q].n_cand);
  for (int q = 1; q <= S_ + 1; ++q) {
    if (!training && q > 1) break;     // inference: one shared set
    const int n = training ? slots_[q].n_cand : n_max;
    m.reads += 2 * C + (opt_.sep_v ? 2 * C : 0) + 2.0 * n;
    m.inputs_outputs += C + (training && q == S_ + 1 ? 0 : C);
  }
  // d e, dx_F, δH of the entries, δP ping-pong, do, dx, dR and dR̄ (sep_v), D^j per read, the dsn of
  // entry_backward (2(S+1))
  if (training) m.backward = C * (2 + 2.0 * (M_ - 1) + 4 + 2 + (opt_.sep_v ? 4 : 0)) + 2.0 * (S_ + 1) + 2.0 * (S_ + 1);
  if (training)  // the logits of every read, for the key path of the backward
    for (int q = 1; q <= S_ + 1; ++q) m.backward += 2.0 * slots_[q].n_cand;
  return m;
}

template <class T>
int Dar<T>::entry_sublayer(int r) const {
  return std::min(r * K_, S_);
}

template <class T>
const T* Dar<T>::entry(int r, int s) const {
  return r == 0 ? e_ : slots_[entry_sublayer(r)].S[s];
}

template <class T>
void Dar<T>::plan(Arena& arena, int rows, bool training) {
  cap_rows_ = rows;
  training_ = training;
  n_threads_ = omp_get_max_threads();
  const size_t RC = (size_t)rows * C_;
  int n_max = 0;
  for (int q = 1; q <= S_ + 1; ++q) n_max = std::max(n_max, slots_[q].n_cand);
  e_ = arena.template take<T>(RC);
  readers_.assign(M_, {});
  for (int q = 1; q <= S_ + 1; ++q) {  // entry r is read by every read with more than r entries
    const int entries = q == S_ + 1 ? M_ : 1 + (q - 1) / K_;
    for (int r = 0; r < entries; ++r) readers_[r].push_back(q);
  }
  e_inv_ = arena.template take<T>(rows);
  coef_ = arena.template take<T>((size_t)(S_ + 1) * 2 * C_ + (size_t)S_ * 2 * C_);
  // Per-read storage: one set per slot when training (the backward needs them all), one shared set
  // for inference.
  Slot shared;
  auto take_read = [&](Slot& q, bool with_output) {
    q.x = arena.template take<T>(RC);
    q.o = with_output ? arena.template take<T>(RC) : nullptr;
    for (int j = 0; j < 2; ++j) {
      q.R[j] = arena.template take<T>(RC);
      q.Rbar[j] = opt_.sep_v ? arena.template take<T>(RC) : q.R[j];
      q.a[j] = arena.template take<T>((size_t)rows * (training ? q.n_cand : n_max));
    }
  };
  if (!training) take_read(shared, true);
  for (int q = 1; q <= S_ + 1; ++q) {
    Slot& slot = slots_[q];
    if (training) {
      take_read(slot, q <= S_);  // the read-out feeds Norm_f: no output
    } else {
      slot.x = shared.x; slot.o = q == S_ + 1 ? nullptr : shared.o;
      for (int j = 0; j < 2; ++j) { slot.R[j] = shared.R[j]; slot.Rbar[j] = shared.Rbar[j]; slot.a[j] = shared.a[j]; }
    }
    if (q <= S_)
      for (int s = 0; s < 2; ++s) {
        slot.S[s] = arena.template take<T>(RC);
        slot.S_inv[s] = arena.template take<T>(rows);
      }
  }
  if (training) {
    d_e_ = arena.template take<T>(RC);
    d_final_ = arena.template take<T>(RC);
    for (int s = 0; s < 2; ++s) {
      d_entry_[s].assign(M_, nullptr);
      for (int r = 1; r < M_; ++r) d_entry_[s][r] = arena.template take<T>(RC);
      for (int p = 0; p < 2; ++p) d_partial_[p][s] = arena.template take<T>(RC);
    }
    d_out_ = arena.template take<T>(RC);
    d_in_ = arena.template take<T>(RC);
    if (opt_.sep_v)
      for (int j = 0; j < 2; ++j) {
        d_read_[j] = arena.template take<T>(RC);
        d_read_bar_[j] = arena.template take<T>(RC);
      }
    for (int q = 1; q <= S_ + 1; ++q)
      for (int j = 0; j < 2; ++j) {
        slots_[q].D[j] = arena.template take<T>(rows);
        slots_[q].sc[j] = arena.template take<T>((size_t)rows * slots_[q].n_cand);
      }
    // entry_backward's matrices: dsn per (token, reader) and the readers' queries and their gradients
    for (int j = 0; j < 2; ++j) {
      entry_dsn_[j] = arena.template take<T>((size_t)rows * (S_ + 1));
      entry_w_[j] = arena.template take<T>((size_t)(S_ + 1) * C_);
      entry_dw_[j] = arena.template take<T>((size_t)(S_ + 1) * C_);
    }
    // Per thread: the query gradients of every read (2(S+2)·C), dg (C), db⁰, db¹, dτ (2C + 1, padded
    // to 2C + 16) and entry_backward's two gradient blocks (2·kEntryRows·C).
    thread_stride_ = round16((size_t)2 * (S_ + 2) * C_ + 3 * (size_t)C_ + 16 + 2 * (size_t)kEntryRows * C_);
    thread_scratch_ = arena.template take<T>(thread_stride_ * n_threads_);
  }
  if (arena.committed()) build_tables();
}

template <class T>
void Dar<T>::build_tables() {
  T* coef = coef_;
  for (int q = 1; q <= S_ + 1; ++q) {
    Slot& slot = slots_[q];
    slot.alpha = coef; coef += C_;
    slot.alpha_c = coef; coef += C_;
    if (q <= S_)
      for (int s = 0; s < 2; ++s) { slot.beta[s] = coef; coef += C_; }
    // Candidates of stream s: entries 0..m−1 (entry 0 = e, shared by both streams), then the partial.
    const int n = slot.n_cand;
    const bool with_partial = q <= S_ && slot.partial_present && opt_.include_partial;
    const int m = with_partial ? n - 1 : n;
    std::vector<const T*> inv[2];
    for (int s = 0; s < 2; ++s) {
      slot.cand[s].assign(n, nullptr);
      slot.dcand[s].assign(n, nullptr);
      inv[s].assign(n, nullptr);
      for (int r = 0; r < m; ++r) {
        slot.cand[s][r] = r == 0 ? e_ : slots_[entry_sublayer(r)].S[s];
        inv[s][r] = r == 0 ? e_inv_ : slots_[entry_sublayer(r)].S_inv[s];
        if (training_) slot.dcand[s][r] = r == 0 ? d_e_ : d_entry_[s][r];
      }
      if (with_partial) {
        slot.cand[s][m] = slots_[q - 1].S[s];
        inv[s][m] = slots_[q - 1].S_inv[s];
        if (training_) slot.dcand[s][m] = d_partial_[q & 1][s];
      }
    }
    for (int j = 0; j < 2; ++j) {
      const int ks = dar_key_stream(opt_.routing, j), vs = dar_value_stream(opt_.routing, j);
      slot.keys[j] = slot.cand[ks];
      slot.key_inv[j] = inv[ks];
      slot.values[j] = slot.cand[vs];
    }
  }
}

template <class T>
void Dar<T>::compute_coefficients() {
  // α = σ(g) and 1−α = σ(−g) (§6.2: the complement without cancellation), β = 2σ(b), t = 0.5σ(τ).
  for (int q = 1; q <= S_ + 1; ++q) {
    Slot& slot = slots_[q];
    for (int c = 0; c < C_; ++c) {
      slot.alpha[c] = sigmoid(slot.g[c]);
      slot.alpha_c[c] = sigmoid(-slot.g[c]);
    }
    if (q > S_) continue;
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < C_; ++c) slot.beta[s][c] = T(2) * sigmoid(slot.b[s][c]);
    slot.t = T(0.5) * sigmoid(slot.tau[0]);
  }
}

template <class T>
void Dar<T>::begin(int N) {
  ATTNLAB_CHECK(!slots_[1].keys[0].empty(), "Dar::plan() before begin()");
  ATTNLAB_CHECK(N >= 1 && N <= cap_rows_, "rows ", N, " exceed the planned ", cap_rows_);
  rows_ = N;
  kernels::rms_inverse(e_inv_, e_, N, C_);
  compute_coefficients();
}

template <class T>
void Dar<T>::depth_read(Slot& q) {
  const int N = rows_, C = C_, Nc = q.n_cand;
  const bool sep_v = opt_.sep_v;
  const T *alpha = q.alpha, *alpha_c = q.alpha_c;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    for (int j = 0; j < 2; ++j) {
      T* a = q.a[j] + (size_t)i * Nc;
      kernels::depth_softmax_row(a, q.sc[j] ? q.sc[j] + (size_t)i * Nc : nullptr, q.keys[j].data(), q.key_inv[j].data(), q.w[j],
                        (size_t)i, Nc, C);
      depth_values_row(q.Rbar[j] + row, a, q.values[j].data(), (size_t)i, Nc, C);
    }
    if (!sep_v) {
      const T *r0 = q.R[0] + row, *r1 = q.R[1] + row;
      T* x = q.x + row;
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] = alpha[c] * r0[c] + alpha_c[c] * r1[c];
    }
  }
  if (!sep_v) {
    if (q.patch[0] || q.patch[1]) apply_patch(q);
    return;
  }
  // R^j = R̄^j·W^j_V (§6.2: the same as projecting each value first), then the mix.
  for (int j = 0; j < 2; ++j) gemm(false, false, N, C, C, T(1), q.Rbar[j], C, value_w_[j], C, T(0), q.R[j], C);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    const T *r0 = q.R[0] + row, *r1 = q.R[1] + row;
    T* x = q.x + row;
#pragma omp simd
    for (int c = 0; c < C; ++c) x[c] = alpha[c] * r0[c] + alpha_c[c] * r1[c];
  }
  if (q.patch[0] || q.patch[1]) apply_patch(q);
}

template <class T>
void Dar<T>::set_read_patch(int q, int j, const T* src) {
  ATTNLAB_CHECK(q >= 1 && q <= S_ + 1 && (j == 0 || j == 1), "DAR read patch: read ", q, ", stream ", j);
  slots_[q].patch[j] = src;
}

template <class T>
void Dar<T>::apply_patch(Slot& q) {
  // §8.5: R^j ← the patch, then the mix again. Diagnostics only (training never sets a patch).
  const int N = rows_, C = C_;
  for (int j = 0; j < 2; ++j)
    if (q.patch[j]) std::memcpy(q.R[j], q.patch[j], sizeof(T) * (size_t)N * C);
  const T *alpha = q.alpha, *alpha_c = q.alpha_c;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    const T *r0 = q.R[0] + row, *r1 = q.R[1] + row;
    T* x = q.x + row;
#pragma omp simd
    for (int c = 0; c < C; ++c) x[c] = alpha[c] * r0[c] + alpha_c[c] * r1[c];
  }
}

template <class T>
const T* Dar<T>::read(int l, int N) {
  ATTNLAB_CHECK(l >= 1 && l <= S_ && N == rows_);
  depth_read(slots_[l]);
  return slots_[l].x;
}

template <class T>
void Dar<T>::write(int l, int N) {
  // §6.2 write: P^j ← β^j∘o (block start) or (1−t)P^j + t·P^{1−j} + β^j∘o (old P⁰, P¹ on the right).
  ATTNLAB_CHECK(l >= 1 && l <= S_ && N == rows_);
  Slot& q = slots_[l];
  const Slot* prev = q.partial_present ? &slots_[l - 1] : nullptr;
  const int C = C_;
  const T t = q.t, keep = T(1) - q.t;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t)i * C;
    const T* o = q.o + row;
    for (int s = 0; s < 2; ++s) {
      T* P = q.S[s] + row;
      const T* beta = q.beta[s];
      if (prev) {
        const T *own = prev->S[s] + row, *other = prev->S[1 - s] + row;
#pragma omp simd
        for (int c = 0; c < C; ++c) P[c] = keep * own[c] + t * other[c] + beta[c] * o[c];
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) P[c] = beta[c] * o[c];
      }
      q.S_inv[s][i] = kernels::rms_inverse_row(P, C);
    }
  }
}

template <class T>
const T* Dar<T>::read_out(int N) {
  ATTNLAB_CHECK(N == rows_);
  Slot& q = slots_[S_ + 1];
  depth_read(q);
  return q.x;
}

// ---------------------------------------------------------------------------------------------
// Backward (§6.4), organised around memory traffic. Done literally, every read's backward adds a
// value and a key gradient into the accumulator of every candidate it read: at sublayer l that is a
// read-modify-write of all N_l candidates of both streams, O(L²) passes over B·T·d buffers in all —
// measured DRAM-bound at 3× the forward's cost for Full DAR at L = 12. Instead each read's backward
// keeps only what the candidates' gradients need — dR̄^j (stored over R̄^j, which is dead by then)
// and D^j = dR̄^j·R̄^j per token — and the gradient of history entry r is formed once, when the
// backward reaches the sublayer that appended it (entry_backward), by one pass over its readers:
//   δH^s_r = Σ_{readers q} Σ_j [vs(j) = s] a^j_{q,r} dR̄^j_q + [ks(j) = s] (dsn^j_{q,r} w^j_q − kc^j_{q,r} H^s_r)
// with dsn = a(e − D)/ρ, e = dR̄^j_q·H^{vs(j)}_r, kc = dsn·s/(C·ρ) (§4.1's key path), and the same
// pass adds dsn·H^{ks(j)}_r into dw^j_q. The partial candidate is needed at once (its gradient is
// δP_old): read_backward handles it eagerly. Every reader of entry r comes after the sublayer that
// appended it, so all of them have been through the backward when entry_backward(r) runs.
//
// Parameter gradients are sums over tokens: each thread sums its own rows (static schedule) into its
// slice of thread_scratch_, and the slices are added in thread order afterwards, so the result is the
// same on every run with the same thread count, and the two streams' sums are formed by identical
// operations (the bitwise symmetry of §6.7 invariant 1). The query gradients stay in the slices for
// the whole backward (pw(q, j) below) and are added into dw at its end.

template <class T>
T* Dar<T>::query_partial(int tid, int q, int j) const {
  return thread_scratch_ + (size_t)tid * thread_stride_ + (size_t)(2 * q + j) * C_;
}

template <class T>
void Dar<T>::depth_read_backward(Slot& q, const T* dx) {
  const int N = rows_, C = C_, Nc = q.n_cand;
  const bool sep_v = opt_.sep_v;
  const DarRouting routing = opt_.routing;
  const T* coef[2] = {q.alpha, q.alpha_c};
  const int qi = int(&q - slots_.data());
  const bool with_partial = qi <= S_ && q.partial_present && opt_.include_partial;
  const int m = Nc - 1;  // the partial's candidate index, if with_partial
  if (sep_v) {
    // dR^j = coef_j∘dx;  dW^j_V += R̄^jᵀ dR^j;  dR̄^j = dR^j W^jᵀ_V   (§6.4 DepthAttnBackward, sep_v)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = (size_t)i * C;
      for (int j = 0; j < 2; ++j)
#pragma omp simd
        for (int c = 0; c < C; ++c) d_read_[j][row + c] = coef[j][c] * dx[row + c];
    }
    for (int j = 0; j < 2; ++j) {
      gemm(true, false, C, C, N, T(1), q.Rbar[j], C, d_read_[j], C, T(1), dvalue_w_[j], C);
      gemm(false, true, N, C, C, T(1), d_read_[j], C, value_w_[j], C, T(0), d_read_bar_[j], C);
    }
  }
  const size_t off_pg = (size_t)2 * (S_ + 2) * C;
  const int n_threads = std::min(omp_get_max_threads(), n_threads_);
#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    T* pg = thread_scratch_ + (size_t)tid * thread_stride_ + off_pg;
    std::fill(pg, pg + C, T(0));
    T* pw[2] = {query_partial(tid, qi, 0), query_partial(tid, qi, 1)};
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = (size_t)i * C;
      const T *dxr = dx + row, *r0 = q.R[0] + row, *r1 = q.R[1] + row;
      // dg += Σ_tok dx∘(R⁰−R¹) (times α(1−α) after the sum), before R is overwritten below
#pragma omp simd
      for (int c = 0; c < C; ++c) pg[c] += dxr[c] * (r0[c] - r1[c]);
      // D^j = dR̄^j·R̄^j, then dR̄^j replaces R̄^j (R̄ = R without sep_v)
      for (int j = 0; j < 2; ++j) {
        T* rb = q.Rbar[j] + row;
        T D = 0;
        if (sep_v) {
          const T* d = d_read_bar_[j] + row;
#pragma omp simd reduction(+ : D)
          for (int c = 0; c < C; ++c) {
            D += d[c] * rb[c];
            rb[c] = d[c];
          }
        } else {
          const T* cj = coef[j];
#pragma omp simd reduction(+ : D)
          for (int c = 0; c < C; ++c) {
            const T d = cj[c] * dxr[c];
            D += d * rb[c];
            rb[c] = d;
          }
        }
        q.D[j][i] = D;
      }
      if (!with_partial) continue;
      // The partial candidate, now: the value and key gradients of both targets into δP_old.
      const T *d0 = q.Rbar[0] + row, *d1 = q.Rbar[1] + row, *w0 = q.w[0], *w1 = q.w[1];
      T dsn[2], kc[2];
      for (int j = 0; j < 2; ++j) {
        const int ks = dar_key_stream(routing, j);
        const T* kp = q.keys[j][m] + row;
        const T* vp = q.values[j][m] + row;
        const T* dr = q.Rbar[j] + row;
        const T* wj = q.w[j];
        T e = 0, sc = 0;
#pragma omp simd reduction(+ : e, sc)
        for (int c = 0; c < C; ++c) {
          e += dr[c] * vp[c];
          sc += wj[c] * kp[c];
        }
        const T inv = q.key_inv[j][m][i];
        dsn[j] = q.a[j][(size_t)i * Nc + m] * (e - q.D[j][i]) * inv;
        kc[j] = dsn[j] * (sc * inv / T(C)) * inv;
        (void)ks;
#pragma omp simd
        for (int c = 0; c < C; ++c) pw[j][c] += dsn[j] * kp[c];
      }
      for (int st = 0; st < 2; ++st) {
        T va[2], kw[2], kk = 0;
        for (int j = 0; j < 2; ++j) {
          va[j] = dar_value_stream(routing, j) == st ? q.a[j][(size_t)i * Nc + m] : T(0);
          kw[j] = dar_key_stream(routing, j) == st ? dsn[j] : T(0);
          if (dar_key_stream(routing, j) == st) kk += kc[j];
        }
        const T* cs = q.cand[st][m] + row;
        T* gs = q.dcand[st][m] + row;
#pragma omp simd
        for (int c = 0; c < C; ++c) gs[c] += va[0] * d0[c] + va[1] * d1[c] + kw[0] * w0[c] + kw[1] * w1[c] - kk * cs[c];
      }
    }
  }
  // dg += α(1−α)∘Σ_threads
  for (int c = 0; c < C; ++c) {
    T sum = 0;
    for (int t = 0; t < n_threads_; ++t) sum += thread_scratch_[(size_t)t * thread_stride_ + off_pg + c];
    q.dg[c] += q.alpha[c] * q.alpha_c[c] * sum;
  }
}

template <class T>
void Dar<T>::entry_backward(int r) {
  // δH^s_r (r ≥ 1) or d e = δH⁰_0 + δH¹_0 (r = 0) from the stored dR̄, D, weights and logits of its
  // readers. Per token, the value terms a·dR̄ and the key terms' scalars (dsn, and kc through its sum
  // per stream); then, per target j, the two products over all readers at once:
  //   δH^{ks(j)}_r += DSN^j · W^j        (N × R)(R × C): Σ_q dsn^j_q w^j_q
  //   dw^j_q       += (DSN^jᵀ · H^{ks(j)}_r)_q              : Σ_tok dsn^j_q k_r ρ_r
  const int N = rows_, C = C_;
  const DarRouting routing = opt_.routing;
  const std::vector<int>& readers = readers_[r];
  const int R = (int)readers.size();
  const T* cand[2] = {entry(r, 0), entry(r, 1)};
  const T* inv[2] = {r == 0 ? e_inv_ : slots_[entry_sublayer(r)].S_inv[0], r == 0 ? e_inv_ : slots_[entry_sublayer(r)].S_inv[1]};
  T* dest[2] = {r == 0 ? d_e_ : d_entry_[0][r], r == 0 ? d_e_ : d_entry_[1][r]};
  // Blocks of kEntryRows tokens, reader by reader: each reader's dR̄ rows are then read as one
  // sequential run per block rather than one row per reader per token (2R interleaved streams, which
  // the prefetchers do not follow: twice the time, measured).
  const size_t off_g = (size_t)2 * (S_ + 2) * C + 3 * (size_t)C + 16;
  const int n_blocks = (N + kEntryRows - 1) / kEntryRows;
  const int n_threads = std::min(omp_get_max_threads(), n_threads_);
#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    T* g[2] = {thread_scratch_ + (size_t)tid * thread_stride_ + off_g,
               thread_scratch_ + (size_t)tid * thread_stride_ + off_g + (size_t)kEntryRows * C};
    T kk[2][kEntryRows], a[2][kEntryRows];
#pragma omp for schedule(static)
    for (int blk = 0; blk < n_blocks; ++blk) {
      const int i0 = blk * kEntryRows, nb = std::min(N, i0 + kEntryRows) - i0;
      std::fill(g[0], g[0] + (size_t)nb * C, T(0));
      std::fill(g[1], g[1] + (size_t)nb * C, T(0));
      for (int b = 0; b < nb; ++b) kk[0][b] = kk[1][b] = T(0);
      for (int k = 0; k < R; ++k) {
        const Slot& q = slots_[readers[k]];
        for (int j = 0; j < 2; ++j) {
          const int ks = dar_key_stream(routing, j);
          const T* vsrc = cand[dar_value_stream(routing, j)];
          for (int b = 0; b < nb; ++b) {
            const int i = i0 + b;
            const size_t row = (size_t)i * C, at = (size_t)i * q.n_cand + r;
            const T *vp = vsrc + row, *dr = q.Rbar[j] + row;
            T e = 0;  // summed exactly as D in depth_read_backward: e = D, bit for bit, where they are equal (§1.5 zeros)
#pragma omp simd reduction(+ : e)
            for (int c = 0; c < C; ++c) e += dr[c] * vp[c];
            a[j][b] = q.a[j][at];
            const T inv_k = inv[ks][i];
            const T dsn = a[j][b] * (e - q.D[j][i]) * inv_k;
            entry_dsn_[j][(size_t)i * R + k] = dsn;
            kk[ks][b] += dsn * (q.sc[j][at] / T(C)) * inv_k;
          }
        }
        // Value terms of both streams in one expression of the same shape (zeros where a target does
        // not read the stream's values), so that identical streams get bitwise identical gradients.
        for (int b = 0; b < nb; ++b) {
          const size_t row = (size_t)(i0 + b) * C;
          const T *d0 = q.Rbar[0] + row, *d1 = q.Rbar[1] + row;
          for (int st = 0; st < 2; ++st) {
            const T v0 = dar_value_stream(routing, 0) == st ? a[0][b] : T(0);
            const T v1 = dar_value_stream(routing, 1) == st ? a[1][b] : T(0);
            T* gs = g[st] + (size_t)b * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) gs[c] += v0 * d0[c] + v1 * d1[c];
          }
        }
      }
      for (int b = 0; b < nb; ++b) {
        const size_t row = (size_t)(i0 + b) * C;
        const T *g0 = g[0] + (size_t)b * C, *g1 = g[1] + (size_t)b * C;
        if (r == 0) {  // the embedding is both streams' entry 0
          T* de = dest[0] + row;
          const T* e = cand[0] + row;
#pragma omp simd
          for (int c = 0; c < C; ++c) de[c] = (g0[c] - kk[0][b] * e[c]) + (g1[c] - kk[1][b] * e[c]);
        } else {
          for (int st = 0; st < 2; ++st) {
            T* ds = dest[st] + row;
            const T *cs = cand[st] + row, *gs = st == 0 ? g0 : g1;
            const T kc = kk[st][b];
#pragma omp simd
            for (int c = 0; c < C; ++c) ds[c] = gs[c] - kc * cs[c];
          }
        }
      }
    }
  }
  for (int j = 0; j < 2; ++j) {
    const int ks = dar_key_stream(routing, j);
    for (int k = 0; k < R; ++k) std::copy_n(slots_[readers[k]].w[j], C, entry_w_[j] + (size_t)k * C);
    gemm(false, false, N, C, R, T(1), entry_dsn_[j], R, entry_w_[j], C, T(1), dest[ks], C);
    gemm(true, false, R, C, N, T(1), entry_dsn_[j], R, cand[ks], C, T(0), entry_dw_[j], C);
    for (int k = 0; k < R; ++k) {
      T* dw = slots_[readers[k]].dw[j];
      const T* src = entry_dw_[j] + (size_t)k * C;
      for (int c = 0; c < C; ++c) dw[c] += src[c];
    }
  }
}

template <class T>
T* Dar<T>::read_out_grad(int N) {
  ATTNLAB_CHECK(training_ && N == rows_, "Dar backward on an inference plan");
  std::memset(d_final_, 0, sizeof(T) * N * C_);
  return d_final_;
}

template <class T>
void Dar<T>::read_out_backward(int N) {
  ATTNLAB_CHECK(training_ && N == rows_);
  for (int t = 0; t < n_threads_; ++t)  // the query gradients' per-thread sums, kept to the end
    std::fill_n(thread_scratch_ + (size_t)t * thread_stride_, (size_t)2 * (S_ + 2) * C_, T(0));
  depth_read_backward(slots_[S_ + 1], d_final_);
}

template <class T>
const T* Dar<T>::branch_grad(int l, int N) {
  ATTNLAB_CHECK(training_ && l >= 1 && l <= S_ && N == rows_);
  Slot& q = slots_[l];
  const int C = C_;
  // δP′: the appended entry's gradient at a block's last sublayer, otherwise the running δP (the
  // next sublayer's δP_old). δP_old of l lives in d_partial_[l & 1], that of l+1 in the other one.
  T* dP[2];
  for (int s = 0; s < 2; ++s) dP[s] = q.entry_closed >= 0 ? d_entry_[s][q.entry_closed] : d_partial_[(l + 1) & 1][s];
  T* dP_old[2] = {d_partial_[l & 1][0], d_partial_[l & 1][1]};
  const Slot* prev = q.partial_present ? &slots_[l - 1] : nullptr;
  const T t = q.t, keep = T(1) - q.t;
  const T *beta0 = q.beta[0], *beta1 = q.beta[1];
  if (q.entry_closed >= 0) entry_backward(q.entry_closed);  // δP′ of a block's last sublayer
  const size_t off_pb = (size_t)2 * (S_ + 2) * C + C;  // db⁰, db¹, dτ per thread
  const int n_threads = std::min(omp_get_max_threads(), n_threads_);
#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    T* part = thread_scratch_ + (size_t)tid * thread_stride_ + off_pb;
    T *pb0 = part, *pb1 = part + C;
    std::fill(part, part + 2 * C + 1, T(0));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = (size_t)i * C;
      const T *o = q.o + row, *dp0 = dP[0] + row, *dp1 = dP[1] + row;
      T* dout = d_out_ + row;
      // do = β⁰∘δP′⁰ + β¹∘δP′¹;  db^j += Σ_tok δP′^j∘o (times dβ/db = β(1−β/2) after the sum)
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        dout[c] = beta0[c] * dp0[c] + beta1[c] * dp1[c];
        pb0[c] += dp0[c] * o[c];
        pb1[c] += dp1[c] * o[c];
      }
      if (!prev) continue;
      // δP^j_old = (1−t)δP′^j + t·δP′^{1−j};  dτ += t(1−2t) Σ_j δP′^j·(P^{1−j}_old − P^j_old), summed as
      // (δP′⁰ − δP′¹)(P¹ − P⁰): equal δP′ then give exactly 0 (§6.7 invariant 3), which the two-product
      // form does not once the compiler fuses one product into an FMA.
      const T *p0 = prev->S[0] + row, *p1 = prev->S[1] + row;
      T *o0 = dP_old[0] + row, *o1 = dP_old[1] + row;
      T dt = 0;
#pragma omp simd reduction(+ : dt)
      for (int c = 0; c < C; ++c) {
        o0[c] = keep * dp0[c] + t * dp1[c];
        o1[c] = keep * dp1[c] + t * dp0[c];
        dt += (dp0[c] - dp1[c]) * (p1[c] - p0[c]);
      }
      part[2 * C] += dt;
    }
  }
  T dt = 0;
  for (int th = 0; th < n_threads_; ++th) {
    const T* part = thread_scratch_ + (size_t)th * thread_stride_ + off_pb;
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < C; ++c) {
        const T beta = q.beta[s][c];
        q.db[s][c] += part[s * C + c] * beta * (T(1) - beta / T(2));
      }
    dt += part[2 * C];
  }
  if (prev) q.dtau[0] += t * (T(1) - T(2) * t) * dt;
  return d_out_;
}

template <class T>
T* Dar<T>::input_grad(int l, int N) {
  ATTNLAB_CHECK(training_ && l >= 1 && l <= S_ && N == rows_);
  std::memset(d_in_, 0, sizeof(T) * N * C_);
  return d_in_;
}

template <class T>
void Dar<T>::read_backward(int l, int N) {
  ATTNLAB_CHECK(training_ && l >= 1 && l <= S_ && N == rows_);
  depth_read_backward(slots_[l], d_in_);
  if (l > 1) return;
  // The backward's end: the embedding's gradient, then the query gradients out of the thread slices.
  entry_backward(0);
  for (int q = 1; q <= S_ + 1; ++q)
    for (int j = 0; j < 2; ++j)
      for (int t = 0; t < n_threads_; ++t) {
        const T* pw = query_partial(t, q, j);
        T* dw = slots_[q].dw[j];
        for (int c = 0; c < C_; ++c) dw[c] += pw[c];
      }
}

template class Dar<float>;
template class Dar<double>;

// ---------------------------------------------------------------------------------------------
// residual.kind = dar through the residual interface (residual.h): one Dar engine per workspace.
namespace {

template <class T>
struct DarState : ResidualState {
  std::unique_ptr<Dar<T>> dar;
};

template <class T>
class DarResidual final : public Residual<T> {
 public:
  explicit DarResidual(const Config& cfg)
      : opt_(dar_options(cfg)), S_(2 * cfg.model.n_layer), C_(cfg.model.d_model) {}
  const char* kind() const override { return "dar"; }
  void register_params(ParamRegistry& reg) const override { Dar<T>::add_params(reg, opt_, S_, C_); }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    reg_ = &reg;
    params_ = params;
    grads_ = grads;
  }

  std::unique_ptr<ResidualState> make_state() const override {
    ATTNLAB_CHECK(reg_, "bind() before make_state()");
    auto s = std::make_unique<DarState<T>>();
    s->dar = std::make_unique<Dar<T>>(opt_, S_, C_);
    s->dar->bind(*reg_, params_, grads_);
    return s;
  }
  void plan(Arena& arena, ResidualState& rs, size_t rows, bool training) const override {
    const size_t before = arena.planned();
    d(rs).plan(arena, (int)rows, training);
    if (!arena.committed()) rs.bytes = arena.planned() - before;
  }

  T* embedding(ResidualState& rs) const override { return d(rs).embedding(); }
  void begin(ResidualState& rs, int N) const override { d(rs).begin(N); }
  const T* read(ResidualState& rs, int l, int N) const override { return d(rs).read(l, N); }
  T* branch(ResidualState& rs, int l) const override { return d(rs).branch(l); }
  void write(ResidualState& rs, int l, int N) const override { d(rs).write(l, N); }
  const T* read_out(ResidualState& rs, int N) const override { return d(rs).read_out(N); }
  const T* input(const ResidualState& rs, int l) const override { return d(rs).input(l); }
  const T* final_input(const ResidualState& rs) const override { return d(rs).final_input(); }

  T* read_out_grad(ResidualState& rs, int N) const override { return d(rs).read_out_grad(N); }
  void read_out_backward(ResidualState& rs, int N) const override { d(rs).read_out_backward(N); }
  const T* branch_grad(ResidualState& rs, int l, int N) const override { return d(rs).branch_grad(l, N); }
  T* input_grad(ResidualState& rs, int l, int N) const override { return d(rs).input_grad(l, N); }
  void read_backward(ResidualState& rs, int l, int N) const override { d(rs).read_backward(l, N); }
  const T* embedding_grad(ResidualState& rs, int N) const override { return d(rs).embedding_grad(N); }

  void inspect(const ResidualState& rs, int N, ResidualInspector<T>& ins) const override {
    const Dar<T>& D = d(rs);
    const int S = D.n_sublayers();
    for (int q = 1; q <= S + 1; ++q)
      for (int j = 0; j < 2; ++j) {
        const int entries = q == S + 1 ? D.n_entries() : 1 + (q - 1) / opt_.block_size;
        ins.depth_weights(q, j, D.depth_weights(q, j), N, D.num_candidates(q), entries);
        ins.stream_read(q, j, D.stream_read(q, j), N, C_);
      }
    for (int r = 0; r < D.n_entries(); ++r)
      for (int s = 0; s < 2; ++s) ins.history_entry(r, s, D.entry(r, s), N, C_);
  }
  void set_read_patch(ResidualState& rs, int q, int j, const T* src) const override { d(rs).set_read_patch(q, j, src); }

 private:
  static Dar<T>& d(const ResidualState& s) { return *static_cast<const DarState<T>&>(s).dar; }
  DarOptions opt_;
  int S_, C_;
  const ParamRegistry* reg_ = nullptr;
  T *params_ = nullptr, *grads_ = nullptr;
};

}  // namespace

ATTNLAB_RESIDUAL_KIND(dar) {
  ResidualKindInfo info("dar", 50, "6");
  info.depth_streams = [](const Config&) { return 2; };
  set_residual_constructors<DarResidual>(info);
  return info;
}

}  // namespace attnlab
