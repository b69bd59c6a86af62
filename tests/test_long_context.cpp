// Length extrapolation (docs/long-context.md, docs/mechanisms.md §8.6): the chunked, KV-cached,
// BOS-per-block evaluation against `attnlab eval`'s uncached one at T_train, its memory (affine in
// the length: the cache, plus one chunk's constant workspace), N/A for learned positions, the
// token budget and the position buckets, and --lengths parsing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/rng.h"
#include "data/shard.h"
#include "experiment/long_context.h"
#include "model/config.h"
#include "model/gpt.h"
#include "train/trainer.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {
constexpr int kT = 16, kV = 60, kBos = 1;

Config cfg_with(const std::string& extra) {
  const std::string text = "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 16\nmodel.vocab_size = 60\n" + extra;
  return resolve_config(parse_config_text(text, "test"));
}

std::function<std::unique_ptr<GPT<float>>()> factory(const Config& cfg) {
  return [cfg] {
    auto m = std::make_unique<GPT<float>>(cfg);
    m->init_weights(7);
    return m;
  };
}

// A shard of n·T + 1 tokens with BOS at every multiple of T: `attnlab eval`'s windows [wT, wT+T]
// then read exactly the blocks of §8.6 (BOS, then the block's first T−1 tokens; its T targets).
fs::path bos_every_t_shard(int windows) {
  const fs::path p = fs::temp_directory_path() / ("attnlab_test_lc_" + std::to_string(::getpid()) + ".bin");
  Rng r(3);
  std::vector<uint16_t> t((size_t)windows * kT + 1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % kT == 0 ? kBos : (uint16_t)(3 + r.below(kV - 3));
  write_shard(p.string(), t.data(), t.size());
  return p;
}
}  // namespace

TEST(LengthEval, ParseLengths) {
  EXPECT_EQ(parse_lengths("1,2,4,8", 32), (std::vector<int>{32, 64, 128, 256}));
  EXPECT_EQ(parse_lengths("0.5, 3000tok", 32), (std::vector<int>{16, 3000}));
  EXPECT_THROW(parse_lengths("1,,2", 32), Error);
  EXPECT_THROW(parse_lengths("0.3", 32), Error);  // 9.6 tokens
  EXPECT_THROW(parse_lengths("-1", 32), Error);
  EXPECT_THROW(parse_lengths("4x", 32), Error);
}

// At T_train the chunked cached evaluation of BOS-prefixed blocks scores the same tokens as
// `attnlab eval` (evaluate(): uncached, windows of the shard) with the same batch: the same rows go
// through the same GEMMs and the same attention tile order, so the per-token losses agree bit for bit
// and the sums (in the same order) are identical. Checked for every positional scheme and for
// XSA, GOAT and a depth-attention residual.
TEST(LengthEval, OneTimesEqualsEvalBitForBit) {
  const fs::path shard_path = bos_every_t_shard(12);
  Shard shard = Shard::open(shard_path.string());
  for (const char* extra : {"attn.pos = \"rope\"\n", "attn.pos = \"alibi\"\n", "attn.pos = \"learned\"\n", "attn.pos = \"none\"\n",
                            "attn.pos = \"goat\"\nattn.xsa = \"on\"\n", "residual.kind = \"attnres\"\nattn.sink = \"learned\"\n"}) {
    SCOPED_TRACE(extra);
    const Config cfg = cfg_with(extra);
    auto m = factory(cfg)();
    m->plan(4, kT);
    const EvalResult ref = evaluate(*m, shard, 0);
    LengthEvalOptions o;
    o.lengths = {kT};
    o.batch_size = 4;
    const LengthEvalReport rep = evaluate_lengths(factory(cfg), shard, o);
    ASSERT_EQ(rep.results.size(), 1u);
    const LengthResult& r = rep.results[0];
    EXPECT_EQ(r.tokens, ref.count);
    EXPECT_EQ(r.blocks, 12u);
    EXPECT_EQ(r.loss_sum, ref.loss_sum);  // identical, not merely close
    EXPECT_EQ(r.beyond_tokens, 0u);
  }
  fs::remove(shard_path);
}

