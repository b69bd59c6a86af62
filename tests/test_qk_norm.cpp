// QK-norm (docs/mechanisms.md §1.8, src/model/attention/qk_norm.cpp): the transform against its
// naive reference, its backward and the gains' gradients by central differences, through the
// whole model with RoPE, ALiBi, XSA, GQA and a sink, and the §1.8 invariants: unit RMS per head at
// unit gains, logits invariant to the scale of W_q and W_k, KV-cached logits equal to uncached
// ones, and the configuration key's rules.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>

#include "check.h"
#include "core/json.h"
#include "core/rng.h"
#include "model/attention/mechanism.h"
#include "model/gpt.h"
#include "model_util.h"

namespace attnlab {
template <class T>
void qk_norm_naive(T* qkv, const T* gain_q, const T* gain_k, size_t rows, int stride, int H, int Hkv, int Dh);
}

using namespace attnlab;

namespace {

Config tiny(const std::string& extra) {
  const std::string text =
      "model.n_layer = 2\nmodel.d_model = 16\nmodel.n_head = 4\nmodel.seq_len = 8\nmodel.vocab_size = 23\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}

// The QK-norm mechanism of `cfg`, bound to a registry holding only its gains (set to `gain_q`,
// `gain_k` on layer 0), with a training-planned state for `rows` rows.
struct QkNormUnderTest {
  std::unique_ptr<AttentionMechanism<double>> mech;
  ParamRegistry reg;
  std::vector<double> params, grads;
  Arena arena;
  std::unique_ptr<MechanismState> state;
  QkNormUnderTest(const Config& cfg, size_t rows) {
    for (auto& m : make_attention_mechanisms<double>(cfg))
      if (std::string(m->name()) == "qk_norm") mech = std::move(m);
    if (!mech) return;
    for (int l = 0; l < cfg.model.n_layer; ++l)
      if (mech->acts_on(l)) mech->register_params(reg, l, "blocks." + std::to_string(l) + ".attn.");
    reg.finalize();
    params.assign(reg.total(), 1.0);
    grads.assign(reg.total(), 0.0);
    mech->bind(reg, params.data(), grads.data());
    state = mech->make_state();
    for (int pass = 0; pass < 2; ++pass) {
      mech->plan(arena, *state, rows, (int)rows, true);
      if (pass == 0) arena.commit();
    }
  }
  double* gain(int layer, const char* which) {
    return params.data() + reg.find("blocks." + std::to_string(layer) + ".attn." + which + "_norm.weight")->offset;
  }
  double* dgain(int layer, const char* which) {
    return grads.data() + reg.find("blocks." + std::to_string(layer) + ".attn." + which + "_norm.weight")->offset;
  }
  AttentionPass<double> pass(double* qkv, const ModelConfig& m, int B, int T) {
    AttentionPass<double> p;
    p.layer = 0; p.B = B; p.Tq = T; p.H = m.n_head; p.Hkv = m.kv_heads; p.Dh = m.head_dim();
    p.qkv = qkv; p.qkv_stride = m.qkv_dim(); p.state = state.get();
    return p;
  }
};

}  // namespace

// The transform equals the naive §1.8 formula on q and k heads, leaves v untouched, and with unit
// gains gives every head an RMS of 1 (up to ε).
TEST(QkNorm, ForwardMatchesTheNaiveReference) {
  const Config cfg = tiny("attn.qk_norm = on\nmodel.kv_heads = 2\n");
  const ModelConfig& m = cfg.model;
  const int B = 2, T = 5, H = m.n_head, Hkv = m.kv_heads, Dh = m.head_dim(), stride = m.qkv_dim();
  QkNormUnderTest t(cfg, B * T);
  ASSERT_TRUE(t.mech) << "qk_norm is not registered";
  std::vector<double> qkv = test::random_vec<double>((size_t)B * T * stride, 3, 2.0), want = qkv;
  EXPECT_TRUE(t.mech->acts_on(0) && t.mech->acts_on(1));
  auto p = t.pass(qkv.data(), m, B, T);
  t.mech->transform_forward(p);  // unit gains first
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < H + Hkv; ++h) {
      double ms = 0;
      for (int d = 0; d < Dh; ++d) ms += qkv[(size_t)n * stride + h * Dh + d] * qkv[(size_t)n * stride + h * Dh + d];
      EXPECT_NEAR(ms / Dh, 1.0, 1e-5) << "row " << n << " head " << h;
    }
  // Random gains against the naive reference.
  Rng r(5);
  for (const char* which : {"q", "k"})
    for (int d = 0; d < Dh; ++d) t.gain(0, which)[d] = 0.5 + r.uniform();
  qkv = want;
  p = t.pass(qkv.data(), m, B, T);
  t.mech->transform_forward(p);
  qk_norm_naive(want.data(), t.gain(0, "q"), t.gain(0, "k"), (size_t)B * T, stride, H, Hkv, Dh);
  EXPECT_LT(test::max_abs_diff(qkv, want), 1e-14);  // v columns compared too: untouched in both
}

