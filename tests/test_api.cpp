// The public API (include/attnlab/): configurations built in C++ equal the same text, errors name
// the key, forward shapes, save/load round trip, deterministic generation, training through a
// DataSource with callbacks, FTZ/DAZ scoped to the calls, and gemm() on two threads at once.
#include <gtest/gtest.h>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "attnlab/attnlab.h"
#include "core/denormals.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "train/trainer.h"
#include "train_util.h"

namespace api = attnlab::api;
namespace fs = std::filesystem;

namespace {

// A small model and run: 2 layers, d 32, V 50, T 16, batches of 4, no validation unless asked.
api::Config small_config(const fs::path& out_dir) {
  return api::Config::preset("tiny")
      .set("model.d_model", 32)
      .set("model.seq_len", 16)
      .set("model.vocab_size", 50)
      .set("train.steps", 30)
      .set("train.warmup", 3)
      .set("train.lr", 3e-3)
      .set("train.eval_every", 0)
      .set("train.out_dir", "\"" + out_dir.string() + "\"");
}

// A repeating pattern over the vocabulary a model learns within a few dozen steps.
std::vector<int32_t> pattern_tokens(size_t n, int V) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 7) % V);
  return t;
}

}  // namespace

TEST(Api, ConfigBuiltInCodeEqualsText) {
  const api::Config built = api::Config::preset("tiny").set("model.n_layer", 3).set("attn.xsa", "on").set("train.lr", 2e-3);
  const api::Config text = api::Config::from_text(std::string(
      "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 32\nmodel.vocab_size = 512\n"
      "train.batch_size = 4\ntrain.steps = 20\ntrain.warmup = 2\ntrain.lr = 1e-3\ntrain.eval_every = 10\n"
      "train.eval_batches = 2\ntrain.log_every = 5\n[model]\nn_layer = 3\n[attn]\nxsa = \"on\"\n[train]\nlr = 0.002\n"));
  EXPECT_TRUE(built == text);
  EXPECT_EQ(built.get("model.n_layer"), "3");
  EXPECT_EQ(built.get("attn.xsa"), "on");
  EXPECT_EQ(built.to_json_string(), text.to_json_string());
  EXPECT_NE(built.dump().find("model.n_layer = 3"), std::string::npos) << built.dump();
  EXPECT_FALSE(built == api::Config::preset("tiny"));
  // Every integer type sets exactly (a uint64_t seed above 2^53 as well).
  const uint64_t seed = (uint64_t(1) << 60) + 1;
  EXPECT_EQ(api::Config::preset("tiny").set("train.seed", seed).get("train.seed"), std::to_string(seed));
  EXPECT_EQ(api::Config::preset("tiny").set("model.n_layer", 3u).get("model.n_layer"), "3");
}

TEST(Api, InvalidKeyThrowsErrorNamingTheKey) {
  const api::Config bad = api::Config::preset("tiny").set("model.n_layerz", 2);
  try {
    bad.resolve();
    FAIL() << "an unknown key resolved";
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_layerz"), std::string::npos) << e.what();
  }
  EXPECT_THROW(api::Config::preset("huge"), attnlab::Error);
  EXPECT_THROW((void)api::Config::preset("tiny").get("no.such.key"), attnlab::Error);
  EXPECT_THROW(api::Config::from_file("/nonexistent/attnlab.toml"), attnlab::Error);
}

TEST(Api, ForwardShapesAndLoss) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "forward");
  api::Model model = api::Model::create(small_config(dir), 1);
  EXPECT_GT(model.num_params(), 0u);
  EXPECT_EQ(model.vocab_size(), 50);
  const std::vector<int32_t> tokens = pattern_tokens(2 * 8, 50);
  const std::vector<float> logits = model.forward(tokens, 2, 8);
  EXPECT_EQ(logits.size(), 2u * 8 * 50);
  // A different shape re-plans; the first row's logits are the same computation.
  const std::vector<float> one = model.forward(std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), 1, 8);
  ASSERT_EQ(one.size(), 8u * 50);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_NEAR(one[i], logits[i], 1e-5f) << i;
  // At init the loss is near log V.
  std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1), targets(tokens.begin() + 1, tokens.end());
  inputs.resize(15), targets.resize(15);
  const double loss = model.loss(inputs, targets, 3, 5);
  EXPECT_NEAR(loss, std::log(50.0), 0.5);
  EXPECT_THROW(model.forward(tokens, 3, 8), attnlab::Error);  // 16 ids are not 3·8
  EXPECT_THROW(model.forward(std::vector<int32_t>(8, 50), 1, 8), attnlab::Error);  // outside the vocabulary
  fs::remove_all(dir);
}

