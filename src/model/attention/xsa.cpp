// XSA, Exclusive Self Attention (docs/mechanisms.md §2, `attn.xsa = on | gated`, `attn.xsa.layers`):
// an epilogue of the fused kernel on each head's output, z = y − γ_h (y·v̂)v̂ with v̂ the token's own
// value direction (AttentionExtras::xsa_gamma, xsa_c). γ = 1 ("on"), or γ = tanh(a_h) with a
// zero-initialized gate a ("gated", §2.1), whose gradient da = (1 − γ²)·dγ (§2.2) is applied here
// after the kernel's backward.
#include <algorithm>
#include <cmath>

#include "model/attention/mechanism.h"

namespace attnlab {
namespace {

template <class T>
struct XsaState final : MechanismState {
  std::vector<T*> c, gamma;  // per layer: c = y·v̂ [rows·H] (written by the forward kernel) and γ [H]
  T* dgamma = nullptr;       // [H] backward scratch: dL/dγ of the layer being differentiated
};

template <class T>
class Xsa final : public AttentionMechanism<T> {
 public:
  explicit Xsa(const Config& cfg) : cfg_(cfg), gated_(cfg.attn.xsa == "gated"), ones_(cfg.model.n_head, T(1)) {
    for (int l = 0; l < cfg.model.n_layer; ++l) layers_.push_back(cfg.attn.xsa_at(l));
  }
  bool active() const { return cfg_.attn.xsa != "off"; }
  const char* name() const override { return "xsa"; }
  bool acts_on(int layer) const override { return layers_[layer]; }
  void register_params(ParamRegistry& reg, int, const std::string& prefix) const override {
    if (gated_) reg.add(prefix + "xsa_gate", {cfg_.model.n_head}, Init::Zero, 0, false);  // §2.1: zero-init, no decay
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    gate_.assign(cfg_.model.n_layer, nullptr);
    dgate_.assign(cfg_.model.n_layer, nullptr);
    for (int l = 0; l < cfg_.model.n_layer; ++l)
      if (const ParamSpec* s = reg.find("blocks." + std::to_string(l) + ".attn.xsa_gate")) {
        gate_[l] = params + s->offset;
        dgate_[l] = grads + s->offset;
      }
  }
  std::unique_ptr<MechanismState> make_state() const override { return std::make_unique<XsaState<T>>(); }
  void plan(Arena& arena, MechanismState& state, size_t rows, int, bool) const override {
    XsaState<T>& s = static_cast<XsaState<T>&>(state);
    const size_t H = cfg_.model.n_head;
    s.c.assign(layers_.size(), nullptr);
    s.gamma.assign(layers_.size(), nullptr);
    for (size_t l = 0; l < layers_.size(); ++l)
      if (layers_[l]) {
        s.c[l] = arena.template take<T>(rows * H);
        s.gamma[l] = arena.template take<T>(H);
      }
    s.dgamma = arena.template take<T>(H);
  }
  void kernel_terms(AttentionPass<T>& p) const override {
    XsaState<T>& s = static_cast<XsaState<T>&>(*p.state);
    T* gamma = s.gamma[p.layer];
    if (gated_)
      for (int h = 0; h < p.H; ++h) gamma[h] = std::tanh(gate_[p.layer][h]);  // gated: γ = tanh(a)
    else
      std::copy(ones_.begin(), ones_.end(), gamma);
    p.extras.xsa_gamma = gamma;
    p.extras.xsa_c = s.c[p.layer];
  }
  void kernel_gradient_slots(AttentionPass<T>& p) const override {
    if (!gated_) return;
    T* dgamma = static_cast<XsaState<T>&>(*p.state).dgamma;
    std::fill(dgamma, dgamma + p.H, T(0));
    p.extras.dxsa_gamma = dgamma;
  }
  void after_kernel_backward(AttentionPass<T>& p) const override {
    if (!gated_) return;
    XsaState<T>& s = static_cast<XsaState<T>&>(*p.state);
    const T* gamma = s.gamma[p.layer];
    const T* dgamma = s.dgamma;
    for (int h = 0; h < p.H; ++h) dgate_[p.layer][h] += (T(1) - gamma[h] * gamma[h]) * dgamma[h];  // da = (1 − γ²)·dγ (§2.2)
  }

 private:
  Config cfg_;
  bool gated_;
  std::vector<bool> layers_;
  std::vector<T> ones_;           // γ = 1 for attn.xsa = on
  std::vector<T*> gate_, dgate_;  // per layer, [H] (gated only)
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(xsa) {
  MechanismInfo info("xsa", 20, "2");
  set_mechanism_constructors<Xsa>(info);
  return info;
}

}  // namespace attnlab
