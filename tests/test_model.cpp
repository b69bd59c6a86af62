// The whole GPT (docs/mechanisms.md §1): finite-difference gradients of every parameter in double,
// KV-cached logits equal uncached logits, causality, and the sink invariant (§1.5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <omp.h>

#include "check.h"
#include "model_util.h"
#include "core/rng.h"
#include "model/gpt.h"

using namespace attnlab;

namespace {
Config tiny(const std::string& extra) {
  std::string text = "model.n_layer = 2\nmodel.d_model = 16\nmodel.n_head = 4\nmodel.seq_len = 8\nmodel.vocab_size = 23\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}

using test::random_tokens;

// Perturb the init away from the symmetric point (zero biases, unit gains) so every gradient is exercised.
template <class T>
void randomize(GPT<T>& m, uint64_t seed) {
  m.init_weights(seed);
  Rng r(seed + 1);
  for (const auto& s : m.registry().specs())
    for (size_t i = 0; i < s.numel; ++i) m.params()[s.offset + i] += T(0.1 * r.normal());
}

void check_gradients(const std::string& extra) {
  // Thousands of tiny forward passes: one thread, so that CTest running two tests at once on two
  // cores does not turn every OpenMP barrier into a wait for a time slice (0.3 s became 30 s).
  struct OneThread {
    int saved = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(saved); }
  } one_thread;
  const Config cfg = tiny(extra);
  GPT<double> m(cfg);
  randomize(m, 3);
  const int B = 2, T = 6;
  m.plan(B, T);
  auto in = random_tokens(B * T, cfg.model.vocab_size, 5), tgt = random_tokens(B * T, cfg.model.vocab_size, 6);
  tgt[3] = -1;  // an ignored target
  const int valid = m.count_valid(tgt.data(), tgt.size());
  m.zero_grad();
  m.train_micro_step(in.data(), tgt.data(), 1.0 / valid);
  // Every parameter tensor, at up to 24 entries each (all of a small tensor; a seeded sample of a
  // large one): central differences in double against the analytic gradient.
  Rng pick(17);
  for (const auto& s : m.registry().specs()) {
    const test::FdSample fd = test::fd_sample(m, s, pick, [&] { return m.eval_loss(in.data(), tgt.data()) / valid; });
    const auto& analytic = fd.analytic;
    const auto& numeric = fd.numeric;
    test::expect_grad_close(analytic, numeric, 1e-6, (extra + " " + s.name).c_str());
  }
}
}  // namespace

TEST(ModelGrad, LayerNormGeluLearned) { check_gradients("attn.pos = learned\n"); }
TEST(ModelGrad, RmsNormSwigluRopeGqaNoBias) {
  check_gradients("model.norm = rmsnorm\nmodel.mlp = swiglu\nmodel.kv_heads = 2\nmodel.bias = false\n");
}
TEST(ModelGrad, RopeSinkNoPE) {
  check_gradients("attn.sink = learned\nattn.sink.init = 0.3\n");
  check_gradients("attn.pos = none\nmodel.kv_heads = 1\n");
}

TEST(ModelGrad, AlibiGqaSink) { check_gradients("attn.pos = alibi\nmodel.kv_heads = 2\nattn.sink = learned\n"); }

// XSA (§2) and GOAT (§3) through the whole model: every new parameter (gates, A, B, the sink MLP,
// gain, bump, ρ) and every projection, with sinks, GQA and per-layer selections. Tiny heads:
// d = 16 with 2 heads gives D_h = 8, so GOAT uses R = 2 (5 prior lanes, D_c = 3).
TEST(ModelGrad, XsaOnRopeAndGatedAlibiSinkGqa) {
  check_gradients("attn.xsa = on\n");
  check_gradients("attn.xsa = gated\nattn.pos = alibi\nattn.sink = learned\nmodel.kv_heads = 2\n");
}
TEST(ModelGrad, GoatSeededSinkGqa) {
  check_gradients("attn.pos = goat\nmodel.n_head = 2\nmodel.kv_heads = 1\nattn.goat.pos_rank = 2\nattn.goat.abs_rank = 2\n"
                  "attn.sink = learned\n");
}
TEST(ModelGrad, GoatOnOneLayerWithAlibiElsewhereAndXsa) {
  check_gradients("attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.goat.layers = [1]\n"
                  "attn.goat.other_pos = alibi\nattn.xsa = gated\nattn.xsa.layers = [1]\n");
}
TEST(ModelGrad, GoatNoKeyLaneUniformRmsNorm) {
  check_gradients("attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 3\nattn.goat.key_bias = false\n"
                  "attn.goat.init = uniform\nmodel.norm = rmsnorm\nattn.xsa = on\n");
}