TEST(Api, SaveLoadRoundTripGivesIdenticalLogits) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "roundtrip");
  api::Model model = api::Model::create(small_config(dir).set("attn.xsa", "on"), 7);
  const std::string path = (dir / "model.safetensors").string();
  model.save(path);
  api::Model again = api::Model::load(path);
  EXPECT_TRUE(again.config() == model.config());
  const std::vector<int32_t> tokens = pattern_tokens(16, 50);
  EXPECT_EQ(model.forward(tokens, 1, 16), again.forward(tokens, 1, 16));
  EXPECT_THROW(api::Model::load((dir / "missing.safetensors").string()), attnlab::Error);
  fs::remove_all(dir);
}

TEST(Api, GenerateIsDeterministicForASeed) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "generate");
  api::Model model = api::Model::create(small_config(dir), 3);
  api::SamplingParams p = api::default_sampling_params();
  p.temperature = 0.9;
  p.top_k = 10;
  p.seed = 42;
  const std::vector<int32_t> prompt{1, 8, 15};
  const auto a = model.generate(prompt, 12, p);
  const auto b = model.generate(prompt, 12, p);
  ASSERT_EQ(a.size(), prompt.size() + 12);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), a.begin()));
  for (int32_t id : a) EXPECT_TRUE(id >= 0 && id < 50);
  p.temperature = 0;  // greedy: the argmax of the logits forward() gives
  const auto g = model.generate(prompt, 1, p);
  const auto logits = model.forward(prompt, 1, 3);
  const int argmax = int(std::max_element(logits.end() - 50, logits.end()) - (logits.end() - 50));
  EXPECT_EQ(g.back(), argmax);
  EXPECT_THROW(model.generate({}, 3, p), attnlab::Error);
  fs::remove_all(dir);
}

TEST(Api, TrainingFromMemoryLowersTheLossAndCallsBackOncePerStep) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "train");
  const api::Config cfg = small_config(dir).set("train.steps", 100).set("train.eval_every", 50).set("train.eval_batches", 2);
  auto source = api::tokens_data_source(pattern_tokens(4000, 50));
  auto validation = api::tokens_data_source(pattern_tokens(500, 50));
  api::TrainParams params = api::default_train_params();
  params.validation = validation.get();
  std::vector<int64_t> steps, evals;
  std::vector<double> losses;
  params.on_step = [&](int64_t step, double loss, double tokens_per_s) {
    steps.push_back(step);
    losses.push_back(loss);
    EXPECT_GT(tokens_per_s, 0);
  };
  params.on_eval = [&](int64_t step, double) { evals.push_back(step); };
  const api::TrainResult r = api::train(cfg, *source, params);
  ASSERT_EQ(steps.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(steps[i], i + 1);
  EXPECT_EQ(evals, (std::vector<int64_t>{50, 100}));
  EXPECT_EQ(r.steps, 100);
  EXPECT_LT(losses.back(), losses.front() * 0.5) << "first " << losses.front() << ", last " << losses.back();
  EXPECT_LT(r.val_loss, std::log(50.0) * 0.5);
  // The checkpoint it wrote loads and scores the pattern as well as training saw.
  api::Model trained = api::Model::load(r.checkpoint);
  const auto t = pattern_tokens(17, 50);
  EXPECT_LT(trained.loss({t.begin(), t.end() - 1}, {t.begin() + 1, t.end()}, 1, 16), std::log(50.0) * 0.5);
  fs::remove_all(dir);
}

// Resuming a run fed by a DataSource: the source is brought to where it was (DataSource::skip),
// and the resumed run's losses equal the uninterrupted run's, bit for bit.
TEST(Api, ResumeWithADataSourceIsExact) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "resume");
  auto losses_of = [&](const std::string& name, bool interrupted) {
    const api::Config cfg = small_config(dir / name).set("train.steps", 12).set("train.ckpt_every", 4);
    std::vector<double> losses;
    api::TrainParams p = api::default_train_params();
    p.on_step = [&](int64_t, double loss, double) { losses.push_back(loss); };
    if (interrupted) {
      auto first = api::tokens_data_source(pattern_tokens(3000, 50));
      p.stop_after = 5;
      const api::TrainResult r = api::train(cfg, *first, p);
      EXPECT_EQ(r.steps, 5);
      p.stop_after = -1;
      p.resume = r.checkpoint;
    }
    auto source = api::tokens_data_source(pattern_tokens(3000, 50));
    api::train(cfg, *source, p);
    return losses;
  };
  EXPECT_EQ(losses_of("once", false), losses_of("twice", true));
  fs::remove_all(dir);
}

