// GOAT trainable attention priors (docs/mechanisms.md §3, `attn.pos = goat`, `attn.goat.*`): on
// GOAT layers the projection writes a compact row per token (content q/k of D_c = D_h − P_l dims,
// full v), unpacked into the packed layout with the prior's lanes (§3.4's concatenation trick:
// kernels/goat.h), so the unchanged kernel computes content logits plus the learned log-prior. The
// logit scale is 1 (1/sqrt(D_c) is folded into the packed queries); with a learned sink, the sink
// logit moves with the key form's row constant (AttentionExtras::sink_slope).
#include "kernels/goat.h"
#include "model/attention/mechanism.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

template <class T>
struct GoatState final : MechanismState {
  std::vector<T*> sink_slope;  // per GOAT layer: softplus(ρ_κ(h)) per query head [H], written by the unpack
  T* compact = nullptr;        // (rows, compact_dim): the projection's output (forward) / its gradient (backward)
  T* profile = nullptr;        // [2·seq]: the key profile u (forward) / u and du (backward)
  T* dsink_slope = nullptr;    // [H] backward scratch
};

template <class T>
class Goat final : public AttentionMechanism<T> {
 public:
  explicit Goat(const Config& cfg) : cfg_(cfg) {
    const ModelConfig& m = cfg.model;
    const GoatConfig& g = cfg.attn.goat;
    shape_ = {m.n_head, m.kv_heads, m.head_dim(), g.pos_rank, g.abs_rank, g.key_bias};
    for (int l = 0; l < m.n_layer; ++l) layers_.push_back(cfg.attn.goat_at(l));
  }
  bool active() const { return cfg_.attn.pos == "goat"; }
  const char* name() const override { return "goat"; }
  bool acts_on(int layer) const override { return layers_[layer]; }