TEST(Model, GatedXsaWithZeroGatesEqualsOffBitForBit) {
  // §2.4: a = 0 gives γ = 0 — logits, loss and every shared gradient equal attn.xsa = off exactly,
  // while the gates themselves get a non-zero gradient.
  const Config off_cfg = tiny("attn.sink = learned\n"), gated_cfg = tiny("attn.sink = learned\nattn.xsa = gated\n");
  GPT<float> off(off_cfg), gated(gated_cfg);
  randomize(off, 21);
  for (const auto& s : off.registry().specs())
    std::copy(off.params() + s.offset, off.params() + s.offset + s.numel, gated.param(s.name));
  for (int l = 0; l < 2; ++l) std::fill_n(gated.param("blocks." + std::to_string(l) + ".attn.xsa_gate"), 4, 0.f);
  const int B = 2, T = 8;
  off.plan(B, T);
  gated.plan(B, T);
  auto in = random_tokens(B * T, 23, 1), tgt = random_tokens(B * T, 23, 2);
  off.zero_grad();
  gated.zero_grad();
  const double l0 = off.train_micro_step(in.data(), tgt.data(), 1.f / (B * T));
  const double l1 = gated.train_micro_step(in.data(), tgt.data(), 1.f / (B * T));
  EXPECT_EQ(l0, l1);
  for (const auto& s : off.registry().specs())
    for (size_t i = 0; i < s.numel; ++i) ASSERT_EQ(off.grads()[s.offset + i], gated.grad(s.name)[i]) << s.name << "[" << i << "]";
  double gate_grad = 0;
  for (int h = 0; h < 4; ++h) gate_grad += std::abs(gated.grad("blocks.0.attn.xsa_gate")[h]);
  EXPECT_GT(gate_grad, 1e-6);
}

TEST(Model, GoatSeededInitStartsAsAlibi) {
  // §3.6 seeded: ρ = softplus⁻¹(ALiBi slopes of H_kv heads) (slope 1/2 → −0.4328), A ~ N(0, 0.01²),
  // B = 0, g = 1, b = 0; uniform: A = B = 0, w2 = 0, ρ = −30.
  const Config cfg = tiny("attn.pos = goat\nmodel.n_head = 2\nmodel.kv_heads = 1\nattn.goat.pos_rank = 2\n");
  GPT<double> m(cfg);
  m.init_weights(1);
  EXPECT_NEAR(kernels::goat_softplus_inverse(0.5), -0.4328, 1e-4);  // the example of docs/mechanisms.md §3.6
  const auto slopes = alibi_slopes(1);  // one KV head: slope 2^-8
  for (int l = 0; l < 2; ++l)
    EXPECT_NEAR(std::log1p(std::exp(m.param("blocks." + std::to_string(l) + ".attn.goat.rho")[0])), slopes[0], 1e-15);
  EXPECT_EQ(m.param("blocks.0.attn.goat.B")[0], 0.0);
  EXPECT_EQ(m.param("blocks.0.attn.goat.gain")[0], 1.0);
  EXPECT_NE(m.param("blocks.0.attn.goat.A")[0], 0.0);
  const Config ucfg = tiny("attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.goat.init = uniform\n");
  GPT<double> u(ucfg);
  u.init_weights(1);
  EXPECT_EQ(u.param("blocks.0.attn.goat.A")[0], 0.0);
  EXPECT_EQ(u.param("blocks.0.attn.goat.w2")[0], 0.0);
  EXPECT_EQ(u.param("blocks.0.attn.goat.rho")[1], -30.0);
  // no dead projection rows: the qkv weight has H·D_c + H_kv·D_c + H_kv·D_h columns (§3.1)
  EXPECT_EQ(m.registry().find("blocks.0.attn.qkv.weight")->shape[1], 2 * 3 + 1 * 3 + 1 * 8);
}

