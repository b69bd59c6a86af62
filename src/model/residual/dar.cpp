#include "model/residual/dar.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

// ---------------------------------------------------------------------------------------------
// The depth-attention primitive (kernels/depth_attention.h, §4.1) in row form: DAR reads for two
// targets and mixes them in one pass over the rows, and forms each candidate's gradient from both
// targets at once (see depth_read_backward), so it needs the per-row pieces rather than the whole-
// matrix kernel. The kernel's naive reference checks the same formulas (tests/kernels), and
// tests/test_dar.cpp checks these against a literal §6.2 transcription and finite differences.

// 1/ρ of one row x (C): the key normalisation of §4.1 (RMSNorm_ng, no gain).
template <class Real>
inline Real depth_key_inv_rms_row(const Real* x, int C) {
  Real sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int c = 0; c < C; ++c) sq += x[c] * x[c];
  return Real(1.0 / std::sqrt(double(sq) / C + kernels::kDepthKeyEps));
}

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
  if (training) m.backward = C * (2 + 2.0 * (M_ - 1) + 4 + 2 + (opt_.sep_v ? 4 : 0));
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
    // Per thread: dw⁰, dw¹, dg partial sums and two dR̄ rows (5C), dsn and key coefficients of both
    // targets (4·N_max); the write's backward reuses the first 2C + 1 for db⁰, db¹, dτ.
    thread_stride_ = round16(5 * (size_t)C_ + 4 * (size_t)n_max + 1);
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
      depth_softmax_row(a, q.keys[j].data(), q.key_inv[j].data(), q.w[j], (size_t)i, Nc, C);
      depth_values_row(q.Rbar[j] + row, a, q.values[j].data(), (size_t)i, Nc, C);
    }
    if (!sep_v) {
      const T *r0 = q.R[0] + row, *r1 = q.R[1] + row;
      T* x = q.x + row;
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] = alpha[c] * r0[c] + alpha_c[c] * r1[c];
    }
  }
  if (!sep_v) return;
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
      q.S_inv[s][i] = depth_key_inv_rms_row(P, C);
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
// Backward. The parameter gradients are sums over tokens: each thread sums its own rows (static
// schedule) into its slice of thread_scratch_, and the slices are added in thread order afterwards,
// so the result is the same on every run with the same thread count, and the two streams' sums are
// formed by identical operations (the bitwise symmetry of §6.7 invariant 1).

