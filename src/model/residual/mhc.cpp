// mHC: Manifold-constrained hyper-connections (docs/mechanisms.md §5.1, §5.3). n streams per token,
// expanded from e and collapsed by a sum, as HC; sublayer l, per token, with x⃗ = [X_0..X_{n−1}]:
//   x̂ = RMSNorm_ng(x⃗) over nd values;  H̃ = α∘(x̂Φ) + b  for pre (n), post (n) and res (n×n)
//   Hpre = σ(H̃pre);  Hpost = 2σ(H̃post);  Hres = Sinkhorn–Knopp(H̃res)  (kernels/sinkhorn.h)
//   u = Σ_s Hpre_s X_s;  o = F_l(u);  X′_s = Σ_u Hres_su X_u + Hpost_s o
// Init [Ours, §5.3]: Φ = 0, α = alpha_init, bpost = 0, bpre = logit of home_weight on the home stream
// h(l) = (l−1) mod n and of (1−home_weight)/(n−1) elsewhere, bres = ln(res_diag(n−1)/(1−res_diag))·I:
// rows of Hres and Hpre sum to 1 and Hpost = 1, so every stream equals the standard residual stream.
//
// The three projections are one product x⃗·[Φpre | Φpost | Φres] (M = n² + 2n columns), and
// x̂Φ = rstd∘(x⃗Φ). Saved per sublayer: x̂Φ and the maps (2M floats per token); the backward [Derived,
// §5.3] recomputes the Sinkhorn iterates from H̃res = αres·x̂Φres + bres.
//
// The state is n times the residual stream (16 MB per sublayer at the bench shape, n = 4), so the
// cost of this kind is mostly passes over it; each pass does as much as it can per group of G = 16
// tokens while their rows are in cache (kernels in streams.h, measured in docs/performance.md):
//   forward, write(l): X_l = Hres X_{l−1} + Hpost o, its 1/ρ, then all of read(l+1) — x⃗Φ, the maps
//     (the Sinkhorn iterations SIMD across the group), u = Σ_s Hpre_s X_s — on the rows just written;
//   backward, read_backward(l): dX_{l−1} through the maps and the norm, dΦᵀ += zᵀx⃗ (per-thread
//     slices, added in thread order), and the next branch's do = Σ_s Hpost_s dX_s of sublayer l − 1.
// Only read(1) and the first branch_grad make passes of their own.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/depth_attention.h"
#include "kernels/sinkhorn.h"
#include "model/residual/residual.h"
#include "model/residual/streams.h"

namespace attnlab {
namespace {

using streams::kMaxStreams;

template <class T>
struct MhcState : streams::StreamsState<T> {
  std::vector<T*> proj, H;  // per sublayer: x̂Φ (N, M), [Hpre | Hpost | Hres] (N, M)
  T* phi = nullptr;         // Φ in the forward's layout (pack_rows)
  // backward
  T *xpack = nullptr, *work = nullptr;
  int threads = 0;
  int read_ready = 0;  // the sublayer whose read write() already did (0: none)
  int dout_ready = 0;  // the sublayer whose do = Σ_s Hpost_s dX′_s read_backward already left in dout (0: none)
};

template <class T>
class Mhc final : public streams::StreamsResidual<T, MhcState<T>> {
  using Base = streams::StreamsResidual<T, MhcState<T>>;
  using Base::C_, Base::L2_, Base::n_, Base::st, Base::cst;

 public:
  explicit Mhc(const Config& cfg)
      : Base(cfg), nd_(n_ * C_), M_(n_ * n_ + 2 * n_), iters_(cfg.residual.mhc_sinkhorn_iters), rc_(cfg.residual) {}
  const char* kind() const override { return "mhc"; }

