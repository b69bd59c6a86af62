// attnlab kernels: GOAT trainable attention priors (docs/mechanisms.md §3), realized with the
// concatenation trick of §3.4 so that the unchanged fused attention kernel (attention.h) computes
// content logits plus the learned log-prior with no T×T bias matrix:
//
//   q_tot,i = [ q_c,i/sqrt(D_c),  A_κ∘C_{t_i} + B_κ∘S_{t_i},  A_κ∘S_{t_i} − B_κ∘C_{t_i},  1 ]   (kernel scale 1)
//   k_tot,j = [ k_c,j,            C_{t_j},                    S_{t_j},                    U_κ(j) + softplus(ρ_κ)·t_j ]
//
// so q_tot,i·k_tot,j = q_c·k_c/sqrt(D_c) + Σ_r A cos(ω_r Δ) + B sin(ω_r Δ) + U_κ(j) + softplus(ρ_κ)·t_j.
// That is the relative form ℓ of §3.4 plus the row constant softplus(ρ_κ)·t_i, which softmax
// ignores; with a learned sink the sink logit of row i moves by the same constant (the attention
// kernel's sink_slope = softplus(ρ_κ)), so the relative form is exact with a sink too.
//
// The projections produce a compact qkv_c row per token (B, T, H·D_c + Hkv·D_c + Hkv·D_h): no dead
// weight rows (§3.1 [Ours]). goat_pack_forward writes the packed (B, T, (H+2Hkv)·D_h) buffer the
// attention kernel reads (and the KV cache stores: k_tot depends on the key position only, §3.7);
// goat_pack_backward maps the kernel's gradient back to qkv_c and to every GOAT parameter (§3.5).
// Positions are absolute: t = pos_offset + token index.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"

namespace attnlab::kernels {

// Hidden width of the shared sink MLP: min(2(2M+2), 4) = 4 for every M >= 0 (§3.3).
inline constexpr int kGoatHidden = 4;

struct GoatShape {
  int H, Hkv, Dh;  // query heads, KV heads, head size (of v and of the packed q/k)
  int R, M;        // pos_rank, abs_rank
  bool key_bias;   // the key-only lane (sink MLP, BOS bump, recency)
  int lanes() const { return 2 * R + (key_bias ? 1 : 0); }  // P_l
  int Dc() const { return Dh - lanes(); }                    // content dims
  int features() const { return 2 * M + 2; }                  // φ(t) ∈ R^{2M+2}
  int compact_dim() const { return (H + Hkv) * Dc() + Hkv * Dh; }  // one token's qkv_c row
  int packed_dim() const { return (H + 2 * Hkv) * Dh; }
};

// Constant per-position tables (§3.2): C_t, S_t [max_pos][R] and φ(t) [max_pos][2M+2], computed in
// double and rounded once.
template <class T>
struct GoatTables {
  int max_pos = 0, R = 0, F = 0;
  std::vector<T> cos, sin, phi;
};

template <class T>
GoatTables<T> make_goat_tables(int max_pos, int R, int M, double pos_base, double abs_base, double tau) {
  GoatTables<T> t;
  t.max_pos = max_pos, t.R = R, t.F = 2 * M + 2;
  t.cos.resize(size_t(max_pos) * R);
  t.sin.resize(size_t(max_pos) * R);
  t.phi.resize(size_t(max_pos) * t.F);
  for (int p = 0; p < max_pos; ++p) {
    for (int r = 0; r < R; ++r) {
      const double w = std::pow(pos_base, -double(r) / std::max(R - 1, 1));
      t.cos[size_t(p) * R + r] = T(std::cos(w * p));
      t.sin[size_t(p) * R + r] = T(std::sin(w * p));
    }
    T* f = &t.phi[size_t(p) * t.F];
    for (int m = 0; m < M; ++m) {
      const double w = std::pow(abs_base, -double(m) / std::max(M - 1, 1));
      f[m] = T(std::cos(w * p));
      f[M + m] = T(std::sin(w * p));
    }
    f[2 * M] = T(p / tau);
    f[2 * M + 1] = T(std::log1p(double(p)) / std::log1p(tau));
  }
  return t;
}

template <class T>
struct GoatParams {
  const T *A = nullptr, *B = nullptr;                     // [Hkv, R] λ_sym, λ_asym
  const T *W1 = nullptr, *b1 = nullptr;                   // [4, 2M+2], [4]   (key_bias only)
  const T *w2 = nullptr, *b2 = nullptr;                   // [4], [1]
  const T *gain = nullptr, *bump = nullptr, *rho = nullptr;  // [Hkv] each
};

template <class T>
struct GoatGrads {  // all +=
  T *A = nullptr, *B = nullptr, *W1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
  T *gain = nullptr, *bump = nullptr, *rho = nullptr;
};

inline double goat_softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }
inline double goat_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
// softplus⁻¹(m) = log(e^m − 1): GOAT's seeded ρ from an ALiBi slope (§3.6).
inline double goat_softplus_inverse(double m) { return std::log(std::expm1(m)); }