// train() on data.dir is the library's loop as `attnlab train` runs it (FTZ/DAZ set): the same
// losses bit for bit as the internal train() under the same floating-point mode.
TEST(Api, TrainOnDataDirEqualsTheInternalLoop) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "datadir");
  attnlab::test_util::write_learnable_shards(dir, 50);
  const api::Config cfg = small_config(dir / "api")
                              .set("train.steps", 12)
                              .set("train.eval_every", 6)
                              .set("attn.pos", "alibi")
                              .set("data.dir", "\"" + dir.string() + "\"");
  const api::TrainResult r = api::train(cfg);
  attnlab::Config internal = attnlab::Config::from_json(nlohmann::json::parse(cfg.to_json_string()), "test");
  internal.train.out_dir = (dir / "internal").string();
  attnlab::TrainOptions quiet;
  quiet.quiet = true;
  attnlab::TrainSummary s;
  {
    attnlab::ScopedFlushDenormals flush;
    s = attnlab::train(internal, quiet);
  }
  EXPECT_EQ(r.losses, s.losses);
  EXPECT_EQ(r.val_loss, s.val_loss);
  fs::remove_all(dir);
}

// Two Models on two threads at once (the promise of model.h): each gives what it gives alone.
TEST(Api, TwoModelsOnTwoThreads) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "threads");
  api::Model a = api::Model::create(small_config(dir), 1), b = api::Model::create(small_config(dir).set("attn.xsa", "on"), 2);
  const std::vector<int32_t> tokens = pattern_tokens(32, 50);
  const std::vector<float> alone_a = a.forward(tokens, 2, 16), alone_b = b.forward(tokens, 2, 16);
  std::vector<float> together_a, together_b;
  std::thread ta([&] { for (int i = 0; i < 50; ++i) together_a = a.forward(tokens, 2, 16); });
  std::thread tb([&] { for (int i = 0; i < 50; ++i) together_b = b.forward(tokens, 2, 16); });
  ta.join();
  tb.join();
  EXPECT_EQ(alone_a, together_a);
  EXPECT_EQ(alone_b, together_b);
  fs::remove_all(dir);
}

#if defined(__SSE__)
TEST(Api, FlushToZeroIsScopedToTheCall) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "ftz");
  api::Model model = api::Model::create(small_config(dir), 1);
  const unsigned before = _mm_getcsr();
  ASSERT_EQ(before & 0x8040u, 0u) << "the test process starts without FTZ/DAZ";
  (void)model.forward(pattern_tokens(16, 50), 1, 16);
  EXPECT_EQ(_mm_getcsr(), before);
  fs::remove_all(dir);
}
#endif

// gemm() from two threads at once (two Models on two threads): each thread's products are the ones
// it computes alone, bit for bit.
TEST(Api, GemmIsSafeOnTwoThreadsAtOnce) {
  struct Product {
    int M, N, K;
    std::vector<float> A, B, alone, together;
  };
  attnlab::Rng rng(5);
  std::vector<Product> products;
  // The same shape on both threads: the case that shared one cached primitive before.
  for (auto [M, N, K] : {std::tuple{64, 96, 80}, std::tuple{64, 96, 80}}) {
    Product p{M, N, K, std::vector<float>((size_t)M * K), std::vector<float>((size_t)K * N), {}, {}};
    for (auto& x : p.A) x = (float)rng.normal();
    for (auto& x : p.B) x = (float)rng.normal();
    products.push_back(std::move(p));
  }
  // Every call's result is checked (a product written into the other thread's C would be
  // overwritten by the next call otherwise); `mismatches` counts the wrong ones.
  auto run = [](Product& p, std::vector<float>& out, int repeats, const std::vector<float>* expected) {
    int mismatches = 0;
    for (int r = 0; r < repeats; ++r) {
      out.assign((size_t)p.M * p.N, 0.f);
      attnlab::gemm(false, false, p.M, p.N, p.K, 1.0f, p.A.data(), p.K, p.B.data(), p.N, 0.0f, out.data(), p.N);
      if (expected && out != *expected) ++mismatches;
    }
    return mismatches;
  };
  for (auto& p : products) run(p, p.alone, 1, nullptr);
  int mismatches[2] = {0, 0};
  std::thread t0([&] { mismatches[0] = run(products[0], products[0].together, 2000, &products[0].alone); });
  std::thread t1([&] { mismatches[1] = run(products[1], products[1].together, 2000, &products[1].alone); });
  t0.join();
  t1.join();
  EXPECT_EQ(mismatches[0], 0);
  EXPECT_EQ(mismatches[1], 0);
}
