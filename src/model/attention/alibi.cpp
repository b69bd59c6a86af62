// ALiBi (docs/mechanisms.md §1.2, `attn.pos = alibi`; on the non-GOAT layers also with attn.pos =
// goat and attn.goat.other_pos = alibi): the kernel adds −m_h·(t_i − t_j) to every logit
// (AttentionExtras::alibi_slopes); no parameters, no transform.
#include "model/attention/mechanism.h"
#include "model/gpt.h"

namespace attnlab {
namespace {

template <class T>
class Alibi final : public AttentionMechanism<T> {
 public:
  explicit Alibi(const Config& cfg) {
    for (int l = 0; l < cfg.model.n_layer; ++l) layers_.push_back(cfg.attn.pos_at(l) == "alibi");
    for (double m : alibi_slopes(cfg.model.n_head)) slopes_.push_back(T(m));
  }
  bool active() const { return any_layer(layers_); }
  const char* name() const override { return "alibi"; }
  bool acts_on(int layer) const override { return layers_[layer]; }
  void kernel_terms(AttentionPass<T>& p) const override { p.extras.alibi_slopes = slopes_.data(); }

 private:
  std::vector<bool> layers_;
  std::vector<T> slopes_;  // m_h, [H]
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(alibi) {
  MechanismInfo info("alibi", 60, "1.2");
  set_mechanism_constructors<Alibi>(info);
  return info;
}

}  // namespace attnlab
