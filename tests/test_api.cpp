// The public API (include/attnlab/): configurations built in C++ equal the same text, errors name
// the key, forward shapes, save/load round trip, deterministic generation, training through a
// DataSource with callbacks, FTZ/DAZ scoped to the calls, and gemm() on two threads at once; the
// functions the CLI's commands are written on: evaluate (equal to the internal evaluation and to
// what `attnlab eval` prints), streamed generation (the same ids), bf16 weights, the length sweep,
// logits and gradients files, tasks, analyze, model_info and bench.
#include <gtest/gtest.h>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "attnlab/attnlab.h"
#include "checkpoint/checkpoint.h"
#include "core/denormals.h"
#include "core/gemm.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/shard.h"
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

// request_train_stop() stops the running training after its step like a first Ctrl-C (a checkpoint,
// interrupted set), from a callback here and from another thread; a request made while no training
// runs does not stop the next one.
TEST(Api, RequestTrainStopStopsCleanlyAndOnlyTheRunningTraining) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "stop");
  api::TrainParams p = api::default_train_params();
  p.on_step = [](int64_t step, double, double) {
    if (step == 3) api::request_train_stop();
  };
  auto source = api::tokens_data_source(pattern_tokens(3000, 50));
  const api::TrainResult stopped = api::train(small_config(dir / "a").set("train.steps", 12), *source, p);
  EXPECT_TRUE(stopped.interrupted);
  EXPECT_EQ(stopped.steps, 3);
  EXPECT_TRUE(fs::exists(stopped.checkpoint));
  EXPECT_EQ(api::Model::load(stopped.checkpoint).num_params(), stopped.num_params);

  api::request_train_stop();  // no training runs: nothing to stop, and the next run is not affected
  p.on_step = nullptr;
  auto again = api::tokens_data_source(pattern_tokens(3000, 50));
  const api::TrainResult full = api::train(small_config(dir / "b").set("train.steps", 6), *again, p);
  EXPECT_FALSE(full.interrupted);
  EXPECT_EQ(full.steps, 6);

  std::atomic<bool> started{false};
  p.on_step = [&](int64_t, double, double) { started = true; };
  std::thread stopper([&] {
    while (!started) std::this_thread::yield();
    api::request_train_stop();
  });
  auto third = api::tokens_data_source(pattern_tokens(3000, 50));
  const api::TrainResult from_thread = api::train(small_config(dir / "c").set("train.steps", 100000), *third, p);
  stopper.join();
  EXPECT_TRUE(from_thread.interrupted);
  EXPECT_LT(from_thread.steps, 100000);
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

namespace {

// A checkpoint trained for a few steps on learnable shards in dir (V 50, T 16), and the shards.
std::string trained_checkpoint(const fs::path& dir, const std::string& extra_key = "", const std::string& extra_value = "") {
  attnlab::test_util::write_learnable_shards(dir, 50);
  api::Config cfg = small_config(dir / "run").set("train.steps", 12).set("data.dir", "\"" + dir.string() + "\"");
  if (!extra_key.empty()) cfg.set(extra_key, extra_value);
  return api::train(cfg).checkpoint;
}

// The standard output of a shell command (the test's own tool, ATTNLAB_TOOL).
std::string run_command(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

}  // namespace

// evaluate() is the evaluation `attnlab eval` prints: bit for bit the internal one (FTZ/DAZ as the
// tool sets them), and the tool's own line shows the same loss.
TEST(Api, EvaluateEqualsTheInternalEvaluationAndTheEvalCommand) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "evaluate");
  const std::string ck = trained_checkpoint(dir);
  const std::string val = (dir / "val.bin").string();
  api::EvalParams p = api::default_eval_params();
  p.batches = 3;
  p.batch_size = 4;
  const api::EvalResult r = api::evaluate(ck, val, p);
  EXPECT_EQ(r.seq_len, 16);
  EXPECT_EQ(r.tokens, 3u * 4 * 16);
  attnlab::EvalResult internal;
  {
    attnlab::ScopedFlushDenormals flush;
    attnlab::GPT<float> model(attnlab::read_checkpoint_config(ck));
    attnlab::load_checkpoint(ck, model, nullptr, nullptr);
    model.plan(4, 16);
    internal = attnlab::evaluate(model, attnlab::Shard::open(val), 3);
  }
  EXPECT_EQ(r.loss, internal.mean());
  EXPECT_EQ(r.perplexity, std::exp(internal.mean()));
  // The same windows scored by the cached forward (Model::loss): the same loss to rounding.
  api::Model model = api::Model::load(ck);
  const attnlab::Shard shard = attnlab::Shard::open(val);
  double sum = 0;
  for (int w = 0; w < 12; ++w) {
    std::vector<int32_t> in(16), tgt(16);
    for (int t = 0; t < 16; ++t) in[t] = shard[(size_t)w * 16 + t], tgt[t] = shard[(size_t)w * 16 + t + 1];
    sum += model.loss(in, tgt, 1, 16);
  }
  EXPECT_NEAR(sum / 12, r.loss, 1e-5);
