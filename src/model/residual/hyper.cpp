// HC: Hyper-connections (docs/mechanisms.md §5.1, §5.2). The residual stream is n streams X (n×d per
// token), expanded from e and collapsed by a sum before Norm_f. Sublayer l, per token:
//   X̄_s = RMSNorm_ng(X_s);  β_u = s_β tanh(X̄_u·w_β) + β0_u;  m_s = s_α tanh(X̄_s·w_m) + m0_s;
//   A_su = s_α tanh(X̄_s·Wr[:,u]) + A0_su;  u = Σ_s m_s X_s;  o = F_l(u);  X′_u = β_u o + Σ_s A_su X_s
// At init (w = 0, β0 = 1, m0 = e_{h(l)}, A0 = I) every stream equals the standard residual stream.
//
// The three projections share one GEMM: the weights are packed per call, transposed, into
// Wᵀ = [w_β | w_m | Wr]ᵀ ((n+2) × d), and a = X̄·W = rstd∘(X·W) over the N·n stream rows (X̄ is never
// materialised). The backward [Derived, §5.2] gathers the per-token map gradients z, then
// dWᵀ = (rstd∘z)ᵀX (a GEMM) and dX += RMSNorm_ng backward of z·Wᵀ in one fused pass (streams.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/gemm.h"
#include "kernels/depth_attention.h"
#include "model/residual/residual.h"
#include "model/residual/streams.h"

namespace attnlab {
namespace {

using streams::kMaxStreams;

template <class T>
struct HyperState : streams::StreamsState<T> {
  std::vector<T*> pre, tau;  // per sublayer: the projections a = X̄·W and tanh(a) (N·n, n+2)
};

template <class T>
class Hyper final : public streams::StreamsResidual<T, HyperState<T>> {
  using Base = streams::StreamsResidual<T, HyperState<T>>;
  using Base::C_, Base::L2_, Base::n_, Base::st, Base::cst;

 public:
  explicit Hyper(const Config& cfg) : Base(cfg), P_(n_ + 2), scale_init_(cfg.residual.hc_scale_init) {}
  const char* kind() const override { return "hyper"; }

  void register_params(ParamRegistry& reg) const override {
    for (int l = 1; l <= L2_; ++l) {
      const int home = (l - 1) % n_;  // h(l), §5.1
      std::vector<double> m0(n_, 0.0), a0((size_t)n_ * n_, 0.0);
      m0[home] = 1;
      for (int s = 0; s < n_; ++s) a0[(size_t)s * n_ + s] = 1;
      reg.add(residual_param(l, "w_beta"), {C_}, Init::Zero, 0, false);
      reg.add(residual_param(l, "w_m"), {C_}, Init::Zero, 0, false);
      reg.add(residual_param(l, "w_r"), {C_, n_}, Init::Zero, 0, false);
      reg.add(residual_param(l, "s_alpha"), {1}, Init::Constant, scale_init_, false);
      reg.add(residual_param(l, "s_beta"), {1}, Init::Constant, scale_init_, false);
      reg.add(residual_param(l, "beta0"), {n_}, Init::One, 0, false);
      reg.add_values(residual_param(l, "m0"), {n_}, m0, false);
      reg.add_values(residual_param(l, "a0"), {n_, n_}, a0, false);
    }
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    p_.assign(L2_ + 1, {});
    g_.assign(L2_ + 1, {});
    for (int l = 1; l <= L2_; ++l) {
      auto at = [&](const char* name, T* base) { return base + reg.find(residual_param(l, name))->offset; };
      for (auto [t, base] : {std::pair{&p_[l], params}, std::pair{&g_[l], grads}}) {
        t->w_beta = at("w_beta", base); t->w_m = at("w_m", base); t->w_r = at("w_r", base);
        t->s_alpha = at("s_alpha", base); t->s_beta = at("s_beta", base);
        t->beta0 = at("beta0", base); t->m0 = at("m0", base); t->a0 = at("a0", base);
      }
    }
  }