  void register_params(ParamRegistry& reg) const override {
    const int n = n_;
    const double w = rc_.mhc_home_weight, r = rc_.mhc_res_diag;
    auto logit = [](double p) { return std::log(p / (1 - p)); };
    for (int l = 1; l <= L2_; ++l) {
      const int home = (l - 1) % n;  // h(l), §5.1: the rotating home read breaks the stream symmetry
      std::vector<double> b_pre(n, logit((1 - w) / (n - 1))), b_res((size_t)n * n, 0.0);
      b_pre[home] = logit(w);
      for (int s = 0; s < n; ++s) b_res[(size_t)s * n + s] = std::log(r * (n - 1) / (1 - r));
      const bool normal = rc_.mhc_phi_init == "normal";
      for (auto [name, cols] : {std::pair{"phi_pre", n}, std::pair{"phi_post", n}, std::pair{"phi_res", n * n}})
        reg.add(residual_param(l, name), {nd_, cols}, normal ? Init::Normal : Init::Zero, normal ? 0.02 : 0, false);
      for (const char* name : {"alpha_pre", "alpha_post", "alpha_res"})
        reg.add(residual_param(l, name), {1}, Init::Constant, rc_.mhc_alpha_init, false);
      reg.add_values(residual_param(l, "b_pre"), {n}, b_pre, false);
      reg.add(residual_param(l, "b_post"), {n}, Init::Zero, 0, false);
      reg.add_values(residual_param(l, "b_res"), {n, n}, b_res, false);
    }
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    p_.assign(L2_ + 1, {});
    g_.assign(L2_ + 1, {});
    for (int l = 1; l <= L2_; ++l) {
      auto at = [&](const char* name, T* base) { return base + reg.find(residual_param(l, name))->offset; };
      for (auto [t, base] : {std::pair{&p_[l], params}, std::pair{&g_[l], grads}}) {
        t->phi_pre = at("phi_pre", base); t->phi_post = at("phi_post", base); t->phi_res = at("phi_res", base);
        t->alpha_pre = at("alpha_pre", base); t->alpha_post = at("alpha_post", base); t->alpha_res = at("alpha_res", base);
        t->b_pre = at("b_pre", base); t->b_post = at("b_post", base); t->b_res = at("b_res", base);
      }
    }
  }

  void plan(Arena& arena, ResidualState& rs, size_t rows, bool training) const override {
    auto& s = st(rs);
    const size_t before = arena.planned();
    this->plan_states(arena, s, rows, training, 1, M_, s.proj, s.H);  // x̂Φ and the maps
    s.pack = arena.template take<T>((size_t)ld_pack_ * M_);
    s.phi = arena.template take<T>((size_t)nd_ * ld_phi_);
    if (training) {
      s.dX[0] = arena.template take<T>(rows * nd_);
      s.dX[1] = arena.template take<T>(rows * nd_);
      s.dh = arena.template take<T>(rows * C_);
      s.dout = arena.template take<T>(rows * C_);
      s.z = arena.template take<T>(rows * M_);
      s.per_token = arena.template take<T>(rows * (M_ + 3));
      s.sums = arena.template take<T>(M_ + 3);
      // Sinkhorn backward work, one slice per thread (the backward loop runs on at most s.threads).
      if (!arena.committed()) s.threads = omp_get_max_threads();
      s.work = arena.template take<T>((size_t)s.threads * work_per_thread());
      s.dpack = arena.template take<T>((size_t)s.threads * M_ * ld_pack_);  // each thread's dΦᵀ (M × nd at ld_pack_)
      s.xpack = arena.template take<T>((size_t)s.threads * kernels::kSinkhornMaxGroup * nd_);  // add_outer_rows' copy of a group
    }
    if (!arena.committed()) s.bytes = arena.planned() - before;
  }

  void begin(ResidualState& rs, int N) const override {
    st(rs).read_ready = 0;
    streams::expand(st(rs).X[0], st(rs).e, N, n_, C_);
    kernels::rms_inverse(st(rs).rstd[1], st(rs).X[0], N, nd_);  // later 1/ρ come from write() (below)
  }