TEST(Model, AlibiSlopes) {
  // §1.2 examples: H = 4 gives 1/4, 1/16, 1/64, 1/256; H = 12 gives 2^-1..2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
  EXPECT_EQ(alibi_slopes(4), (std::vector<double>{0.25, 1.0 / 16, 1.0 / 64, 1.0 / 256}));
  const auto m12 = alibi_slopes(12);
  ASSERT_EQ(m12.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(m12[h], std::pow(2.0, -(h + 1)));
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(m12[8 + i], std::pow(2.0, -0.5 - i));
}

TEST(Model, KeyBiasGradientIsStructurallyZeroWithoutRopeOrSink) {
  const Config cfg = tiny("attn.pos = none\n");
  GPT<double> m(cfg);
  randomize(m, 4);
  m.plan(2, 6);
  auto in = random_tokens(12, 23, 1), tgt = random_tokens(12, 23, 2);
  m.zero_grad();
  m.train_micro_step(in.data(), tgt.data(), 1.0 / 12);
  const int H = 4, Dh = 4;
  const double* db = m.grad("blocks.0.attn.qkv.bias");
  for (int e = H * Dh; e < 2 * H * Dh; ++e) EXPECT_NEAR(db[e], 0.0, 1e-14) << "k bias entry " << e;
}

TEST(Model, CachedLogitsEqualUncached) {
  for (const char* extra : {"attn.pos = rope\n", "attn.pos = learned\nattn.sink = learned\n", "attn.pos = none\nmodel.kv_heads = 2\n",
                            "attn.pos = alibi\nmodel.n_head = 2\n",
                            // XSA needs each token's own value from the cache; GOAT needs absolute positions (§3.7)
                            "attn.xsa = gated\nattn.sink = learned\nmodel.kv_heads = 2\n",
                            "attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.sink = learned\nattn.xsa = on\n",
                            "attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.goat.layers = [0]\n"}) {
    GPT<float> m(tiny(extra));
    randomize(m, 7);
    EXPECT_LT(test::cached_vs_uncached_rel_diff(m), 1e-5) << extra;
    std::vector<float> logits(2 * 23);
    const std::vector<int32_t> one_more = {1, 2};
    EXPECT_THROW(m.forward_cached(logits.data(), one_more.data(), 1, true), Error);  // cache full
  }
}

// Inference with bf16 weights (GPT::round_weights_to_bf16): the matrices are rounded in place, so
// the uncached pass (GEMMs on the rounded floats) and the cached one (the chunks of 3 and 4 tokens
// through the same GEMMs, the 1-token chunk through the few-row kernels reading the bf16 copies,
// B = 2 rows) compute one function: the tolerance of CachedLogitsEqualUncached. That the rounding
// happened: every rounded weight is a bf16 value, the logits moved by more than that tolerance,
// and decode_bytes counts 2 bytes for each rounded weight.
TEST(Model, Bf16WeightsDecodeTheRoundedModel) {
  for (const char* extra : {"attn.pos = rope\n", "attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.sink = learned\n",
                            "model.mlp = swiglu\nresidual.kind = dar\nmodel.kv_heads = 2\n"}) {
    GPT<float> plain(tiny(extra)), m(tiny(extra));
    randomize(plain, 7);
    randomize(m, 7);
    const double fp32_bytes = m.decode_bytes(0).weights;
    m.round_weights_to_bf16();
    EXPECT_TRUE(m.bf16_weights());
    const float* qkv = m.param("blocks.0.attn.qkv.weight");
    const size_t qkv_n = m.registry().find("blocks.0.attn.qkv.weight")->numel;
    for (size_t i = 0; i < qkv_n; ++i) ASSERT_EQ(to_float(to_bf16(qkv[i])), qkv[i]) << extra << " entry " << i;
    const ModelConfig& mc = m.config().model;
    size_t rounded = (size_t)mc.vocab_size * mc.d_model;  // the tied embedding
    for (int l = 0; l < mc.n_layer; ++l)
      for (const char* name : {"attn.qkv", "attn.proj", mc.mlp == "gelu" ? "mlp.fc" : "mlp.gate_up", "mlp.proj"}) {
        const ParamSpec* spec = m.registry().find("blocks." + std::to_string(l) + "." + name + ".weight");
        ASSERT_NE(spec, nullptr) << name;
        rounded += spec->numel;
      }
    EXPECT_DOUBLE_EQ(m.decode_bytes(0).weights, fp32_bytes - 2.0 * rounded) << extra;
    EXPECT_LT(test::cached_vs_uncached_rel_diff(m), 1e-5) << extra;
    plain.plan(2, 8);  // m is planned for (2, 8) by cached_vs_uncached_rel_diff
    const auto in = random_tokens(16, mc.vocab_size, 9);
    std::vector<float> a(16 * mc.vocab_size), b(a.size());
    plain.logits(a.data(), in.data());
    m.logits(b.data(), in.data());
    EXPECT_GT(test::max_rel_diff(b, a), 1e-4) << extra;
  }
}

TEST(Model, Causality) {
  const Config cfg = tiny("");
  GPT<double> m(cfg);
  randomize(m, 11);
  const int T = 8, V = cfg.model.vocab_size;
  m.plan(1, T);
  auto in = random_tokens(T, V, 12);
  std::vector<double> a((size_t)T * V), b((size_t)T * V);
  m.logits(a.data(), in.data());
  const int t_changed = 5;
  in[t_changed] = (in[t_changed] + 1) % V;
  m.logits(b.data(), in.data());
  for (int t = 0; t < T; ++t) {
    double d = 0;
    for (int v = 0; v < V; ++v) d = std::max(d, std::abs(a[(size_t)t * V + v] - b[(size_t)t * V + v]));
    if (t < t_changed) EXPECT_EQ(d, 0.0) << "position " << t;
    else EXPECT_GT(d, 0.0) << "position " << t;
  }
}

TEST(Model, SinkAtMinusInfinityEqualsNoSink) {
  const Config with = tiny("attn.sink = learned\nattn.sink.init = -1e4\n"), without = tiny("");
  GPT<double> a(with), b(without);
  a.init_weights(1);
  b.init_weights(1);  // same RNG stream: sinks are constants, drawn nothing
  a.plan(1, 8);
  b.plan(1, 8);
  auto in = random_tokens(8, 23, 2);
  std::vector<double> la(8 * 23), lb(8 * 23);
  a.logits(la.data(), in.data());
  b.logits(lb.data(), in.data());
  EXPECT_LT(test::max_abs_diff(la, lb), 1e-12);
}

TEST(Model, InitStatistics) {
  const Config cfg = resolve_config(parse_config_text("model.n_layer = 6\nmodel.d_model = 128\nmodel.n_head = 4\n", "t"));
  GPT<float> m(cfg);
  m.init_weights(1);
  auto stddev = [&](const char* name) {
    const ParamSpec* s = m.registry().find(name);
    double sq = 0;
    for (size_t i = 0; i < s->numel; ++i) sq += double(m.params()[s->offset + i]) * m.params()[s->offset + i];
    return std::sqrt(sq / s->numel);
  };
  EXPECT_NEAR(stddev("wte"), 0.02, 0.001);                                  // §1.4
  EXPECT_NEAR(stddev("blocks.0.attn.proj.weight"), 0.02 / std::sqrt(12.0), 3e-4);
  EXPECT_EQ(m.param("blocks.0.ln1.weight")[5], 1.0f);
  EXPECT_EQ(m.param("blocks.0.ln1.bias")[5], 0.0f);
  // weight decay only on matrices (§0)
  for (const auto& s : m.registry().specs()) EXPECT_EQ(s.decay, s.shape.size() == 2) << s.name;
}

// train.precision = bf16 against fp32 on the same weights and tokens. Each product's rounding is
// bounded and tested where it happens (test_gemm, test_linear: a float sum of exact products of
// the rounded operands); this checks the wiring around them — every linear layer and the LM head
// multiply the right operands, the bf16 weight copies follow the float weights, nothing else
// changes. The yardstick is the problem's own sensitivity to rounding: a third model, in fp32, runs
// on the weights rounded to bf16 (each moved by at most u = 2⁻⁸ relative). The bf16 step rounds
// those same weights and, besides, the layers' inputs and output gradients (as much again per
// product), so its loss and each gradient tensor may differ from fp32 by a few times what the
// rounded weights alone cause, and at least by a few u (mHC's mixing gradients are sums that
// nearly cancel: rounding the weights alone moves them by O(1) relative, which the yardstick
// follows). A wrong or stale operand moves everything by O(1) where the yardstick is ~u.
TEST(Model, Bf16StepFollowsTheFloatStep) {
  const double u = kBf16Unit;  // 2⁻⁸
  for (const char* extra : {"attn.pos = rope\n", "model.mlp = swiglu\nmodel.norm = rmsnorm\nmodel.bias = false\n",
                            "attn.pos = goat\nmodel.n_head = 2\nattn.goat.pos_rank = 2\nattn.sink = learned\nattn.xsa = on\n",
                            "residual.kind = mhc\n", "residual.kind = dar\nresidual.block_size = 1\n"}) {
    const Config f32 = tiny(extra), b16 = tiny(std::string(extra) + "train.precision = bf16\n");
    GPT<float> mf(f32), mr(f32), mb(b16);
    randomize(mf, 3);
    const size_t P = mf.registry().total();
    std::copy(mf.params(), mf.params() + P, mb.params());
    for (size_t i = 0; i < P; ++i) mr.params()[i] = to_float(to_bf16(mf.params()[i]));
    const int B = 2, T = 8, V = f32.model.vocab_size;
    const auto in = random_tokens(B * T, V, 5), tgt = random_tokens(B * T, V, 6);
    double loss[3];
    GPT<float>* models[3] = {&mf, &mr, &mb};
    for (int k = 0; k < 3; ++k) {
      models[k]->plan(B, T);
      models[k]->zero_grad();
      loss[k] = models[k]->train_micro_step(in.data(), tgt.data(), 1.0f / (B * T));
    }
    const double lf = loss[0], lr = loss[1], lb = loss[2];
    EXPECT_LE(std::abs(lb - lf), std::max(4 * u * std::abs(lf), 4 * std::abs(lr - lf))) << extra;
    EXPECT_NE(lb, lf) << extra << ": the bf16 step made no rounding at all";
    for (const auto& s : mf.registry().specs()) {
      double db = 0, dr = 0, norm = 0;
      for (size_t i = 0; i < s.numel; ++i) {
        const double gf = mf.grads()[s.offset + i], gr = mr.grads()[s.offset + i], gb = mb.grads()[s.offset + i];
        db += (gb - gf) * (gb - gf);
        dr += (gr - gf) * (gr - gf);
        norm += gf * gf;
      }
      if (norm == 0) {
        EXPECT_EQ(db, 0) << extra << s.name;
        continue;
      }
      EXPECT_LE(std::sqrt(db / norm), std::max(8 * u, 4 * std::sqrt(dr / norm))) << extra << s.name;
    }
    // The copies follow the weights: move every weight, and the bf16 loss moves with the fp32 one.
    Rng r(9);
    for (size_t i = 0; i < P; ++i) mb.params()[i] = mf.params()[i] += float(0.3 * r.normal());
    const double ef = mf.eval_loss(in.data(), tgt.data()), eb = mb.eval_loss(in.data(), tgt.data());
    EXPECT_GT(std::abs(ef - lf), 8 * 4 * u * std::abs(ef)) << extra << ": the perturbation must matter";
    EXPECT_LE(std::abs(eb - ef), 4 * u * std::abs(ef)) << extra;
    std::string label = extra;
    std::replace(label.begin(), label.end(), '\n', ' ');
    std::printf("%-44.44s loss fp32 %.4f; weights rounded %+.1e, bf16 %+.1e; after the move: bf16 %+.1e\n", label.c_str(),
                lf, lr - lf, lb - lf, eb - ef);
    // logits() computes as the step does
    std::vector<float> logits((size_t)B * T * V);
    mb.logits(logits.data(), in.data());
    double from_logits = 0;
    for (int i = 0; i < B * T; ++i)
      from_logits += kernels::softmax_ce_row_forward(logits.data() + (size_t)i * V, V, tgt[i]);
    EXPECT_NEAR(from_logits, eb, 1e-5 * std::abs(eb)) << extra;
  }
}
