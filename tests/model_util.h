// Helpers shared by the whole-model tests (test_model, test_residual, test_dar).
#pragma once
#include <cstdint>
#include <vector>

#include "check.h"
#include "core/rng.h"
#include "model/gpt.h"

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

}  // namespace attnlab::test