#ifdef ATTNLAB_TOOL
  char expected[64];
  std::snprintf(expected, sizeof expected, "loss %.4f, perplexity %.3f", r.loss, r.perplexity);
  const std::string line =
      run_command(std::string(ATTNLAB_TOOL) + " eval --checkpoint " + ck + " --data " + val + " --batches 3 --batch-size 4");
  EXPECT_NE(line.find(expected), std::string::npos) << line << " (expected " << expected << ")";
#endif
  // Errors name the option the parameter stands for.
  p.seq_len = -1;
  EXPECT_THROW(api::evaluate(ck, val, p), attnlab::Error);
  EXPECT_THROW(api::evaluate(ck, (dir / "missing.bin").string()), attnlab::Error);
  fs::remove_all(dir);
}

// Streaming generation passes exactly the ids generate() returns, one by one, and can stop early.
TEST(Api, StreamedGenerationGivesTheSameIds) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "stream");
  api::Model model = api::Model::create(small_config(dir), 4);
  api::SamplingParams p = api::default_sampling_params();
  p.temperature = 0.8;
  p.top_k = 8;
  p.seed = 11;
  const std::vector<int32_t> prompt{3, 1, 4};
  const std::vector<int32_t> plain = model.generate(prompt, 10, p);
  std::vector<int32_t> streamed;
  const api::Generation g = model.generate(prompt, 10, p, [&](int32_t id) {
    streamed.push_back(id);
    return true;
  });
  EXPECT_EQ(g.ids, plain);
  EXPECT_EQ(std::vector<int32_t>(plain.begin() + 3, plain.end()), streamed);
  EXPECT_EQ(g.prompt_tokens, 3);
  EXPECT_EQ(g.generated, 10);
  EXPECT_GE(g.prefill_seconds, 0);
  EXPECT_GE(g.decode_seconds, 0);
  // Stopping after the fourth id: the same first four.
  int seen = 0;
  const api::Generation stopped = model.generate(prompt, 10, p, [&](int32_t) { return ++seen < 4; });
  EXPECT_EQ(stopped.generated, 4);
  EXPECT_EQ(stopped.ids, std::vector<int32_t>(plain.begin(), plain.begin() + 7));
  // The decode bound at a given read rate (ATTNLAB_READ_GBPS: no measurement).
  ::setenv("ATTNLAB_READ_GBPS", "10", 1);
  const api::DecodeBound b = model.decode_bound(3, 10);
  ::unsetenv("ATTNLAB_READ_GBPS");
  EXPECT_EQ(b.mean_context, 3 + 9 / 2.0);
  EXPECT_NEAR(b.weight_bytes, 4.0 * model.num_params(), 4.0 * 16 * 32);  // (all but the unused position rows)
  EXPECT_GT(b.kv_cache_bytes, 0);
  EXPECT_EQ(b.read_source, "ATTNLAB_READ_GBPS");
  EXPECT_NEAR(b.ms_per_token, (b.weight_bytes + b.kv_cache_bytes) / 10e9 * 1e3, 1e-12);
  EXPECT_FALSE(b.dram_measured);
  fs::remove_all(dir);
}

// Weights::bf16: half the weight bytes per decode step, logits close to fp32's, deterministic,
// and a re-planned model (another shape) computes with the same rounded weights.
TEST(Api, Bf16WeightsAreRoundedOnceAndKeptAcrossPlans) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "bf16");
  api::Model fp32 = api::Model::create(small_config(dir), 5);
  const std::string ck = (dir / "m.safetensors").string();
  fp32.save(ck);
  api::Model bf16 = api::Model::load(ck, api::Weights::bf16);
  const std::vector<int32_t> tokens = pattern_tokens(32, 50);
  const std::vector<float> a = fp32.forward(tokens, 2, 16), b = bf16.forward(tokens, 2, 16);
  float max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  EXPECT_GT(max_diff, 0.f);
  EXPECT_LT(max_diff, 0.1f);  // bf16 keeps 8 bits of mantissa: ~0.4% per weight, a small model's logits move by far less than 0.1
  // Two rows take the decoding products (the bf16 copies): after other shapes were planned, the
  // same logits as at first, and the first shape's too.
  const std::vector<int32_t> two{1, 2};
  const std::vector<float> few = bf16.forward(two, 1, 2);
  (void)bf16.generate(two, 3);
  EXPECT_EQ(bf16.forward(tokens, 2, 16), b);
  EXPECT_EQ(bf16.forward(two, 1, 2), few);
  ::setenv("ATTNLAB_READ_GBPS", "10", 1);
  const double w32 = fp32.decode_bound(2, 3).weight_bytes, w16 = bf16.decode_bound(2, 3).weight_bytes;
  ::unsetenv("ATTNLAB_READ_GBPS");
  EXPECT_LT(w16, 0.6 * w32);
  fs::remove_all(dir);
}