  const T* read(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    T *H = s.H[l], *h = s.h[l];
    const int n = n_;
    if (s.read_ready != l) {  // else write(l − 1) did it, group by group, while the state's rows were in cache
      pack_rows(s.phi, p_[l]);
      constexpr int G = kernels::kSinkhornMaxGroup;
#pragma omp parallel for schedule(static)
      for (int i0 = 0; i0 < N; i0 += G) read_group(s, l, i0, std::min(G, N - i0));
    }
    const T* X = s.X[l - 1];
    for (int s2 = 0; s2 < n; ++s2)  // §8.5 diagnostics: a patched stream's share Hpre_s·X_s
      if (const T* P = s.patch[(size_t)l * n + s2])
        streams::patch_contribution(h, P, X, s2, N, n, C_, [&](int i) { return H[(size_t)i * M_ + s2]; });
    return h;
  }
  void write(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const T *X = s.X[l - 1], *H = s.H[l], *o = s.o[l];
    T* Xn = s.X[l];
    const bool next = l < L2_;  // then sublayer l+1's read runs here, on each group's rows while they are in cache
    T* rstd_next = next ? s.rstd[l + 1] : nullptr;
    const int n = n_;
    if (next) pack_rows(s.phi, p_[l + 1]);
    constexpr int G = kernels::kSinkhornMaxGroup;
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += G) {
      const int count = std::min(G, N - i0);
      for (int i = i0; i < i0 + count; ++i) {
        const T* Hi = H + (size_t)i * M_;
        const T* oi = o + (size_t)i * C_;
        for (int s2 = 0; s2 < n; ++s2)  // X′_s = Σ_u Hres_su X_u + Hpost_s o
          streams::combine(Xn + (size_t)i * nd_ + (size_t)s2 * C_, Hi + 2 * n + s2 * n, X + (size_t)i * nd_, C_, n, C_, oi, Hi[n + s2]);
        if (next) rstd_next[i] = streams::inv_rms(Xn + (size_t)i * nd_, nd_);
      }
      if (next) read_group(s, l + 1, i0, count);
    }
    s.read_ready = next ? l + 1 : 0;
  }
  void inspect(const ResidualState& rs, int N, ResidualInspector<T>& ins) const override {
    const auto& s = cst(rs);
    ins.streams(0, s.X[0], N, n_, C_);
    for (int l = 1; l <= L2_; ++l) {
      ins.stream_maps(l, s.H[l], N, n_);  // [Hpre | Hpost | Hres] per token, as stored
      ins.streams(l, s.X[l], N, n_, C_);
    }
  }