// The key profile u(t) = w2·SiLU(W1 φ(t) + b1) + b2 for t = t0 .. t0+n−1 (§3.4; fp32, shared by heads).
// u: [n].
template <class T>
void goat_profile(T* u, const GoatParams<T>& p, const GoatTables<T>& tab, int t0, int n) {
  for (int j = 0; j < n; ++j) {
    const T* f = &tab.phi[size_t(t0 + j) * tab.F];
    double acc = double(p.b2[0]);
    for (int k = 0; k < kGoatHidden; ++k) {
      double a = double(p.b1[k]);
      for (int q = 0; q < tab.F; ++q) a += double(p.W1[k * tab.F + q]) * double(f[q]);
      acc += double(p.w2[k]) * a / (1 + std::exp(-a));
    }
    u[j] = T(acc);
  }
}

inline void check_goat(const GoatShape& g, int max_pos, int last_pos, const char* who) {
  if (g.Dc() < 1) fail(who, ": GOAT needs D_h − (2R + key_bias) >= 1 (D_h = ", g.Dh, ", R = ", g.R, ")");
  if (last_pos >= max_pos) fail(who, ": position ", last_pos, " is beyond the GOAT tables (", max_pos, " positions)");
}

// Forward pack (§3.4). qkv: (B, Tq, packed_dim) WRITTEN; sink_slope: [H] WRITTEN (softplus(ρ_κ(h)),
// or 0 without the key lane) for the attention kernel; u: [Tq] scratch (the key profile of the
// chunk's positions); qkvc: (B, Tq, compact_dim).
template <class T>
void goat_pack_forward(T* qkv, T* sink_slope, T* u, const T* qkvc, const GoatParams<T>& p, const GoatTables<T>& tab,
                       const GoatShape& g, int B, int Tq, int pos_offset) {
  check_goat(g, tab.max_pos, pos_offset + Tq - 1, "goat_pack_forward");
  const int H = g.H, Hkv = g.Hkv, Dh = g.Dh, Dc = g.Dc(), R = g.R, G = H / Hkv;
  const int cdim = g.compact_dim(), pdim = g.packed_dim();
  const T qscale = T(1 / std::sqrt(double(Dc)));
  if (g.key_bias) goat_profile(u, p, tab, pos_offset, Tq);
  T sp[256];  // softplus(ρ_κ); Hkv <= n_head <= 1024 is checked by the config, heads here are few
  ATTNLAB_CHECK(Hkv <= 256, "goat_pack_forward: more than 256 KV heads");
  for (int kv = 0; kv < Hkv; ++kv) sp[kv] = g.key_bias ? T(goat_softplus(double(p.rho[kv]))) : T(0);
  for (int h = 0; h < H; ++h) sink_slope[h] = sp[h / G];
#pragma omp parallel for schedule(static) if (size_t(B) * Tq * g.packed_dim() >= kParallelMinElements)
  for (long row = 0; row < long(B) * Tq; ++row) {
    const int t = pos_offset + int(row % Tq);
    const T* C = &tab.cos[size_t(t) * R];
    const T* S = &tab.sin[size_t(t) * R];
    const T* src = qkvc + row * cdim;
    T* dst = qkv + row * pdim;
    for (int h = 0; h < H; ++h) {  // query heads
      const T* qc = src + h * Dc;
      T* q = dst + h * Dh;
      const int kv = h / G;
      for (int d = 0; d < Dc; ++d) q[d] = qc[d] * qscale;
      for (int r = 0; r < R; ++r) {
        const T a = p.A[kv * R + r], b = p.B[kv * R + r];
        q[Dc + r] = a * C[r] + b * S[r];
        q[Dc + R + r] = a * S[r] - b * C[r];
      }
      if (g.key_bias) q[Dc + 2 * R] = T(1);
    }
    for (int kv = 0; kv < Hkv; ++kv) {  // key heads
      const T* kc = src + H * Dc + kv * Dc;
      T* k = dst + (H + kv) * Dh;
      std::copy(kc, kc + Dc, k);
      std::copy(C, C + R, k + Dc);
      std::copy(S, S + R, k + Dc + R);
      if (g.key_bias)
        k[Dc + 2 * R] = p.gain[kv] * u[row % Tq] + (t == 0 ? p.bump[kv] : T(0)) + sp[kv] * T(t);
    }
    std::copy(src + (H + Hkv) * Dc, src + cdim, dst + (H + Hkv) * Dh);  // values, full D_h
  }
}