// The length sweep at the training length scores the same blocks evaluate() would, its report is
// valid JSON of its schema, and write_json_report writes it.
TEST(Api, LengthSweepReportsEveryLength) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "lengths");
  const std::string ck = trained_checkpoint(dir);
  api::LengthSweepParams p = api::default_length_sweep_params();
  p.lengths = "1,2,40tok";
  p.tokens = 256;
  const api::LengthSweep s = api::evaluate_lengths(ck, (dir / "val.bin").string(), p);
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_EQ(s.train_len, 16);
  EXPECT_EQ(s.rows[0].length, 16);
  EXPECT_EQ(s.rows[1].length, 32);
  EXPECT_EQ(s.rows[2].length, 40);
  for (const auto& r : s.rows) {
    EXPECT_TRUE(r.applicable);
    EXPECT_GT(r.tokens, 0u);
    EXPECT_TRUE(std::isfinite(r.loss));
  }
  EXPECT_EQ(s.rows[0].tokens_beyond_train, 0u);
  EXPECT_GT(s.rows[1].tokens_beyond_train, 0u);
  EXPECT_NE(s.table.find("length"), std::string::npos);
  const std::string json_path = (dir / "l.json").string();
  api::write_json_report(json_path, s.json);
  std::ifstream f(json_path);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["format"], "attnlab-length-eval");
  EXPECT_EQ(j["lengths"].size(), 3u);
  p.lengths = "1,x";
  EXPECT_THROW(api::evaluate_lengths(ck, (dir / "val.bin").string(), p), attnlab::Error);
  fs::remove_all(dir);
}

// Token files, logits as .npy and the gradient dump: the dump's loss is the model's loss on them.
TEST(Api, TokenFilesLogitsAndGradients) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "files");
  api::Model model = api::Model::create(small_config(dir), 6);
  const std::string ck = (dir / "m.safetensors").string();
  model.save(ck);
  const std::string ids = (dir / "ids.txt").string();
  std::ofstream(ids) << "1 2 3 4 5 6 7 8 9\n9 8 7 6 5 4 3 2 1\n";
  const auto seqs = api::read_token_file(ids);
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_EQ(seqs[1], (std::vector<int32_t>{9, 8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_FALSE(api::is_token_shard(ids));
  std::ofstream((dir / "bad.txt").string()) << "1 2 3\n4 5\n";
  EXPECT_THROW(api::read_token_file((dir / "bad.txt").string()), attnlab::Error);
  // logits
  std::vector<int32_t> flat;
  for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
  const std::vector<float> logits = model.forward(flat, 2, 9);
  const std::string npy = (dir / "l.npy").string();
  api::write_logits_npy(npy, logits, 2, 9, 50);
  EXPECT_EQ(fs::file_size(npy), 128u + 2 * 9 * 50 * 4);
  EXPECT_THROW(api::write_logits_npy(npy, logits, 2, 8, 50), attnlab::Error);
  // gradients
  const std::string out = (dir / "g.safetensors").string();
  const double loss = api::write_gradients(ck, ids, out);
  std::vector<int32_t> in, tgt;
  for (const auto& s : seqs) {
    in.insert(in.end(), s.begin(), s.end() - 1);
    tgt.insert(tgt.end(), s.begin() + 1, s.end());
  }
  EXPECT_NEAR(loss, model.loss(in, tgt, 2, 8), 1e-5);
  EXPECT_GT(fs::file_size(out), 4u * model.num_params());
  fs::remove_all(dir);
}

// A task: its vocabulary in the configuration, a short training run, an evaluation report.
TEST(Api, TaskTrainAndEvaluate) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "task");
  api::TaskParams task = api::default_task_params();
  task.name = "passkey";
  const api::Config base = api::Config::preset("tiny")
                               .set("model.seq_len", 80)
                               .set("train.steps", 3)
                               .set("train.warmup", 1)
                               .set("train.eval_every", 0)
                               .set("train.out_dir", "\"" + (dir / "run").string() + "\"");
  EXPECT_THROW(api::train_task(base, task), attnlab::Error);  // the tiny preset's vocabulary is not the task's
  const api::Config cfg = api::task_config(base, task);
  EXPECT_EQ(cfg.get("model.vocab_size"), "70");
  std::vector<double> losses;
  api::TrainParams tp = api::default_train_params();
  tp.on_step = [&](int64_t, double loss, double) { losses.push_back(loss); };
  const api::TrainResult r = api::train_task(cfg, task, tp);
  EXPECT_EQ(losses.size(), 3u);
  api::TaskEvalParams ep = api::default_task_eval_params();
  ep.lengths = "1";
  ep.samples = 4;
  const api::TaskEvalResult e = api::evaluate_task(r.checkpoint, task, ep);
  ASSERT_EQ(e.cells.size(), 1u);
  EXPECT_EQ(e.cells[0].length, 80);
  EXPECT_EQ(e.cells[0].samples, 4u);
  EXPECT_EQ(nlohmann::json::parse(e.json)["format"], "attnlab-task-eval");
  ep.depths = "0.5";  // the needle's option
  EXPECT_THROW(api::evaluate_task(r.checkpoint, task, ep), attnlab::Error);
  fs::remove_all(dir);
}

