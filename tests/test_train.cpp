// Training loop: exact resume (bit-identical losses), checkpoint round trip and validation,
// schedules, and that a short run on learnable data lowers the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/bandwidth.h"
#include "core/peak.h"
#include "core/rng.h"
#include "data/shard.h"
#include "checkpoint/checkpoint.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "train_util.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) { return test_util::temp_dir("train", name); }
void write_data(const fs::path& dir, int V) { test_util::write_learnable_shards(dir, V); }

Config config_for(const fs::path& dir, const std::string& extra) {
  std::string text = "model.n_layer = 2\nmodel.d_model = 32\nmodel.n_head = 4\nmodel.seq_len = 16\nmodel.vocab_size = 50\n"
                     "train.batch_size = 4\ntrain.steps = 12\ntrain.warmup = 2\ntrain.lr = 3e-3\ntrain.eval_every = 0\n"
                     "train.eval_batches = 2\ntrain.grad_accum = 2\n"
                     "data.dir = \"" + dir.string() + "\"\ntrain.out_dir = \"" + (dir / "run").string() + "\"\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}
}  // namespace

// For both precisions: bf16's weight copies are made from the float weights at every forward, so
// a resumed bf16 run repeats the uninterrupted one bit for bit as well (same thread count).
TEST(Train, ExactResumeIsBitIdentical) {
  for (const std::string precision : {"fp32", "bf16"}) {
    const fs::path dir = temp_dir("resume_" + precision);
    write_data(dir, 50);
    TrainOptions quiet;
    quiet.quiet = true;
    const std::string p = "train.precision = \"" + precision + "\"\n";
    const Config cfg = config_for(dir, p);
    const TrainSummary full = train(cfg, quiet);
    ASSERT_EQ(full.losses.size(), 12u);

    const Config cfg2 = config_for(dir, p + "train.out_dir = \"" + (dir / "run2").string() + "\"\n");
    TrainOptions first = quiet;
    first.stop_after = 5;
    const TrainSummary a = train(cfg2, first);
    ASSERT_EQ(a.losses.size(), 5u);
    TrainOptions second = quiet;
    second.resume = a.checkpoint;
    const TrainSummary b = train(cfg2, second);
    ASSERT_EQ(b.losses.size(), 7u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(a.losses[i], full.losses[i]) << precision << " step " << i;
    for (int i = 0; i < 7; ++i) EXPECT_EQ(b.losses[i], full.losses[5 + i]) << precision << " step " << 5 + i;
    EXPECT_EQ(b.val_loss, full.val_loss) << precision;
    fs::remove_all(dir);
  }
}

// The event callbacks `attnlab compare` drives training with: one on_step per optimizer step with
// the step counted across a resume and the loss the summary reports, one on_eval per validation.
TEST(Train, EventCallbacks) {
  const fs::path dir = temp_dir("events");
  write_data(dir, 50);
  const Config cfg = config_for(dir, "train.eval_every = 4\n");
  std::vector<int64_t> steps, evals;
  std::vector<double> losses;
  TrainOptions o;
  o.quiet = true;
  o.stop_after = 5;
  o.on_step = [&](int64_t step, double loss, double tps) {
    steps.push_back(step);
    losses.push_back(loss);
    EXPECT_GT(tps, 0);
  };
  o.on_eval = [&](int64_t step, double vl, size_t n) {
    evals.push_back(step);
    EXPECT_TRUE(std::isfinite(vl));
    EXPECT_GT(n, 0u);
  };
  const TrainSummary a = train(cfg, o);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(losses, a.losses);
  EXPECT_EQ(evals, (std::vector<int64_t>{4, 5}));  // periodic, then the stop's own evaluation
  EXPECT_FALSE(a.interrupted);
  EXPECT_EQ(a.steps_this_run, 5);
  EXPECT_GT(a.num_params, 0u);
  EXPECT_GT(a.train_seconds, 0);
  steps.clear();
  evals.clear();
  o.stop_after = -1;
  o.resume = a.checkpoint;
  const TrainSummary b = train(cfg, o);
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(evals, (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(b.steps, 12);
  fs::remove_all(dir);
}

TEST(Train, LossDecreasesOnLearnableData) {
  const fs::path dir = temp_dir("learn");
  write_data(dir, 50);
  TrainOptions quiet;
  quiet.quiet = true;
  const TrainSummary s = train(config_for(dir, "train.steps = 60\ntrain.warmup = 5\n"), quiet);
  EXPECT_LT(s.val_loss, std::log(50.0) * 0.6) << "initial loss is log V = " << std::log(50.0);
  fs::remove_all(dir);
}

TEST(Checkpoint, RoundTripAndErrors) {
  const fs::path dir = temp_dir("ckpt");
  const Config cfg = config_for(dir, "attn.sink = learned\n");
  GPT<float> m(cfg);
  m.init_weights(3);
  std::vector<float> adam_m(m.registry().total(), 0.25f), adam_v(m.registry().total(), 0.5f);
  TrainingState st{7, 2, 11, 1234};
  const std::string path = (dir / "c.safetensors").string();
  save_checkpoint(path, m, adam_m.data(), adam_v.data(), st);

  GPT<float> back(read_checkpoint_config(path));
  std::vector<float> bm(back.registry().total()), bv(back.registry().total());
  const TrainingState got = load_checkpoint(path, back, bm.data(), bv.data());
  EXPECT_EQ(got.step, 7);
  EXPECT_EQ(got.data_epoch, 2u);
  EXPECT_EQ(got.data_index, 11u);
  EXPECT_EQ(got.tokens_seen, 1234u);
  for (const auto& s : m.registry().specs())
    for (size_t i = 0; i < s.numel; ++i) ASSERT_EQ(back.params()[s.offset + i], m.params()[s.offset + i]) << s.name;
  EXPECT_EQ(bm[0], 0.25f);
  EXPECT_EQ(bv[0], 0.5f);

  // a weights-only file cannot be resumed, and says so
  const std::string weights = (dir / "w.safetensors").string();
  save_checkpoint(weights, m, nullptr, nullptr, st);
  try {
    load_checkpoint(weights, back, bm.data(), bv.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no optimizer state"), std::string::npos) << e.what();
  }
  // a model of another shape is refused, naming the file
  GPT<float> other(config_for(dir, ""));
  try {
    load_checkpoint(path, other, nullptr, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  // truncated file: clear error naming the file
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out((dir / "t.safetensors").string(), std::ios::binary);
    out.write(bytes.data(), bytes.size() / 2);
  }
  try {
    read_checkpoint_config((dir / "t.safetensors").string());
    GPT<float> g(cfg);
    load_checkpoint((dir / "t.safetensors").string(), g, nullptr, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Schedule, WarmupCosineWsd) {
  TrainConfig tc;
  tc.lr = 1.0; tc.min_lr_ratio = 0.1; tc.warmup = 10; tc.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(tc, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(tc, 9), 1.0);
  EXPECT_NEAR(learning_rate(tc, 10), 1.0, 1e-12);
  EXPECT_NEAR(learning_rate(tc, 60), 0.55, 1e-12);   // halfway: (1 + 0.1)/2
  EXPECT_NEAR(learning_rate(tc, 110), 0.1, 1e-12);
  tc.schedule = "wsd"; tc.wsd_decay_frac = 0.2;      // decay over the last 22 steps
  EXPECT_DOUBLE_EQ(learning_rate(tc, 87), 1.0);
  EXPECT_NEAR(learning_rate(tc, 109), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(tc, 98), 1.0 + (0.1 - 1.0) * 11.0 / 22.0, 1e-12);  // 11th of 22 decay steps
  tc.schedule = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(tc, 100), 1.0);
}

TEST(Train, ModelFlopsCountTheCausalHalfOfAttention) {
  // 6·N_matmul + 6·L·d·(T + 1): each layer's qkv (3d²), proj (d²) and MLP (8d²) weights, the tied
  // head (V·d) once; attention 12·d FLOPs per (query, key) pair and layer over (T + 1)/2 pairs per token.
  const Config cfg = resolve_config(parse_config_text(
      "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 128\nmodel.vocab_size = 300\n", "test"));
  GPT<float> model(cfg);
  const double d = 64, L = 2, V = 300;
  const double n_matmul = L * 12 * d * d + V * d;
  EXPECT_DOUBLE_EQ(training_flops_per_token(model, 128), 6 * n_matmul + 6 * L * d * 129);
  EXPECT_DOUBLE_EQ(training_flops_per_token(model, 1), 6 * n_matmul + 12 * L * d);  // one pair per token
}

TEST(Train, DecodeBytesCountEveryWeightOnceAndTheCache) {
  // The decode bound's numerator: all parameters (the tied embedding is read whole, as the output
  // projection) plus K and V of every layer at the context length; of a learned position table only
  // one row is read.
  const Config cfg = resolve_config(parse_config_text(
      "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.kv_heads = 2\nmodel.seq_len = 128\nmodel.vocab_size = 300\n",
      "test"));
  GPT<float> model(cfg);
  const auto db = model.decode_bytes(100);
  EXPECT_DOUBLE_EQ(db.weights, 4.0 * model.num_params());
  EXPECT_DOUBLE_EQ(db.kv_cache, 4.0 * 2 /*K, V*/ * 2 /*layers*/ * 2 /*kv heads*/ * 16 /*head dim*/ * 100);
  Config learned = cfg;
  learned.attn.pos = "learned";
  GPT<float> lm(learned);
  EXPECT_DOUBLE_EQ(lm.decode_bytes(0).weights, 4.0 * (lm.num_params() - 128 * 64 + 64));
}

TEST(Train, ReadBandwidthIsMeasuredOrOverridden) {
  // The decode bound's denominator: positive, for the working set asked (at least 64 KiB), or
  // ATTNLAB_READ_GBPS when set. No bound on its value (machines differ).
  const ReadBandwidth a = read_bandwidth(1 << 20, 2);
  EXPECT_GT(a.gb_per_s, 0);
  EXPECT_EQ(a.bytes, size_t(1) << 20);
  EXPECT_EQ(a.threads, 2);
  EXPECT_STREQ(a.source, "measured");
  EXPECT_EQ(read_bandwidth(10, 1).bytes, size_t(64) << 10);
  ::setenv("ATTNLAB_READ_GBPS", "42", 1);
  const ReadBandwidth c = read_bandwidth(1 << 20, 2);
  ::unsetenv("ATTNLAB_READ_GBPS");
  EXPECT_EQ(c.gb_per_s, 42);
  EXPECT_STREQ(c.source, "ATTNLAB_READ_GBPS");
}

TEST(Train, PeakFlopsIsMeasuredOnceOrOverridden) {
  // The MFU denominator: a positive measurement, cached (the same figure on the second call), or
  // ATTNLAB_PEAK_GFLOPS when set to a positive number. No bound on its value (machines differ).
  const PeakFlops a = peak_flops(2), b = peak_flops(2);
  EXPECT_GT(a.gflops, 0);
  EXPECT_EQ(a.gflops, b.gflops);
  EXPECT_EQ(a.threads, 2);
  EXPECT_STREQ(a.source, "measured");
  ::setenv("ATTNLAB_PEAK_GFLOPS", "123.5", 1);
  const PeakFlops c = peak_flops(2);
  ::setenv("ATTNLAB_PEAK_GFLOPS", "not a number", 1);
  const PeakFlops d = peak_flops(2);
  ::unsetenv("ATTNLAB_PEAK_GFLOPS");
  EXPECT_EQ(c.gflops, 123.5);
  EXPECT_STREQ(c.source, "ATTNLAB_PEAK_GFLOPS");
  EXPECT_EQ(d.gflops, a.gflops);  // ignored: the measurement
  // The bf16 peak: its own measurement and override; the float loop where the CPU has no
  // AVX512-BF16 (gemm(bf16) widens to float there).
  const PeakFlops h = peak_flops(2, true), h2 = peak_flops(2, true);
  EXPECT_GT(h.gflops, 0);
  EXPECT_EQ(h.gflops, h2.gflops);
  EXPECT_STREQ(h.source, "measured");
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) EXPECT_STREQ(h.isa, "AVX512-BF16 dot product");
  else EXPECT_STREQ(h.isa, a.isa);
#else
  EXPECT_STREQ(h.isa, a.isa);
#endif
  ::setenv("ATTNLAB_PEAK_GFLOPS_BF16", "456", 1);
  const PeakFlops o = peak_flops(2, true), f = peak_flops(2);
  ::unsetenv("ATTNLAB_PEAK_GFLOPS_BF16");
  EXPECT_EQ(o.gflops, 456);
  EXPECT_EQ(f.gflops, a.gflops);  // the fp32 figure does not follow the bf16 override
}