  void plan(Arena& arena, ResidualState& rs, size_t rows, bool training) const override {
    auto& s = st(rs);
    const size_t before = arena.planned(), nd = (size_t)n_ * C_;
    this->plan_states(arena, s, rows, training, n_, (size_t)n_ * P_, s.pre, s.tau);  // a = X̄·W and tanh(a)
    s.pack = arena.template take<T>((size_t)C_ * P_);
    if (training) {
      s.dX[0] = arena.template take<T>(rows * nd);
      s.dX[1] = arena.template take<T>(rows * nd);
      s.dh = arena.template take<T>(rows * C_);
      s.dout = arena.template take<T>(rows * C_);
      s.z = arena.template take<T>(rows * n_ * P_);
      s.per_token = arena.template take<T>(rows * per_token_cols());
      s.dpack = arena.template take<T>((size_t)C_ * P_);
      s.sums = arena.template take<T>(per_token_cols());
    }
    if (!arena.committed()) s.bytes = arena.planned() - before;
  }

  void begin(ResidualState& rs, int N) const override {
    streams::expand(st(rs).X[0], st(rs).e, N, n_, C_);
    kernels::rms_inverse(st(rs).rstd[1], st(rs).X[0], N * n_, C_);  // later 1/ρ come from write() (below)
  }

  const T* read(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const Params& p = p_[l];
    const T* X = s.X[l - 1];
    T *rstd = s.rstd[l], *pre = s.pre[l], *tau = s.tau[l], *h = s.h[l];
    pack(s.pack, p);  // rstd = 1/ρ of each stream of X was computed when X was written
    gemm(false, true, N * n_, P_, C_, T(1), X, C_, s.pack, C_, T(0), pre, P_);
    const T s_alpha = *p.s_alpha;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) {
      T* a = pre + (size_t)i * n_ * P_;
      T* t = tau + (size_t)i * n_ * P_;
      for (int r = 0; r < n_; ++r)
        for (int j = 0; j < P_; ++j) t[r * P_ + j] = std::tanh(a[r * P_ + j] *= rstd[(size_t)i * n_ + r]);
      T m[kMaxStreams];
      for (int r = 0; r < n_; ++r) m[r] = s_alpha * t[r * P_ + 1] + p.m0[r];
      streams::combine(h + (size_t)i * C_, m, X + (size_t)i * n_ * C_, C_, n_, C_);  // u = Σ_s m_s X_s
    }
    for (int s2 = 0; s2 < n_; ++s2)  // §8.5 diagnostics: a patched stream's share m_s·X_s
      if (const T* P = s.patch[(size_t)l * n_ + s2])
        streams::patch_contribution(h, P, X, s2, N, n_, C_,
                                    [&](int i) { return s_alpha * tau[(size_t)i * n_ * P_ + s2 * P_ + 1] + p.m0[s2]; });
    return h;
  }
  void write(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const Params& p = p_[l];
    const T *X = s.X[l - 1], *tau = s.tau[l], *o = s.o[l];
    T* Xn = s.X[l];
    T* rstd_next = l < L2_ ? s.rstd[l + 1] : nullptr;  // sublayer l+1's 1/ρ, while the rows are in cache
    const T s_alpha = *p.s_alpha, s_beta = *p.s_beta;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) {
      const T* t = tau + (size_t)i * n_ * P_;
      const T* oi = o + (size_t)i * C_;
      for (int u = 0; u < n_; ++u) {  // X′_u = β_u o + Σ_s A_su X_s
        T a[kMaxStreams];
        for (int r = 0; r < n_; ++r) a[r] = s_alpha * t[r * P_ + 2 + u] + p.a0[r * n_ + u];
        const T beta = s_beta * t[u * P_] + p.beta0[u];
        T* row = Xn + ((size_t)i * n_ + u) * C_;
        streams::combine(row, a, X + (size_t)i * n_ * C_, C_, n_, C_, oi, beta);
        if (rstd_next) rstd_next[(size_t)i * n_ + u] = streams::inv_rms(row, C_);
      }
    }
  }
  void inspect(const ResidualState& rs, int N, ResidualInspector<T>& ins) const override {
    const auto& s = cst(rs);
    const int n = n_, M = 2 * n + n * n;
    std::vector<T> maps((size_t)N * M);  // diagnostics only: never called in a training step
    ins.streams(0, s.X[0], N, n, C_);
    for (int l = 1; l <= L2_; ++l) {
      const Params& p = p_[l];
      for (int i = 0; i < N; ++i) {  // m_s, β_u and A_su from the saved tanh values (§5.2)
        const T* t = s.tau[l] + (size_t)i * n * P_;
        T* m = maps.data() + (size_t)i * M;
        for (int r = 0; r < n; ++r) {
          m[r] = *p.s_alpha * t[r * P_ + 1] + p.m0[r];
          m[n + r] = *p.s_beta * t[r * P_] + p.beta0[r];
          for (int u = 0; u < n; ++u)  // res_ur = A_ru: X′_u = Σ_r A_ru X_r
            m[2 * n + u * n + r] = *p.s_alpha * t[r * P_ + 2 + u] + p.a0[r * n + u];
        }
      }
      ins.stream_maps(l, maps.data(), N, n);
      ins.streams(l, s.X[l], N, n, C_);
    }
  }