// analyze writes analysis.json and summarises it, calling on_start first.
TEST(Api, AnalyzeWritesTheDocument) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "analyze");
  const std::string ck = trained_checkpoint(dir);
  api::AnalyzeParams p = api::default_analyze_params();
  p.sequences = 4;
  p.bootstrap = 10;
  p.cka_tokens = 32;
  int started = 0;
  p.on_start = [&](int T) { started = T; };
  const api::AnalyzeResult r = api::analyze(ck, (dir / "val.bin").string(), (dir / "out").string(), p);
  EXPECT_EQ(started, 16);
  EXPECT_EQ(r.layers.size(), 2u);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_FALSE(r.has_rescue);
  std::ifstream f(r.path);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema"], "attnlab.analysis");
  EXPECT_EQ(j["checkpoint"], ck);
  EXPECT_EQ(j["loss"].get<double>(), r.loss);
  fs::remove_all(dir);
}

// model_info counts what Model::create builds; bench times the steps it is asked for.
TEST(Api, ModelInfoAndBench) {
  const api::Config tiny = api::Config::preset("tiny");
  const api::ModelInfo info = api::model_info(tiny);
  EXPECT_EQ(info.params, api::Model::create(tiny, 1).num_params());
  EXPECT_GT(info.activation_bytes, info.residual_activation_bytes);
  EXPECT_EQ(info.residual_kind, "standard");
  EXPECT_FALSE(info.dar);
  EXPECT_TRUE(api::model_info(api::Config::preset("tiny").set("residual.kind", "dar")).dar);
  EXPECT_FALSE(api::kernel_info().attention_kernels.empty());
  ::setenv("ATTNLAB_PEAK_GFLOPS", "100", 1);
  api::BenchParams p = api::default_bench_params();
  p.steps = 2;
  p.warmup = 0;
  p.rounds = 2;
  const api::BenchResult r = api::bench({{"a", tiny}, {"b", api::Config::preset("tiny").set("attn.xsa", "on")}}, p);
  ::unsetenv("ATTNLAB_PEAK_GFLOPS");
  ASSERT_EQ(r.variants.size(), 2u);
  EXPECT_EQ(r.variants[0].name, "a");
  EXPECT_EQ(r.variants[0].step_seconds.size(), 4u);
  EXPECT_EQ(r.variants[0].round_median_seconds.size(), 2u);
  EXPECT_EQ(r.variants[0].ratio, 1.0);
  EXPECT_EQ(r.variants[0].params, info.params);
  EXPECT_GT(r.variants[1].tokens_per_s, 0);
  EXPECT_EQ(r.peak.gflops, 100);
  EXPECT_EQ(r.variants[1].config.get("attn.xsa"), "on");
  EXPECT_THROW(api::bench({}, p), attnlab::Error);
}

// Config::resume: the stored configuration plus overrides; a new data.dir drops the stored paths.
TEST(Api, ResumeConfigReplacesTheDataPaths) {
  const fs::path dir = attnlab::test_util::temp_dir("api", "resumecfg");
  const std::string ck = trained_checkpoint(dir);
  const api::Config same = api::Config::resume(ck, {"train.steps=20"});
  EXPECT_EQ(same.get("train.steps"), "20");
  EXPECT_EQ(same.get("data.train"), (dir / "train.bin").string());
  const api::Config moved = api::Config::resume(ck, {"data.dir=\"/elsewhere\""});
  EXPECT_EQ(moved.get("data.train"), "/elsewhere/train.bin");
  EXPECT_TRUE(api::Config::has_preset("tiny"));
  EXPECT_FALSE(api::Config::has_preset("huge"));
  fs::remove_all(dir);
}