// Backward of the pack (§3.5). dqkvc: (B, Tq, compact_dim) WRITTEN; grads +=; dqkv: the attention
// kernel's gradient (B, Tq, packed_dim); dsink_slope: [H] the kernel's gradient of the sink slope
// (null without a sink); work: [2·Tq] scratch. Features and the constant lanes get no gradient.
template <class T>
void goat_pack_backward(T* dqkvc, const GoatGrads<T>& gr, T* work, const T* dqkv, const T* dsink_slope,
                        const GoatParams<T>& p, const GoatTables<T>& tab, const GoatShape& g, int B, int Tq,
                        int pos_offset) {
  check_goat(g, tab.max_pos, pos_offset + Tq - 1, "goat_pack_backward");
  const int H = g.H, Hkv = g.Hkv, Dh = g.Dh, Dc = g.Dc(), R = g.R, G = H / Hkv, F = tab.F;
  const int cdim = g.compact_dim(), pdim = g.packed_dim();
  const T qscale = T(1 / std::sqrt(double(Dc)));
#pragma omp parallel for schedule(static)
  for (long row = 0; row < long(B) * Tq; ++row) {  // content lanes and values
    const T* src = dqkv + row * pdim;
    T* dst = dqkvc + row * cdim;
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < Dc; ++d) dst[h * Dc + d] = src[h * Dh + d] * qscale;
    for (int kv = 0; kv < Hkv; ++kv) std::copy(src + (H + kv) * Dh, src + (H + kv) * Dh + Dc, dst + (H + kv) * Dc);
    std::copy(src + (H + Hkv) * Dh, src + pdim, dst + (H + Hkv) * Dc);
  }
  // Parameter gradients: small reductions in double, in one pass over the rows in a fixed order
  // (deterministic; the gradient buffer is read once, row by row).
  // dA, dB from the q lanes (§3.5); the key lane U_κ(j) + softplus(ρ_κ)·t_j gets c_j, the column
  // sum of dℓ over the group's queries, which the attention kernel already summed into dk.
  constexpr int kMaxAB = 2048, kMaxKv = 256;
  ATTNLAB_CHECK(Hkv * R <= kMaxAB && Hkv <= kMaxKv, "goat_pack_backward: H_kv·R above ", kMaxAB);
  double dA[kMaxAB] = {}, dB[kMaxAB] = {}, dgain[kMaxKv] = {}, dbump[kMaxKv] = {}, drho[kMaxKv] = {};
  T* u = work;        // [Tq] the key profile, recomputed (position-only, cheap)
  T* du = work + Tq;  // [Tq] dL/du(j)
  if (g.key_bias) goat_profile(u, p, tab, pos_offset, Tq);
  std::fill(du, du + Tq, T(0));
  for (long row = 0; row < long(B) * Tq; ++row) {
    const int j = int(row % Tq), t = pos_offset + j;
    const T* C = &tab.cos[size_t(t) * R];
    const T* S = &tab.sin[size_t(t) * R];
    const T* drow = dqkv + row * pdim;
    for (int h = 0; h < H; ++h) {
      const T* dq = drow + h * Dh + Dc;
      double* a = dA + (h / G) * R;
      double* b = dB + (h / G) * R;
      for (int r = 0; r < R; ++r) {
        const double d0 = dq[r], d1 = dq[R + r];
        a[r] += d0 * C[r] + d1 * S[r];
        b[r] += d0 * S[r] - d1 * C[r];
      }
    }
    if (!g.key_bias) continue;
    double dui = 0;
    for (int kv = 0; kv < Hkv; ++kv) {
      const double c = drow[(H + kv) * Dh + Dc + 2 * R];
      dgain[kv] += c * double(u[j]);
      drho[kv] += c * t;
      if (t == 0) dbump[kv] += c;
      dui += double(p.gain[kv]) * c;
    }
    du[j] += T(dui);
  }
  for (int i = 0; i < Hkv * R; ++i) gr.A[i] += T(dA[i]), gr.B[i] += T(dB[i]);
  if (g.key_bias)
    for (int kv = 0; kv < Hkv; ++kv) {
      if (dsink_slope)  // the sink logit's slope is softplus(ρ_κ) too
        for (int h = kv * G; h < (kv + 1) * G; ++h) drho[kv] += double(dsink_slope[h]);
      gr.gain[kv] += T(dgain[kv]);
      gr.bump[kv] += T(dbump[kv]);
      gr.rho[kv] += T(goat_sigmoid(double(p.rho[kv])) * drho[kv]);
    }
  if (!g.key_bias) return;
  // The shared MLP: du(j) = Σ_b Σ_κ g_κ c^κ_j (accumulated above), then §3.5's chain.
  double dW1[kGoatHidden * 64] = {}, db1[kGoatHidden] = {}, dw2[kGoatHidden] = {}, db2 = 0;
  ATTNLAB_CHECK(F <= 64, "goat_pack_backward: more than 64 features (abs_rank > 31)");
  for (int j = 0; j < Tq; ++j) {
    const T* f = &tab.phi[size_t(pos_offset + j) * F];
    const double d = du[j];
    db2 += d;
    for (int k = 0; k < kGoatHidden; ++k) {
      double a = double(p.b1[k]);
      for (int q = 0; q < F; ++q) a += double(p.W1[k * F + q]) * double(f[q]);
      const double sg = 1 / (1 + std::exp(-a));
      dw2[k] += d * a * sg;
      const double da = d * double(p.w2[k]) * sg * (1 + a * (1 - sg));  // SiLU′(a)
      db1[k] += da;
      for (int q = 0; q < F; ++q) dW1[k * F + q] += da * double(f[q]);
    }
  }
  for (int k = 0; k < kGoatHidden; ++k) {
    gr.w2[k] += T(dw2[k]);
    gr.b1[k] += T(db1[k]);
    for (int q = 0; q < F; ++q) gr.W1[k * F + q] += T(dW1[k * F + q]);
  }
  gr.b2[0] += T(db2);
}

}  // namespace attnlab::kernels