// Chunking does not change the numbers beyond float rounding: chunks of 4 against one chunk of 2T.
// Each chunk's attention runs its online softmax over the same keys in the same tiles, but the
// GEMMs see other row counts, so the per-token losses may differ by a few ulps of the logits;
// relative 1e-5 on the mean bounds that for these sizes (64 terms of ~4 in float: 64·2⁻²⁴ ≈ 4e-6).
TEST(LengthEval, ChunkSizeDoesNotMatter) {
  const fs::path shard_path = bos_every_t_shard(16);
  Shard shard = Shard::open(shard_path.string());
  const Config cfg = cfg_with("attn.pos = \"alibi\"\n");
  LengthEvalOptions o;
  o.lengths = {2 * kT};
  o.batch_size = 3;
  o.chunk = 2 * kT;
  const auto a = evaluate_lengths(factory(cfg), shard, o);
  o.chunk = 4;
  const auto b = evaluate_lengths(factory(cfg), shard, o);
  EXPECT_EQ(a.results[0].tokens, b.results[0].tokens);
  EXPECT_NEAR(a.results[0].loss(), b.results[0].loss(), 1e-5 * a.results[0].loss());
  EXPECT_NEAR(a.results[0].beyond_loss(), b.results[0].beyond_loss(), 1e-5 * a.results[0].beyond_loss());
  fs::remove(shard_path);
}

// Same token budget at every length (the same stream prefix), positions ≥ T_train counted apart,
// buckets that add up to the total; learned positions give N/A beyond T_train, not an error.
TEST(LengthEval, BudgetBucketsAndLearnedNA) {
  const fs::path shard_path = bos_every_t_shard(40);
  Shard shard = Shard::open(shard_path.string());
  LengthEvalOptions o;
  o.lengths = {kT, 2 * kT, 4 * kT, 8 * kT};
  o.batch_size = 2;
  o.bucket = kT / 2;
  const auto rep = evaluate_lengths(factory(cfg_with("attn.pos = \"rope\"\n")), shard, o);
  EXPECT_EQ(rep.token_budget, 5u * 8 * kT);  // 640 stream tokens cut to 5 blocks of 8T
  for (const auto& r : rep.results) {
    SCOPED_TRACE(r.length);
    EXPECT_EQ(r.tokens, rep.token_budget);
    EXPECT_EQ(r.beyond_tokens, r.blocks * (size_t)(r.length - kT));
    ASSERT_EQ(r.bucket_sum.size(), (size_t)r.length / (kT / 2));
    double s = 0;
    size_t n = 0;
    for (size_t i = 0; i < r.bucket_sum.size(); ++i) s += r.bucket_sum[i], n += r.bucket_tokens[i];
    EXPECT_EQ(n, r.tokens);
    EXPECT_NEAR(s, r.loss_sum, 1e-9 * r.loss_sum);
    EXPECT_TRUE(std::isfinite(r.loss()));
  }
  const auto learned = evaluate_lengths(factory(cfg_with("attn.pos = \"learned\"\n")), shard, o);
  EXPECT_TRUE(learned.results[0].applicable);
  for (size_t i = 1; i < learned.results.size(); ++i) EXPECT_FALSE(learned.results[i].applicable);
  const auto j = length_report_json(learned);
  EXPECT_TRUE(j["lengths"][1]["loss"].is_null());
  EXPECT_NE(length_report_table(learned).find("N/A"), std::string::npos);
  fs::remove(shard_path);
}

// Memory is affine in the length: the planned bytes (KV cache + the workspace of one chunk of
// T_train tokens) satisfy P(L) = P₀ + c·L exactly, so P(8T) − P(T) = 7·(P(2T) − P(T)), and the stated
// factor: P(8T) ≤ 8·P(T) (a T×T score buffer would instead grow 64×). c is the cache:
// 2·n_layer·B·kv_heads·head_dim floats per token.
TEST(LengthEval, PlannedMemoryIsLinearInLength) {
  const fs::path shard_path = bos_every_t_shard(40);
  Shard shard = Shard::open(shard_path.string());
  LengthEvalOptions o;
  o.lengths = {kT, 2 * kT, 4 * kT, 8 * kT};
  o.batch_size = 2;
  const Config cfg = cfg_with("attn.pos = \"rope\"\n");
  const auto rep = evaluate_lengths(factory(cfg), shard, o);
  const double p1 = (double)rep.results[0].planned_bytes, p2 = (double)rep.results[1].planned_bytes,
               p8 = (double)rep.results[3].planned_bytes;
  EXPECT_EQ(p8 - p1, 7 * (p2 - p1));
  EXPECT_EQ(p2 - p1, 2.0 * cfg.model.n_layer * o.batch_size * cfg.model.d_model * kT * sizeof(float));
  EXPECT_LE(p8, 8 * p1);
  fs::remove(shard_path);
}