  const T* branch_grad(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const Params& p = p_[l];
    const T *dXn = s.dX[s.cur], *tau = s.tau[l];
    const T s_beta = *p.s_beta;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) {  // do = Σ_u β_u dX′_u
      T beta[kMaxStreams];
      for (int u = 0; u < n_; ++u) beta[u] = s_beta * tau[((size_t)i * n_ + u) * P_] + p.beta0[u];
      streams::combine(s.dout + (size_t)i * C_, beta, dXn + (size_t)i * n_ * C_, C_, n_, C_);
    }
    return s.dout;
  }
  void read_backward(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const Params& p = p_[l];
    const Params& g = g_[l];
    const T *dXn = s.dX[s.cur], *X = s.X[l - 1], *tau = s.tau[l], *rstd = s.rstd[l], *o = s.o[l], *du = s.dh;
    T* dX = s.dX[1 - s.cur];
    const T s_alpha = *p.s_alpha, s_beta = *p.s_beta;
    const int cols = per_token_cols(), n = n_;
    pack(s.pack, p);  // Wᵀ of this sublayer (the pack is shared by all sublayers)
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) {
      const T* t = tau + (size_t)i * n * P_;
      const T* Xi = X + (size_t)i * n * C_;
      const T* gi = dXn + (size_t)i * n * C_;
      const T* oi = o + (size_t)i * C_;
      const T* dui = du + (size_t)i * C_;
      T* z = s.z + (size_t)i * n * P_;
      T* pt = s.per_token + (size_t)i * cols;  // [dβ (n), dm (n), dA (n²), ds_β, ds_α]
      T ds_beta = 0, ds_alpha = 0;
      streams::dots(pt, oi, gi, C_, n, C_);          // dβ_u = dX′_u·o
      streams::dots(pt + n, dui, Xi, C_, n, C_);     // dm_s = du·X_s
      for (int r = 0; r < n; ++r) streams::dots(pt + 2 * n + r * n, Xi + (size_t)r * C_, gi, C_, n, C_);  // dA_su = dX′_u·X_s
      for (int u = 0; u < n; ++u) {
        const T dbeta = pt[u];
        ds_beta += dbeta * t[u * P_];
        z[u * P_] = dbeta * s_beta * (1 - t[u * P_] * t[u * P_]);
      }
      for (int r = 0; r < n; ++r) {
        const T dm = pt[n + r];
        ds_alpha += dm * t[r * P_ + 1];
        z[r * P_ + 1] = dm * s_alpha * (1 - t[r * P_ + 1] * t[r * P_ + 1]);
        T a[kMaxStreams];
        for (int u = 0; u < n; ++u) {
          const T dA = pt[2 * n + r * n + u];
          const T tr = t[r * P_ + 2 + u];
          ds_alpha += dA * tr;
          z[r * P_ + 2 + u] = dA * s_alpha * (1 - tr * tr);
          a[u] = s_alpha * tr + p.a0[r * n + u];
        }
        // dX_s = Σ_u A_su dX′_u + m_s du (written; the map-input path is added after the GEMMs)
        const T m = s_alpha * t[r * P_ + 1] + p.m0[r];
        streams::combine(dX + ((size_t)i * n + r) * C_, a, gi, C_, n, C_, dui, m);
        for (int j = 0; j < P_; ++j) z[r * P_ + j] *= rstd[(size_t)i * n + r];  // rstd∘z for the GEMM and below
      }
      // dX += RMSNorm_ng backward of z·Wᵀ for this token's n rows, while they are in cache.
      streams::project_back_rms_ng_rows(dX, s.z, s.pre[l], s.pack, (size_t)C_, X, rstd, (size_t)i * n, (size_t)(i + 1) * n, P_, C_);
      pt[2 * n + n * n] = ds_beta;
      pt[2 * n + n * n + 1] = ds_alpha;
    }
    // Sums over tokens: dβ0, dm0, dA0, ds_β, ds_α.
    std::memset(s.sums, 0, sizeof(T) * cols);
    streams::add_column_sums(s.sums, s.per_token, N, cols, cols);
    for (int u = 0; u < n; ++u) { g.beta0[u] += s.sums[u]; g.m0[u] += s.sums[n + u]; }
    for (int k = 0; k < n * n; ++k) g.a0[k] += s.sums[2 * n + k];
    *g.s_beta += s.sums[2 * n + n * n];
    *g.s_alpha += s.sums[2 * n + n * n + 1];
    // dWᵀ = (rstd∘z)ᵀX.
    gemm(true, false, P_, C_, N * n, T(1), s.z, P_, X, C_, T(0), s.dpack, C_);
    unpack_add(g, s.dpack);
    s.cur = 1 - s.cur;
  }
 private:
  struct Params { T *w_beta, *w_m, *w_r, *s_alpha, *s_beta, *beta0, *m0, *a0; };
  int per_token_cols() const { return 2 * n_ + n_ * n_ + 2; }
  // Wᵀ = [w_β | w_m | Wr]ᵀ ((n+2) × d): the projections' weights as rows, for both GEMMs and the fused backward.
  void pack(T* WT, const Params& p) const {
    for (int c = 0; c < C_; ++c) {
      WT[c] = p.w_beta[c];
      WT[C_ + c] = p.w_m[c];
      for (int u = 0; u < n_; ++u) WT[(size_t)(2 + u) * C_ + c] = p.w_r[c * n_ + u];
    }
  }
  void unpack_add(const Params& g, const T* dWT) const {
    for (int c = 0; c < C_; ++c) {
      g.w_beta[c] += dWT[c];
      g.w_m[c] += dWT[C_ + c];
      for (int u = 0; u < n_; ++u) g.w_r[c * n_ + u] += dWT[(size_t)(2 + u) * C_ + c];
    }
  }

  int P_;
  double scale_init_;
  std::vector<Params> p_, g_;  // index l = 1..2L
};

}  // namespace

ATTNLAB_RESIDUAL_KIND(hyper) {
  ResidualKindInfo info("hyper", 30, "5.2");
  info.parallel_streams = [](const Config& c) { return c.residual.streams; };
  set_residual_constructors<Hyper>(info);
  return info;
}

}  // namespace attnlab