  void read_out_backward(ResidualState& rs, int N) const override {
    st(rs).dout_ready = 0;
    Base::read_out_backward(rs, N);
  }
  const T* branch_grad(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    if (s.dout_ready == l) return s.dout;  // formed by read_backward(l + 1) while dX′ was in cache
    const T *dXn = s.dX[s.cur], *H = s.H[l];
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i)  // do = Σ_s Hpost_s dX′_s
      streams::combine(s.dout + (size_t)i * C_, H + (size_t)i * M_ + n_, dXn + (size_t)i * nd_, C_, n_, C_);
    return s.dout;
  }
  void read_backward(ResidualState& rs, int l, int N) const override {
    auto& s = st(rs);
    const Params& p = p_[l];
    const Params& g = g_[l];
    const T *dXn = s.dX[s.cur], *X = s.X[l - 1], *proj = s.proj[l], *H = s.H[l], *rstd = s.rstd[l], *o = s.o[l], *du = s.dh;
    T* dX = s.dX[1 - s.cur];
    const T a_pre = *p.alpha_pre, a_post = *p.alpha_post, a_res = *p.alpha_res;
    const int n = n_, M = M_, cols = M_ + 3;
    const size_t wpt = work_per_thread();
    constexpr int G = kernels::kSinkhornMaxGroup;
    pack(s.pack, p);  // Φᵀ of this sublayer (the pack is shared by all sublayers)
    const T* H_prev = l >= 2 ? s.H[l - 1] : nullptr;
    int team = 1;
#pragma omp parallel num_threads(std::min(s.threads, omp_get_max_threads()))
    {
      const int tid = omp_get_thread_num();
      if (tid == 0) team = omp_get_num_threads();
      T* work = s.work + (size_t)tid * wpt;
      T* dWT = s.dpack + (size_t)tid * M_ * ld_pack_;  // this thread's share of dΦᵀ = zᵀ·x⃗
      T* xpack = s.xpack + (size_t)tid * G * nd_;
      std::fill(dWT, dWT + (size_t)M_ * ld_pack_, T(0));
#pragma omp for schedule(static)
      for (int i0 = 0; i0 < N; i0 += G) {
        const int count = std::min(G, N - i0);
        T logits[kMaxStreams * kMaxStreams * G], dHres[kMaxStreams * kMaxStreams * G], dlogits[kMaxStreams * kMaxStreams * G];
        for (int g = 0; g < G; ++g) {
          const int i = i0 + std::min(g, count - 1);  // a short last group repeats its last token (its result unused)
          const T* Xi = X + (size_t)i * nd_;
          const T* gi = dXn + (size_t)i * nd_;
          const T* oi = o + (size_t)i * C_;
          const T* dui = du + (size_t)i * C_;
          const T* q = proj + (size_t)i * M;
          const T* Hi = H + (size_t)i * M;
          T* pt = s.per_token + (size_t)i * cols;  // [dH̃pre (n), dH̃post (n), dH̃res (n²), dα_pre, dα_post, dα_res]
          for (int k = 0; k < n * n; ++k) {
            logits[k * G + g] = a_res * q[2 * n + k] + p.b_res[k];
            dlogits[k * G + g] = 0;
          }
          if (g >= count) {
            for (int k = 0; k < n * n; ++k) dHres[k * G + g] = 0;
            continue;
          }
          T row[kMaxStreams], dpre[kMaxStreams], dpost[kMaxStreams];
          for (int s2 = 0; s2 < n; ++s2) {  // dHres_su = dX′_s·X_u
            streams::dots(row, gi + (size_t)s2 * C_, Xi, C_, n, C_);
            for (int u = 0; u < n; ++u) dHres[(s2 * n + u) * G + g] = row[u];
          }
          streams::dots(dpre, dui, Xi, C_, n, C_);   // du·X_s
          streams::dots(dpost, oi, gi, C_, n, C_);   // dX′_s·o
          for (int s2 = 0; s2 < n; ++s2) {
            pt[s2] = dpre[s2] * Hi[s2] * (1 - Hi[s2]);
            pt[n + s2] = dpost[s2] * Hi[n + s2] * (1 - Hi[n + s2] / 2);
          }
          for (int u = 0; u < n; ++u) {  // dX_u = Σ_s Hres_su dX′_s + Hpre_u du (written; the map path comes later)
            for (int s2 = 0; s2 < n; ++s2) row[s2] = Hi[2 * n + s2 * n + u];
            streams::combine(dX + (size_t)i * nd_ + (size_t)u * C_, row, gi, C_, n, C_, dui, Hi[u]);
          }
        }
        kernels::sinkhorn_backward_batch(dlogits, dHres, logits, n, iters_, work);
        for (int g = 0; g < count; ++g) {
          const int i = i0 + g;
          const T* q = proj + (size_t)i * M;
          T* pt = s.per_token + (size_t)i * cols;
          T* z = s.z + (size_t)i * M;
          for (int k = 0; k < n * n; ++k) pt[2 * n + k] = dlogits[k * G + g];
          T da_pre = 0, da_post = 0, da_res = 0;
          for (int s2 = 0; s2 < n; ++s2) {
            da_pre += pt[s2] * q[s2];
            da_post += pt[n + s2] * q[n + s2];
          }
          for (int k = 0; k < n * n; ++k) da_res += pt[2 * n + k] * q[2 * n + k];
          pt[M] = da_pre;
          pt[M + 1] = da_post;
          pt[M + 2] = da_res;
          // z = rstd∘α∘dH̃: the gradient of x⃗Φ's row, for dΦ = x⃗ᵀz and dx̂ = z·Φᵀ/rstd.
          for (int j = 0; j < M; ++j) z[j] = rstd[i] * (j < n ? a_pre : j < 2 * n ? a_post : a_res) * pt[j];
        }
        // dX += RMSNorm_ng backward of z·Φᵀ for this group's tokens, while they are in cache.
        streams::project_back_rms_ng_rows(dX, s.z, proj, s.pack, ld_pack_, X, rstd, (size_t)i0, (size_t)(i0 + count), M, nd_);
        streams::add_outer_rows(dWT, ld_pack_, s.z, X, (size_t)i0, (size_t)(i0 + count), M, nd_, xpack);
        if (H_prev)  // the next branch_grad's do = Σ_s Hpost_s dX_s of sublayer l − 1, these rows being final
          for (int g = 0; g < count; ++g) {
            const size_t i = (size_t)(i0 + g);
            streams::combine(s.dout + i * C_, H_prev + i * M + n, dX + i * nd_, C_, n, C_);
          }
      }
    }
    std::memset(s.sums, 0, sizeof(T) * cols);
    streams::add_column_sums(s.sums, s.per_token, N, cols, cols);
    for (int k = 0; k < n; ++k) { g.b_pre[k] += s.sums[k]; g.b_post[k] += s.sums[n + k]; }
    for (int k = 0; k < n * n; ++k) g.b_res[k] += s.sums[2 * n + k];
    *g.alpha_pre += s.sums[M];
    *g.alpha_post += s.sums[M + 1];
    *g.alpha_res += s.sums[M + 2];
    unpack_add(g, s.dpack, team);
    s.cur = 1 - s.cur;
    s.dout_ready = l - 1;
  }
 private:
  struct Params { T *phi_pre, *phi_post, *phi_res, *alpha_pre, *alpha_post, *alpha_res, *b_pre, *b_post, *b_res; };
  size_t work_per_thread() const { return kernels::sinkhorn_work_size(n_, iters_) * kernels::kSinkhornMaxGroup; }
  // Φᵀ = [Φpre | Φpost | Φres]ᵀ (M × nd, rows ld_pack_ apart): the projections' weights as rows, for
  // the fused backward.
  void pack(T* WT, const Params& p) const {
    const int n = n_;
    const size_t ld = ld_pack_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nd_; ++r) {
      for (int k = 0; k < n; ++k) {
        WT[(size_t)k * ld + r] = p.phi_pre[(size_t)r * n + k];
        WT[(size_t)(n + k) * ld + r] = p.phi_post[(size_t)r * n + k];
      }
      for (int k = 0; k < n * n; ++k) WT[(size_t)(2 * n + k) * ld + r] = p.phi_res[(size_t)r * n * n + k];
    }
  }
  // Sublayer l's read for the tokens i0..i0+count (count ≤ G): x⃗Φ, the maps H and u = Σ_s Hpre_s X_s.
  // Groups of G tokens: the Sinkhorn iterations run as SIMD across the group (kernels/sinkhorn.h).
  // Needs Φ packed by pack_rows and 1/ρ of the state's rows (computed when the state was written).
  void read_group(MhcState<T>& s, int l, int i0, int count) const {
    constexpr int G = kernels::kSinkhornMaxGroup;
    const Params& p = p_[l];
    const T* X = s.X[l - 1];
    T *rstd = s.rstd[l], *proj = s.proj[l], *H = s.H[l], *h = s.h[l];
    const int n = n_;
    const T a_pre = *p.alpha_pre, a_post = *p.alpha_post, a_res = *p.alpha_res;
    T logits[kMaxStreams * kMaxStreams * G];
    streams::project_rows(proj + (size_t)i0 * M_, X + (size_t)i0 * nd_, s.phi, ld_phi_, 0, (size_t)count, M_, nd_);  // x⃗Φ
    for (int g = 0; g < G; ++g) {
      const int i = i0 + std::min(g, count - 1);  // a short last group repeats its last token
      T* q = proj + (size_t)i * M_;
      T* Hi = H + (size_t)i * M_;
      if (g < count) {
        for (int j = 0; j < M_; ++j) q[j] *= rstd[i];  // x̂Φ = rstd∘(x⃗Φ)
        for (int s2 = 0; s2 < n; ++s2) {
          Hi[s2] = T(1) / (T(1) + std::exp(-(a_pre * q[s2] + p.b_pre[s2])));
          Hi[n + s2] = T(2) / (T(1) + std::exp(-(a_post * q[n + s2] + p.b_post[s2])));
        }
      }
      for (int k = 0; k < n * n; ++k) logits[k * G + g] = a_res * q[2 * n + k] + p.b_res[k];
    }
    kernels::sinkhorn_forward_batch(logits, n, iters_);
    for (int g = 0; g < count; ++g) {
      const int i = i0 + g;
      T* Hi = H + (size_t)i * M_;
      for (int k = 0; k < n * n; ++k) Hi[2 * n + k] = logits[k * G + g];
      streams::combine(h + (size_t)i * C_, Hi, X + (size_t)i * nd_, C_, n, C_);  // u = Σ_s Hpre_s X_s
    }
  }
  // Φ = [Φpre | Φpost | Φres] (nd × M, rows ld_phi_ apart, zero beyond M): the forward's layout.
  void pack_rows(T* Wr, const Params& p) const {
    const int n = n_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nd_; ++r) {
      T* w = Wr + (size_t)r * ld_phi_;
      std::copy_n(p.phi_pre + (size_t)r * n, n, w);
      std::copy_n(p.phi_post + (size_t)r * n, n, w + n);
      std::copy_n(p.phi_res + (size_t)r * n * n, n * n, w + 2 * n);
      std::fill(w + M_, w + ld_phi_, T(0));
    }
  }
  // Φ's gradient += the threads' dΦᵀ slices, added in thread order (the same bits on every run with the
  // same thread count).
  void unpack_add(const Params& g, const T* dWT, int threads) const {
    const int n = n_;
    const size_t slice = (size_t)M_ * ld_pack_;
    auto sum = [&](int row, int r) {
      T v = 0;
      for (int t = 0; t < threads; ++t) v += dWT[(size_t)t * slice + (size_t)row * ld_pack_ + r];
      return v;
    };
#pragma omp parallel for schedule(static)
    for (int r = 0; r < nd_; ++r) {
      for (int k = 0; k < n; ++k) {
        g.phi_pre[(size_t)r * n + k] += sum(k, r);
        g.phi_post[(size_t)r * n + k] += sum(n + k, r);
      }
      for (int k = 0; k < n * n; ++k) g.phi_res[(size_t)r * n * n + k] += sum(2 * n + k, r);
    }
  }

  int nd_, M_, iters_;
  // The pack's row stride: nd plus 16 (64 bytes), so that its rows do not all fall in one L1 set when
  // nd·4 bytes is a multiple of 4 KiB (n = 4, d = 256: the fused backward reads 24 of them per block).
  size_t ld_pack_ = (size_t)nd_ + 16;
  size_t ld_phi_ = (size_t)(M_ + streams::kProjectBlock<T> - 1) / streams::kProjectBlock<T> * streams::kProjectBlock<T>;
  ResidualConfig rc_;
  std::vector<Params> p_, g_;  // index l = 1..2L
};

}  // namespace

ATTNLAB_RESIDUAL_KIND(mhc) {
  ResidualKindInfo info("mhc", 40, "5.3");
  info.parallel_streams = [](const Config& c) { return c.residual.streams; };
  set_residual_constructors<Mhc>(info);
  return info;
}

}  // namespace attnlab
