// QK-norm (docs/mechanisms.md §1.8, `attn.qk_norm = on`): RMSNorm with a learned gain on each
// head's query and key before RoPE, as in OLMo 2, Gemma 3 and Qwen3. One gain vector g_q [D_h] is
// shared by the query heads and one g_k [D_h] by the key heads of a layer (initialized to 1, not
// weight-decayed, §0); values are untouched. On GOAT layers q and k carry the prior's packed lanes
// (§3.4), so QK-norm acts on the other layers only.
//
// The normalization is the model's RMSNorm kernel (kernels/norm.h, its naive reference and finite-
// difference tests in tests/kernels/test_norm.cpp) run on the heads gathered into contiguous rows
// (N·H rows of D_h for q, N·H_kv for k): the packed qkv rows interleave q, k and v, and the kernel
// wants contiguous rows. The forward keeps the gathered inputs and 1/rms per head for the backward.
// The naive reference of the whole transform is qk_norm_naive below (the oracle of
// tests/test_qk_norm.cpp).
#include <cstring>

#include "kernels/norm.h"
#include "model/attention/mechanism.h"

namespace attnlab {

// The §1.8 forward written literally, serial, in double: every q and k head of the packed rows
// (rows × stride, q heads then k heads from column 0) is scaled to unit RMS and multiplied by its
// gain, in place.
template <class T>
void qk_norm_naive(T* qkv, const T* gain_q, const T* gain_k, size_t rows, int stride, int H, int Hkv, int Dh) {
  for (size_t n = 0; n < rows; ++n)
    for (int h = 0; h < H + Hkv; ++h) {
      T* x = qkv + n * stride + (size_t)h * Dh;
      const T* g = h < H ? gain_q : gain_k;
      double ms = 0;
      for (int d = 0; d < Dh; ++d) ms += double(x[d]) * double(x[d]);
      const double r = 1.0 / std::sqrt(ms / Dh + kernels::kRmsNormEps);
      for (int d = 0; d < Dh; ++d) x[d] = T(double(g[d]) * double(x[d]) * r);
    }
}
template void qk_norm_naive<float>(float*, const float*, const float*, size_t, int, int, int, int);
template void qk_norm_naive<double>(double*, const double*, const double*, size_t, int, int, int, int);

namespace {

// Copies `width` columns starting at column `col` of each of `rows` strided rows into contiguous
// rows (gather), or back (scatter).
template <class T>
void gather_columns(T* dst, const T* src, size_t rows, int stride, int col, int width) {
#pragma omp parallel for schedule(static) if (rows * width >= kernels::kParallelMinElements)
  for (size_t n = 0; n < rows; ++n) std::memcpy(dst + n * width, src + n * stride + col, width * sizeof(T));
}
template <class T>
void scatter_columns(T* dst, const T* src, size_t rows, int stride, int col, int width) {
#pragma omp parallel for schedule(static) if (rows * width >= kernels::kParallelMinElements)
  for (size_t n = 0; n < rows; ++n) std::memcpy(dst + n * stride + col, src + n * width, width * sizeof(T));
}

template <class T>
struct QkNormState final : MechanismState {
  // Per layer in the training workspace (the backward reads them), one shared set in inference:
  // the gathered inputs (rows·H·D_h, rows·H_kv·D_h) and 1/rms per head (rows·H, rows·H_kv).
  std::vector<T*> x_q, x_k, rstd_q, rstd_k;
  T *rows_out = nullptr, *rows_grad = nullptr;  // scratch, rows·H·D_h each
};

template <class T>
class QkNorm final : public AttentionMechanism<T> {
 public:
  explicit QkNorm(const Config& cfg) : cfg_(cfg) {
    const bool on = mechanism_option(cfg, "attn.qk_norm") == "on";
    for (int l = 0; l < cfg.model.n_layer; ++l) layers_.push_back(on && cfg.attn.pos_at(l) != "goat");
  }
  bool active() const { return any_layer(layers_); }
  const char* name() const override { return "qk_norm"; }
  bool acts_on(int layer) const override { return layers_[layer]; }
  void register_params(ParamRegistry& reg, int layer, const std::string& prefix) const override {
    if (!layers_[layer]) return;
    reg.add(prefix + "q_norm.weight", {cfg_.model.head_dim()}, Init::One, 0, false);
    reg.add(prefix + "k_norm.weight", {cfg_.model.head_dim()}, Init::One, 0, false);
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    const size_t L = layers_.size();
    gain_q_.assign(L, nullptr), gain_k_.assign(L, nullptr), dgain_q_.assign(L, nullptr), dgain_k_.assign(L, nullptr);
    for (size_t l = 0; l < L; ++l) {
      if (!layers_[l]) continue;
      const std::string p = "blocks." + std::to_string(l) + ".attn.";
      const size_t q = reg.find(p + "q_norm.weight")->offset, k = reg.find(p + "k_norm.weight")->offset;
      gain_q_[l] = params + q, gain_k_[l] = params + k, dgain_q_[l] = grads + q, dgain_k_[l] = grads + k;
    }
  }
  std::unique_ptr<MechanismState> make_state() const override { return std::make_unique<QkNormState<T>>(); }
  void plan(Arena& arena, MechanismState& state, size_t rows, int, bool training) const override {
    QkNormState<T>& s = static_cast<QkNormState<T>&>(state);
    const size_t H = cfg_.model.n_head, Hkv = cfg_.model.kv_heads, Dh = cfg_.model.head_dim(), L = layers_.size();
    s.x_q.assign(L, nullptr), s.x_k.assign(L, nullptr), s.rstd_q.assign(L, nullptr), s.rstd_k.assign(L, nullptr);
    T *shared_xq = nullptr, *shared_xk = nullptr, *shared_rq = nullptr, *shared_rk = nullptr;
    if (!training) {
      shared_xq = arena.template take<T>(rows * H * Dh), shared_xk = arena.template take<T>(rows * Hkv * Dh);
      shared_rq = arena.template take<T>(rows * H), shared_rk = arena.template take<T>(rows * Hkv);
    }
    for (size_t l = 0; l < L; ++l) {
      if (!layers_[l]) continue;
      if (training) {
        s.x_q[l] = arena.template take<T>(rows * H * Dh), s.x_k[l] = arena.template take<T>(rows * Hkv * Dh);
        s.rstd_q[l] = arena.template take<T>(rows * H), s.rstd_k[l] = arena.template take<T>(rows * Hkv);
      } else {
        s.x_q[l] = shared_xq, s.x_k[l] = shared_xk, s.rstd_q[l] = shared_rq, s.rstd_k[l] = shared_rk;
      }
    }
    s.rows_out = arena.template take<T>(rows * H * Dh);
    if (training) s.rows_grad = arena.template take<T>(rows * H * Dh);
  }

