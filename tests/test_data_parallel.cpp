// Data-parallel training's contract with the model (train/data_parallel.h): a bucket's sum starts
// when the backward reports the layer that completes it done, so GPT::gradient_final_layer must be
// right for every tensor of every model — a gradient written after its layer was reported would
// be left out of the sum on every rank. The end-to-end runs under mpirun are tests/cli/mpi_train.sh.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.h"
#include "model_util.h"

namespace attnlab {
namespace {

// Records the reports, and the gradient of every tensor its layer completes at that moment.
class Recorder final : public BackwardListener {
 public:
  explicit Recorder(const GPT<float>& m) : m_(m), snapshots_(m.registry().specs().size()) {}
  void layer_done(int l) override {
    layers.push_back(l);
    const auto& specs = m_.registry().specs();
    for (size_t i = 0; i < specs.size(); ++i)
      if (GPT<float>::gradient_final_layer(specs[i]) == l)
        snapshots_[i].assign(m_.grads() + specs[i].offset, m_.grads() + specs[i].offset + specs[i].numel);
  }
  void between_sublayers() override { ++between; }
  std::vector<int> layers;
  int between = 0;
  const std::vector<float>& snapshot(size_t i) const { return snapshots_[i]; }

 private:
  const GPT<float>& m_;
  std::vector<std::vector<float>> snapshots_;
};

TEST(DataParallel, EachLayersGradientsAreFinalWhenItsBackwardIsReported) {
  const std::string model = "model.n_layer = 3\nmodel.d_model = 32\nmodel.n_head = 2\nmodel.seq_len = 16\nmodel.vocab_size = 40\n";
  for (const std::string extra : {"", "attn.xsa = \"gated\"\nattn.pos = \"goat\"\nresidual.kind = \"dar\"\n",
                                  "attn.pos = \"alibi\"\nresidual.kind = \"mhc\"\n", "residual.kind = \"hyper\"\nattn.sink = \"learned\"\n",
                                  "residual.kind = \"attnres\"\nmodel.mlp = \"swiglu\"\n"}) {
    SCOPED_TRACE(extra);
    const Config cfg = resolve_config(parse_config_text(model + extra, "test"));
    GPT<float> m(cfg);
    m.init_weights(5);
    // Parameters away from their (often zero) init, so that every gradient is non-trivial.
    Rng r(3);
    for (size_t i = 0; i < m.registry().total(); ++i) m.params()[i] += 0.05f * float(r.uniform() - 0.5);
    m.plan(2, 16);
    const auto in = test::random_tokens(32, 40, 1), tgt = test::random_tokens(32, 40, 2);
    Recorder rec(m);
    m.zero_grad();
    m.set_backward_listener(&rec);
    m.train_micro_step(in.data(), tgt.data(), 1.0f / 32);
    m.set_backward_listener(nullptr);
    EXPECT_EQ(rec.layers, (std::vector<int>{2, 1, 0}));
    EXPECT_EQ(rec.between, 3);
    int per_layer = 0;
    const auto& specs = m.registry().specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (GPT<float>::gradient_final_layer(specs[i]) < 0) continue;
      ++per_layer;
      const std::vector<float> final(m.grads() + specs[i].offset, m.grads() + specs[i].offset + specs[i].numel);
      EXPECT_EQ(rec.snapshot(i), final) << specs[i].name << " changed after its layer's backward was reported";
    }
    EXPECT_GT(per_layer, 3 * 4);  // the blocks' norms and projections at least
  }
}

TEST(DataParallel, OnlyBlockTensorsHaveALayer) {
  ParamSpec s;
  for (const auto& [name, layer] : std::vector<std::pair<std::string, int>>{
           {"blocks.0.attn.qkv.weight", 0}, {"blocks.12.mlp.fc.bias", 12}, {"blocks.3.attn.goat.A", 3}, {"wte", -1},
           {"ln_f.weight", -1}, {"residual.4.w_beta", -1}, {"blocks.x.y", -1}, {"blocks.7", -1}}) {
    s.name = name;
    EXPECT_EQ(GPT<float>::gradient_final_layer(s), layer) << name;
  }
}

}  // namespace
}  // namespace attnlab