  // §3.3 parameters and §3.6 init; none is weight-decayed [Ours].
  void register_params(ParamRegistry& reg, int, const std::string& prefix) const override {
    const GoatConfig& gc = cfg_.attn.goat;
    const std::string g = prefix + "goat.";
    const int Hkv = cfg_.model.kv_heads, R = gc.pos_rank, F = shape_.features();
    const bool seeded = gc.init == "seeded";
    reg.add(g + "A", {Hkv, R}, seeded ? Init::Normal : Init::Zero, 0.01, false);
    reg.add(g + "B", {Hkv, R}, Init::Zero, 0, false);
    if (!gc.key_bias) return;
    reg.add(g + "W1", {kernels::kGoatHidden, F}, Init::Normal, gc.init_std, false);
    reg.add(g + "b1", {kernels::kGoatHidden}, Init::Zero, 0, false);
    reg.add(g + "w2", {kernels::kGoatHidden}, seeded ? Init::Normal : Init::Zero, gc.init_std, false);
    reg.add(g + "b2", {1}, Init::Zero, 0, false);
    reg.add(g + "gain", {Hkv}, Init::One, 0, false);
    reg.add(g + "bump", {Hkv}, Init::Zero, 0, false);
    std::vector<double> rho(Hkv, -30.0);  // uniform: softplus(−30) ≈ 1e-13, no recency
    if (seeded) {  // the recency term starts as exact ALiBi with slopes for H_kv heads
      const std::vector<double> slopes = alibi_slopes(Hkv);
      for (int k = 0; k < Hkv; ++k) rho[k] = kernels::goat_softplus_inverse(slopes[k]);
    }
    reg.add_values(g + "rho", {Hkv}, rho, false);
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    params_.assign(layers_.size(), {});
    grads_.assign(layers_.size(), {});
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (!layers_[l]) continue;
      const std::string g = "blocks." + std::to_string(l) + ".attn.goat.";
      auto at = [&](T* base, const char* name) -> T* {
        const ParamSpec* s = reg.find(g + name);
        return s ? base + s->offset : nullptr;
      };
      params_[l] = {at(params, "A"), at(params, "B"), at(params, "W1"), at(params, "b1"), at(params, "w2"),
                    at(params, "b2"), at(params, "gain"), at(params, "bump"), at(params, "rho")};
      grads_[l] = {at(grads, "A"), at(grads, "B"), at(grads, "W1"), at(grads, "b1"), at(grads, "w2"),
                   at(grads, "b2"), at(grads, "gain"), at(grads, "bump"), at(grads, "rho")};
    }
  }
  void ensure_positions(int n) override {
    if (n <= tables_.max_pos) return;
    const GoatConfig& g = cfg_.attn.goat;
    tables_ = kernels::make_goat_tables<T>(n, g.pos_rank, g.abs_rank, g.pos_base, g.abs_base, g.train_len);
  }

  std::unique_ptr<MechanismState> make_state() const override { return std::make_unique<GoatState<T>>(); }
  void plan(Arena& arena, MechanismState& state, size_t rows, int seq, bool) const override {
    GoatState<T>& s = static_cast<GoatState<T>&>(state);
    const size_t H = cfg_.model.n_head;
    s.sink_slope.assign(layers_.size(), nullptr);
    for (size_t l = 0; l < layers_.size(); ++l)
      if (layers_[l]) s.sink_slope[l] = arena.template take<T>(H);
    s.compact = arena.template take<T>(rows * shape_.compact_dim());
    s.profile = arena.template take<T>(2 * (size_t)seq);
    s.dsink_slope = arena.template take<T>(H);
  }

  int projection_columns(int layer) const override { return layers_[layer] ? shape_.compact_dim() : 0; }
  T* projection_output(MechanismState& state) const override { return static_cast<GoatState<T>&>(state).compact; }
  void unpack_forward(AttentionPass<T>& p) const override {
    GoatState<T>& s = static_cast<GoatState<T>&>(*p.state);
    kernels::goat_pack_forward(p.qkv, s.sink_slope[p.layer], s.profile, s.compact, params(p.layer), tables_, shape_, p.B,
                               p.Tq, p.pos_offset);
  }
  void unpack_backward(AttentionPass<T>& p) const override {
    GoatState<T>& s = static_cast<GoatState<T>&>(*p.state);
    kernels::goat_pack_backward(s.compact, grads_[p.layer], s.profile, p.qkv, p.extras.dsink_slope, params(p.layer),
                                tables_, shape_, p.B, p.Tq, p.pos_offset);
  }

  void kernel_terms(AttentionPass<T>& p) const override {
    p.scale = T(1);  // 1/sqrt(D_c) is folded into the packed queries; the prior is not scaled (§3.4)
    // The key form's row constant moves the sink too (needs the sink, set earlier in the order).
    if (p.sink) p.extras.sink_slope = static_cast<GoatState<T>&>(*p.state).sink_slope[p.layer];
  }
  void kernel_gradient_slots(AttentionPass<T>& p) const override {
    if (!p.sink) return;
    T* d = static_cast<GoatState<T>&>(*p.state).dsink_slope;
    std::fill(d, d + p.H, T(0));
    p.extras.dsink_slope = d;
  }
  void describe(AttentionView<T>& v, const AttentionPass<T>& p) const override {
    v.sink_slope = static_cast<GoatState<T>&>(*p.state).sink_slope[p.layer];
    view_params_ = params(p.layer);
    v.goat_shape = &shape_;
    v.goat = &view_params_;
    v.goat_tables = &tables_;
  }

 private:
  kernels::GoatParams<T> params(int l) const {
    const kernels::GoatGrads<T>& g = params_[l];
    return {g.A, g.B, g.W1, g.b1, g.w2, g.b2, g.gain, g.bump, g.rho};
  }
  Config cfg_;
  kernels::GoatShape shape_{};
  std::vector<bool> layers_;
  std::vector<kernels::GoatGrads<T>> params_, grads_;  // per layer (the struct is a bundle of pointers)
  kernels::GoatTables<T> tables_;  // §3.2 constants, for positions < max(seq_len, cache capacity)
  mutable kernels::GoatParams<T> view_params_;  // what describe() shows (valid during the observer's call)
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(goat) {
  MechanismInfo info("goat", 30, "3");  // after the sink (its kernel terms read it)
  set_mechanism_constructors<Goat>(info);
  return info;
}

}  // namespace attnlab