  // y = g ∘ x/rms(x) per head (§1.8), q heads from column 0, k heads from column H·D_h.
  void transform_forward(AttentionPass<T>& p) const override {
    QkNormState<T>& s = static_cast<QkNormState<T>&>(*p.state);
    const size_t rows = (size_t)p.B * p.Tq;
    normalize(p, s.x_q[p.layer], s.rstd_q[p.layer], s.rows_out, gain_q_[p.layer], rows, 0, p.H);
    normalize(p, s.x_k[p.layer], s.rstd_k[p.layer], s.rows_out, gain_k_[p.layer], rows, p.H * p.Dh, p.Hkv);
  }
  // dx = r(g∘dy − x̂·mean(g∘dy∘x̂)), dg += Σ dy∘x̂ (§1.8 backward: RMSNorm's, kernels/norm.h), in place on dL/dqkv.
  void transform_backward(AttentionPass<T>& p) const override {
    QkNormState<T>& s = static_cast<QkNormState<T>&>(*p.state);
    const size_t rows = (size_t)p.B * p.Tq;
    differentiate(p, s, s.x_q[p.layer], s.rstd_q[p.layer], gain_q_[p.layer], dgain_q_[p.layer], rows, 0, p.H);
    differentiate(p, s, s.x_k[p.layer], s.rstd_k[p.layer], gain_k_[p.layer], dgain_k_[p.layer], rows, p.H * p.Dh, p.Hkv);
  }

 private:
  void normalize(AttentionPass<T>& p, T* x, T* rstd, T* y, const T* gain, size_t rows, int col, int heads) const {
    const int width = heads * p.Dh;
    gather_columns(x, p.qkv, rows, p.qkv_stride, col, width);
    kernels::rmsnorm_forward(y, rstd, x, gain, int(rows * heads), p.Dh);
    scatter_columns(p.qkv, y, rows, p.qkv_stride, col, width);
  }
  void differentiate(AttentionPass<T>& p, QkNormState<T>& s, const T* x, const T* rstd, const T* gain, T* dgain,
                     size_t rows, int col, int heads) const {
    const int width = heads * p.Dh;
    T* dy = s.rows_out;
    T* dx = s.rows_grad;
    gather_columns(dy, p.qkv, rows, p.qkv_stride, col, width);
    std::memset(dx, 0, rows * width * sizeof(T));  // rmsnorm_backward accumulates into dx
    kernels::rmsnorm_backward(dx, dgain, dy, x, gain, rstd, int(rows * heads), p.Dh);
    scatter_columns(p.qkv, dx, rows, p.qkv_stride, col, width);
  }

  Config cfg_;
  std::vector<bool> layers_;
  std::vector<T*> gain_q_, gain_k_, dgain_q_, dgain_k_;  // per layer, [D_h]
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(qk_norm) {
  MechanismInfo info("qk_norm", 40, "1.8");  // before RoPE: normalize, then rotate
  MechanismKey key{.name = "attn.qk_norm",
                   .kind = MechanismKey::Kind::Choice,
                   .default_value = "off",
                   .choices = {"off", "on"},
                   .active = nullptr,  // always settable
                   .inactive_reason = "",
                   .shown = [](const Config& c) { return mechanism_option(c, "attn.qk_norm") == "on"; }};
  info.keys.push_back(key);
  info.validate = [](const Config& c, const std::function<std::string(const char*)>& where) {
    if (mechanism_option(c, "attn.qk_norm") != "on") return;
    bool any = false;
    for (int l = 0; l < c.model.n_layer; ++l) any |= c.attn.pos_at(l) != "goat";
    if (!any)
      fail(where("attn.qk_norm"), ": attn.qk_norm = on has no effect because every layer is a GOAT layer (its q and k carry "
           "the prior's lanes, docs/mechanisms.md §1.8); set attn.goat.layers to leave some layers to QK-norm, or turn it off");
  };
  set_mechanism_constructors<QkNorm>(info);
  return info;
}

}  // namespace attnlab
