// Helpers shared by the whole-model tests (test_model, test_residual, test_dar).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "core/rng.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace attnlab::test {

inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)r.below(V);
  return t;
}

// KV-cached logits against one uncached pass (§1.1, §3.7, §7.1): plans m for (B, T), computes the
// full logits of random tokens, then feeds the same tokens through the cache in chunks of 3, 1 and
// 4 and returns the largest relative difference. T must be 8.
inline double cached_vs_uncached_rel_diff(GPT<float>& m, int B = 2, int T = 8) {
  const int V = m.config().model.vocab_size;
  m.plan(B, T);
  auto in = random_tokens((size_t)B * T, V, 9);
  std::vector<float> full((size_t)B * T * V);
  m.logits(full.data(), in.data());
  m.plan_inference(B, T, 4);
  std::vector<float> chunked((size_t)B * T * V);
  int done = 0;
  for (int len : {3, 1, 4}) {
    std::vector<int32_t> chunk;
    for (int b = 0; b < B; ++b) chunk.insert(chunk.end(), in.begin() + b * T + done, in.begin() + b * T + done + len);
    std::vector<float> out((size_t)B * len * V);
    m.forward_cached(out.data(), chunk.data(), len, false);
    for (int b = 0; b < B; ++b)
      std::copy(out.begin() + (size_t)b * len * V, out.begin() + (size_t)(b + 1) * len * V, chunked.begin() + ((size_t)b * T + done) * V);
    done += len;
  }
  return max_rel_diff(chunked, full);
}

// The analytic gradient of one parameter tensor at up to 24 entries (all of a small tensor, a
// seeded sample of distinct entries of a large one: a repeated index would undo its own
// perturbation) and central differences of `loss` there (h = 1e-5, double). The parameters are
// left as they were.
struct FdSample {
  std::vector<double> analytic;
  FdGrad numeric;
};
inline FdSample fd_sample(GPT<double>& m, const ParamSpec& s, Rng& pick, const std::function<double()>& loss) {
  std::vector<size_t> idx;
  if (s.numel <= 24) {
    for (size_t i = 0; i < s.numel; ++i) idx.push_back(i);
  } else {
    while (idx.size() < 24) {
      const size_t i = pick.below(s.numel);
      if (std::find(idx.begin(), idx.end(), i) == idx.end()) idx.push_back(i);
    }
  }
  std::vector<double> x(idx.size());
  FdSample out;
  out.analytic.resize(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    x[k] = m.params()[s.offset + idx[k]];
    out.analytic[k] = m.grads()[s.offset + idx[k]];
  }
  out.numeric = numeric_grad(x, [&]() {
    for (size_t k = 0; k < idx.size(); ++k) m.params()[s.offset + idx[k]] = x[k];
    return loss();
  }, 1e-5);
  for (size_t k = 0; k < idx.size(); ++k) m.params()[s.offset + idx[k]] = x[k];
  return out;
}

// Checkpoints (tests/test_train.cpp's pattern): for each model `extra`, 6 steps in one run equal 3
// steps, a checkpoint and 3 resumed steps to the bit (losses and the final validation loss), on
// learnable synthetic shards (vocabulary 50) written under a fresh temporary directory.
inline void expect_exact_resume(const std::string& tag, const std::vector<std::string>& extras) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attnlab_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Rng r(1);
  for (const char* name : {"train.bin", "val.bin"}) {
    std::vector<uint16_t> toks(name[0] == 't' ? 8000 : 2000);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = (uint16_t)(r.uniform() < 0.9 ? (i * 7) % 50 : r.below(50));
    write_shard((dir / name).string(), toks.data(), toks.size());
  }
  int variant = 0;
  for (const std::string& extra : extras) {
    ++variant;  // each variant trains in directories of its own (a fresh run refuses another run's checkpoints)
    auto cfg_for = [&](const std::string& name) {
      const std::string run = name + std::to_string(variant);
      return resolve_config(parse_config_text(
          std::string("model.n_layer = 2\nmodel.d_model = 32\nmodel.n_head = 4\nmodel.seq_len = 16\nmodel.vocab_size = 50\n"
                      "train.batch_size = 4\ntrain.steps = 6\ntrain.warmup = 2\ntrain.lr = 3e-3\ntrain.eval_every = 0\n"
                      "train.eval_batches = 2\ndata.dir = \"") + dir.string() + "\"\ntrain.out_dir = \"" + (dir / run).string() + "\"\n" + extra,
          "test"));
    };
    TrainOptions quiet;
    quiet.quiet = true;
    const TrainSummary full = train(cfg_for("full"), quiet);
    TrainOptions first = quiet;
    first.stop_after = 3;
    const TrainSummary a = train(cfg_for("split"), first);
    TrainOptions second = quiet;
    second.resume = a.checkpoint;
    const TrainSummary b = train(cfg_for("split"), second);
    ASSERT_EQ(a.losses.size() + b.losses.size(), full.losses.size()) << extra;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b.losses[i], full.losses[3 + i]) << extra << " step " << 3 + i;
    EXPECT_EQ(b.val_loss, full.val_loss) << extra;
    EXPECT_LT(full.losses.back(), full.losses.front()) << extra;
  }
  fs::remove_all(dir);
}

}  // namespace attnlab::test