template <class T>
void Dar<T>::depth_read_backward(Slot& q, const T* dx, bool assign) {
  const int N = rows_, C = C_, Nc = q.n_cand, n_max_stride = (int)thread_stride_;
  const bool sep_v = opt_.sep_v;
  const DarRouting routing = opt_.routing;
  const T* coef[2] = {q.alpha, q.alpha_c};
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
  int team = 1;
  const int n_threads = std::min(omp_get_max_threads(), n_threads_);
#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    if (tid == 0) team = omp_get_num_threads();
    T* part = thread_scratch_ + (size_t)tid * n_max_stride;
    T *pw[2] = {part, part + C}, *pg = part + 2 * C, *tmp[2] = {part + 3 * C, part + 4 * C};
    T* dsn[2] = {part + 5 * C, part + 5 * C + Nc};
    T* kc[2] = {part + 5 * C + 2 * Nc, part + 5 * C + 3 * Nc};
    std::fill(part, part + 3 * C, T(0));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t row = (size_t)i * C;
      const T *dxr = dx + row, *r0 = q.R[0] + row, *r1 = q.R[1] + row;
#pragma omp simd
      for (int c = 0; c < C; ++c) pg[c] += dxr[c] * (r0[c] - r1[c]);
      const T* dRb[2];
      for (int j = 0; j < 2; ++j) {
        if (sep_v) {
          dRb[j] = d_read_bar_[j] + row;
        } else {
#pragma omp simd
          for (int c = 0; c < C; ++c) tmp[j][c] = coef[j][c] * dxr[c];
          dRb[j] = tmp[j];
        }
        depth_score_grads_row(dsn[j], kc[j], dRb[j], q.Rbar[j] + row, q.a[j] + (size_t)i * Nc,
                                       q.keys[j].data(), q.key_inv[j].data(), q.values[j].data(), q.w[j], (size_t)i,
                                       Nc, C);
        for (int r = 0; r < Nc; ++r) {
          const T* k = q.keys[j][r] + row;
          const T d = dsn[j][r];
#pragma omp simd
          for (int c = 0; c < C; ++c) pw[j][c] += d * k[c];
        }
      }
      // Candidate r of stream s receives the value gradient a^j_r dR̄^j of every target j reading its
      // values from s and the key gradient dsn^j_r w^j − kc^j_r C^s_r of every target keyed on s
      // (§6.4). Both terms are formed in one expression with the same shape for both streams, so that
      // identical streams get bitwise identical gradients.
      const T *w0 = q.w[0], *w1 = q.w[1], *d0 = dRb[0], *d1 = dRb[1];
      for (int r = 0; r < Nc; ++r) {
        T va[2][2], kw[2][2], kcs[2];
        for (int s = 0; s < 2; ++s) {
          kcs[s] = 0;
          for (int j = 0; j < 2; ++j) {
            va[s][j] = dar_value_stream(routing, j) == s ? q.a[j][(size_t)i * Nc + r] : T(0);
            kw[s][j] = dar_key_stream(routing, j) == s ? dsn[j][r] : T(0);
            if (dar_key_stream(routing, j) == s) kcs[s] += kc[j][r];
          }
        }
        const T *c0 = q.cand[0][r] + row, *c1 = q.cand[1][r] + row;
        T *g0 = q.dcand[0][r] + row, *g1 = q.dcand[1][r] + row;
        if (g0 == g1) {  // entry 0, the embedding, is both streams' candidate
          if (assign) {
#pragma omp simd
            for (int c = 0; c < C; ++c)
              g0[c] = (va[0][0] * d0[c] + va[0][1] * d1[c] + kw[0][0] * w0[c] + kw[0][1] * w1[c] - kcs[0] * c0[c]) +
                      (va[1][0] * d0[c] + va[1][1] * d1[c] + kw[1][0] * w0[c] + kw[1][1] * w1[c] - kcs[1] * c1[c]);
          } else {
#pragma omp simd
            for (int c = 0; c < C; ++c)
              g0[c] += (va[0][0] * d0[c] + va[0][1] * d1[c] + kw[0][0] * w0[c] + kw[0][1] * w1[c] - kcs[0] * c0[c]) +
                       (va[1][0] * d0[c] + va[1][1] * d1[c] + kw[1][0] * w0[c] + kw[1][1] * w1[c] - kcs[1] * c1[c]);
          }
          continue;
        }
        for (int s = 0; s < 2; ++s) {
          const T* cs = s == 0 ? c0 : c1;
          T* gs = s == 0 ? g0 : g1;
          const T v0 = va[s][0], v1 = va[s][1], k0 = kw[s][0], k1 = kw[s][1], kk = kcs[s];
          if (assign) {
#pragma omp simd
            for (int c = 0; c < C; ++c) gs[c] = v0 * d0[c] + v1 * d1[c] + k0 * w0[c] + k1 * w1[c] - kk * cs[c];
          } else {
#pragma omp simd
            for (int c = 0; c < C; ++c) gs[c] += v0 * d0[c] + v1 * d1[c] + k0 * w0[c] + k1 * w1[c] - kk * cs[c];
          }
        }
      }
    }
  }
  // dw^j += Σ_threads; dg += α(1−α)∘Σ_tok dx∘(R⁰−R¹)
  for (int t = 0; t < team; ++t) {
    const T* part = thread_scratch_ + (size_t)t * n_max_stride;
    for (int j = 0; j < 2; ++j)
      for (int c = 0; c < C; ++c) q.dw[j][c] += part[j * C + c];
  }
  for (int c = 0; c < C; ++c) {
    T sum = 0;
    for (int t = 0; t < team; ++t) sum += thread_scratch_[(size_t)t * n_max_stride + 2 * C + c];
    q.dg[c] += q.alpha[c] * q.alpha_c[c] * sum;
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
  // The read-out reads every entry, so its gradients are the first to reach each entry's accumulator:
  // they are written (=), and nothing needs zeroing.
  depth_read_backward(slots_[S_ + 1], d_final_, true);
}

template <class T>
const T* Dar<T>::branch_grad(int l, int N) {
  ATTNLAB_CHECK(training_ && l >= 1 && l <= S_ && N == rows_);
  Slot& q = slots_[l];
  const int C = C_, stride = (int)thread_stride_;
  // δP′: the appended entry's gradient at a block's last sublayer, otherwise the running δP (the
  // next sublayer's δP_old). δP_old of l lives in d_partial_[l & 1], that of l+1 in the other one.
  T* dP[2];
  for (int s = 0; s < 2; ++s) dP[s] = q.entry_closed >= 0 ? d_entry_[s][q.entry_closed] : d_partial_[(l + 1) & 1][s];
  T* dP_old[2] = {d_partial_[l & 1][0], d_partial_[l & 1][1]};
  const Slot* prev = q.partial_present ? &slots_[l - 1] : nullptr;
  const T t = q.t, keep = T(1) - q.t;
  const T *beta0 = q.beta[0], *beta1 = q.beta[1];
  int team = 1;
  const int n_threads = std::min(omp_get_max_threads(), n_threads_);
#pragma omp parallel num_threads(n_threads)
  {
    const int tid = omp_get_thread_num();
    if (tid == 0) team = omp_get_num_threads();
    T* part = thread_scratch_ + (size_t)tid * stride;
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
  for (int th = 0; th < team; ++th) {
    const T* part = thread_scratch_ + (size_t)th * stride;
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
  depth_read_backward(slots_[l], d_in_, false);
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

 private:
  static Dar<T>& d(const ResidualState& s) { return *static_cast<const DarState<T>&>(s).dar; }
  DarOptions opt_;
  int S_, C_;
  const ParamRegistry* reg_ = nullptr;
  T *params_ = nullptr, *grads_ = nullptr;
};

}  // namespace

template <class T>
std::unique_ptr<Residual<T>> make_dar_residual(const Config& cfg) {
  return std::make_unique<DarResidual<T>>(cfg);
}

template std::unique_ptr<Residual<float>> make_dar_residual<float>(const Config&);
template std::unique_ptr<Residual<double>> make_dar_residual<double>(const Config&);

}  // namespace attnlab