// transform_backward against central differences of L = <w, transform(qkv)>, for the inputs and
// both gains (double; the error allowance of check.h's numeric_grad).
TEST(QkNorm, BackwardMatchesFiniteDifferences) {
  const Config cfg = tiny("attn.qk_norm = on\nmodel.kv_heads = 2\n");
  const ModelConfig& m = cfg.model;
  const int B = 2, T = 3, Dh = m.head_dim(), stride = m.qkv_dim();
  QkNormUnderTest t(cfg, B * T);
  ASSERT_TRUE(t.mech);
  Rng r(7);
  for (const char* which : {"q", "k"})
    for (int d = 0; d < Dh; ++d) t.gain(0, which)[d] = 0.5 + r.uniform();
  const std::vector<double> x0 = test::random_vec<double>((size_t)B * T * stride, 11), w = test::random_vec<double>(x0.size(), 12);
  auto loss_at = [&](const std::vector<double>& x) {
    std::vector<double> y = x;
    auto p = t.pass(y.data(), m, B, T);
    t.mech->transform_forward(p);
    return test::dot(y, w);
  };
  // Analytic: forward once (saves x and 1/rms), then backward of dL/dy = w.
  std::vector<double> dx = x0;
  {
    auto p = t.pass(dx.data(), m, B, T);
    t.mech->transform_forward(p);
  }
  dx = w;
  auto p = t.pass(dx.data(), m, B, T);
  t.mech->transform_backward(p);
  std::vector<double> x = x0;
  const test::FdGrad numeric = test::numeric_grad(x, [&] { return loss_at(x); }, 1e-5);
  test::expect_grad_close(dx, numeric, 1e-7, "dL/dqkv");
  for (const char* which : {"q", "k"}) {
    std::vector<double> g(t.gain(0, which), t.gain(0, which) + Dh), analytic(t.dgain(0, which), t.dgain(0, which) + Dh);
    const test::FdGrad ng = test::numeric_grad(g, [&] {
      std::copy(g.begin(), g.end(), t.gain(0, which));
      return loss_at(x0);
    }, 1e-5);
    std::copy(g.begin(), g.end(), t.gain(0, which));
    test::expect_grad_close(analytic, ng, 1e-7, std::string("dL/dg_") + which);
  }
}

// Every parameter of whole models with QK-norm by central differences (double), as test_model does
// for the other mechanisms: QK-norm before RoPE, with ALiBi, XSA (gated), GQA, a sink, and on the
// non-GOAT layer of a partly GOAT model.
TEST(QkNorm, WholeModelGradients) {
  struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  } one_thread;
  for (const char* extra : {"attn.qk_norm = on\n",
                            "attn.qk_norm = on\nattn.pos = alibi\nattn.xsa = gated\nattn.sink = learned\nmodel.kv_heads = 2\n",
                            "attn.qk_norm = on\nattn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.goat.layers = [1]\n"}) {
    const Config cfg = tiny(extra);
    GPT<double> model(cfg);
    model.init_weights(3);
    Rng r(4);
    for (const auto& s : model.registry().specs())
      for (size_t i = 0; i < s.numel; ++i) model.params()[s.offset + i] += 0.1 * r.normal();
    ASSERT_NE(model.registry().find("blocks.0.attn.q_norm.weight"), nullptr) << extra;
    const int B = 2, T = 6;
    model.plan(B, T);
    auto in = test::random_tokens(B * T, cfg.model.vocab_size, 5), tgt = test::random_tokens(B * T, cfg.model.vocab_size, 6);
    const int valid = model.count_valid(tgt.data(), tgt.size());
    model.zero_grad();
    model.train_micro_step(in.data(), tgt.data(), 1.0 / valid);
    Rng pick(17);
    for (const auto& s : model.registry().specs()) {
      const test::FdSample fd = test::fd_sample(model, s, pick, [&] { return model.eval_loss(in.data(), tgt.data()) / valid; });
      test::expect_grad_close(fd.analytic, fd.numeric, 1e-6, (std::string(extra) + " " + s.name).c_str());
    }
  }
}

