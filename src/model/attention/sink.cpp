// The learned attention sink (docs/mechanisms.md §1.3, `attn.sink = learned`): one logit s_h per
// query head joins every row's softmax denominator with a zero value vector. The kernel takes it as
// its `sink` argument; GOAT's key form moves it by a row slope (goat.cpp), which is why the sink
// comes first in the hook order.
#include "model/attention/mechanism.h"

namespace attnlab {
namespace {

template <class T>
class Sink final : public AttentionMechanism<T> {
 public:
  explicit Sink(const Config& cfg) : cfg_(cfg) {}
  bool active() const { return cfg_.attn.sink == "learned"; }
  const char* name() const override { return "sink"; }
  bool acts_on(int) const override { return true; }  // every layer
  void register_params(ParamRegistry& reg, int, const std::string& prefix) const override {
    reg.add(prefix + "sink", {cfg_.model.n_head}, Init::Constant, cfg_.attn.sink_init, false);
  }
  void bind(const ParamRegistry& reg, T* params, T* grads) override {
    for (int l = 0; l < cfg_.model.n_layer; ++l) {
      const size_t offset = reg.find("blocks." + std::to_string(l) + ".attn.sink")->offset;
      sink_.push_back(params + offset);
      dsink_.push_back(grads + offset);
    }
  }
  void kernel_terms(AttentionPass<T>& p) const override { p.sink = sink_[p.layer]; }
  void kernel_gradient_slots(AttentionPass<T>& p) const override { p.dsink = dsink_[p.layer]; }

 private:
  Config cfg_;
  std::vector<T*> sink_, dsink_;  // per layer, [H]
};

}  // namespace

ATTNLAB_ATTENTION_MECHANISM(sink) {
  MechanismInfo info("sink", 10, "1.3");  // first: GOAT reads the sink set here
  set_mechanism_constructors<Sink>(info);
  return info;
}

}  // namespace attnlab
