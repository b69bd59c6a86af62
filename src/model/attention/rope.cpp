// RoPE (docs/mechanisms.md §1.2, `attn.pos = rope`; on the non-GOAT layers also with attn.pos = goat
// and attn.goat.other_pos = rope): a transform of q and k (never v), in place on the packed rows,
// by the angle of each token's absolute position. The kernel is kernels/rope.h.
#include "kernels/rope.h"
#include "model/attention/mechanism.h"

namespace attnlab {
namespace {

template <class T>
class Rope final : public AttentionMechanism<T> {
 public:
  explicit Rope(const Config& cfg) : cfg_(cfg) {
    for (int l = 0; l < cfg.model.n_layer; ++l) layers_.push_back(cfg.attn.pos_at(l) == "rope");
  }
  bool active() const { return any_layer(layers_); }
  const char* name() const override { return "rope"; }
  bool acts_on(int layer) const override { return layers_[layer]; }
  void ensure_positions(int n) override {
    if (n > table_.max_pos) table_ = kernels::make_rope_table<T>(n, cfg_.model.head_dim(), cfg_.attn.rope_base);
  }
  // q and k heads are the first H + Hkv heads of a packed row.
  void transform_forward(AttentionPass<T>& p) const override {
    kernels::rope_forward(p.qkv, table_, p.B, p.Tq, p.H + p.Hkv, p.Dh, p.qkv_stride, p.pos_offset);
  }
  void transform_backward(AttentionPass<T>& p) const override {
    kernels::rope_backward(p.qkv, table_, p.B, p.Tq, p.H + p.Hkv, p.Dh, p.qkv_stride, p.pos_offset);
  }

 private:
  Config cfg_;
  std::vector<bool> layers_;
  kernels::RopeTable<T> table_;
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(rope) {
  MechanismInfo info("rope", 50, "1.2");  // after QK-norm (which normalizes before rotating)
  set_mechanism_constructors<Rope>(info);
  return info;
}

}  // namespace attnlab