// §1.8: q and k are normalized per head, so scaling W_q and W_k (and their biases) of a layer by
// c > 0 leaves every logit unchanged (up to the ε inside the norm: c = 3 moves it by ~1e-7 of the
// mean square, far below the bound used here).
TEST(QkNorm, LogitsInvariantToTheScaleOfQueriesAndKeys) {
  const Config cfg = tiny("attn.qk_norm = on\n");
  GPT<double> a(cfg), b(cfg);
  a.init_weights(9);
  b.init_weights(9);
  const ModelConfig& m = cfg.model;
  const int C = m.d_model, qk_cols = (m.n_head + m.kv_heads) * m.head_dim(), cols = m.qkv_dim();
  for (int l = 0; l < m.n_layer; ++l) {  // b = a with the q and k columns (weights, nonzero biases) × 3
    const std::string p = "blocks." + std::to_string(l) + ".attn.qkv.";
    double* w = b.param(p + "weight");
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < qk_cols; ++j) w[(size_t)i * cols + j] *= 3.0;
    for (int j = 0; j < qk_cols; ++j) a.param(p + "bias")[j] = 0.25 * (j % 3), b.param(p + "bias")[j] = 3.0 * 0.25 * (j % 3);
  }
  const int B = 1, T = 8;
  a.plan(B, T);
  b.plan(B, T);
  const auto in = test::random_tokens(B * T, m.vocab_size, 2);
  std::vector<double> la((size_t)B * T * m.vocab_size), lb(la.size());
  a.logits(la.data(), in.data());
  b.logits(lb.data(), in.data());
  EXPECT_LT(test::max_rel_diff(lb, la), 1e-6);
  // ... and it did change something: without QK-norm the same scaling moves the logits.
  const Config off = tiny("");
  GPT<double> c(off), d(off);
  c.init_weights(9);
  d.init_weights(9);
  for (int l = 0; l < m.n_layer; ++l) {
    double* w = d.param("blocks." + std::to_string(l) + ".attn.qkv.weight");
    for (int i = 0; i < C; ++i)
      for (int j = 0; j < qk_cols; ++j) w[(size_t)i * cols + j] *= 3.0;
  }
  c.plan(B, T);
  d.plan(B, T);
  c.logits(la.data(), in.data());
  d.logits(lb.data(), in.data());
  EXPECT_GT(test::max_rel_diff(lb, la), 1e-4);
}

// Decoding with a KV cache: keys are normalized per token before they are cached.
TEST(QkNorm, CachedLogitsEqualUncached) {
  for (const char* extra : {"attn.qk_norm = on\n", "attn.qk_norm = on\nattn.xsa = on\nmodel.kv_heads = 2\nattn.pos = alibi\n"}) {
    GPT<float> m(tiny(extra));
    m.init_weights(7);
    Rng r(8);
    for (const auto& s : m.registry().specs())
      for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] += float(0.1 * r.normal());
    EXPECT_LT(test::cached_vs_uncached_rel_diff(m), 1e-5) << extra;
  }
}

// The key: off by default and then absent from the resolved configuration (stored configurations
// of models without it keep their exact form); shown and round-tripped when on; refused where it
// would act on no layer, naming the key.
TEST(QkNorm, ConfigurationKey) {
  const Config off = tiny("");
  EXPECT_EQ(mechanism_option(off, "attn.qk_norm"), "off");
  EXPECT_FALSE(off.to_json().contains("attn.qk_norm"));
  EXPECT_EQ(GPT<float>::layout(off).find("blocks.0.attn.q_norm.weight"), nullptr);
  const Config on = tiny("attn.qk_norm = on\n");
  EXPECT_EQ(on.to_json().at("attn.qk_norm"), "on");
  EXPECT_EQ(mechanism_option(Config::from_json(on.to_json(), "test"), "attn.qk_norm"), "on");
  const ParamRegistry reg = GPT<float>::layout(on);
  ASSERT_NE(reg.find("blocks.1.attn.k_norm.weight"), nullptr);
  EXPECT_FALSE(reg.find("blocks.1.attn.k_norm.weight")->decay);
  try {
    tiny("attn.qk_norm = maybe\n");
    ADD_FAILURE() << "attn.qk_norm = maybe was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.qk_norm"), std::string::npos) << e.what();
  }
  try {
    tiny("attn.qk_norm = on\nattn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\n");
    ADD_FAILURE() << "QK-norm on an all-GOAT model was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.qk_norm = on has no effect"), std::string::npos) << e.what();
  }
}
