// attnlab public API: a model in memory, from a configuration or a checkpoint.
//
//   auto model = attnlab::api::Model::create(cfg, /*seed=*/1);
//   std::vector<float> logits = model.forward(tokens, B, T);   // (B, T, V), row-major
//   model.save("model.safetensors");
//   auto again = attnlab::api::Model::load("model.safetensors");
//   std::vector<int32_t> ids = again.generate(prompt, 20, params);
//
// Token ids are int32 in [0, vocab_size). Sequences may be longer than model.seq_len except with
// learned positions (attn.pos = learned). Forward, loss and generate run the cached inference path
// (a KV cache planned for the shape of the call; re-planned when a call needs a different shape).
// Thread-safety: one Model per thread. Distinct Models may run on distinct threads at once (the
// library's shared pieces, such as the GEMM's primitive cache, are per thread); one Model must not
// be used by two threads at a time, not even for const-looking calls (they reuse its workspace).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/error.h"

namespace attnlab::api {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (the argmax); otherwise softmax(logits / temperature)
  int top_k = 0;             // draw among the k most likely ids; 0: all
  uint64_t seed = 0;         // the generator's seed: the same seed, prompt and model give the same ids
  int vocab_limit = 0;       // draw among ids < vocab_limit only (a tokenizer smaller than the model); 0: all
};
SamplingParams default_sampling_params();

class Model {
 public:
  // A freshly initialised model (GPT-2 init, docs/mechanisms.md §1.4) of a configuration.
  static Model create(const Config& config, uint64_t seed);
  // The weights of a safetensors checkpoint written by attnlab (train, init, save); the stored
  // configuration comes with it. Every tensor is checked (name, shape, finite values).
  static Model load(const std::string& path);
  // Writes the weights and the configuration (no optimizer state) atomically to `path`.
  void save(const std::string& path) const;

  // Logits (B, T, V) of B sequences of T tokens, `tokens` (B, T) row-major.
  std::vector<float> forward(const std::vector<int32_t>& tokens, int B, int T);
  // Mean cross-entropy of predicting `targets` (B, T) from `inputs` (B, T); a negative target is ignored.
  double loss(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int B, int T);
  // The prompt followed by n generated ids (the KV cache holds the prompt once, then one id per step).
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int n,
                                const SamplingParams& params = default_sampling_params());

  size_t num_params() const;
  int vocab_size() const;
  Config config() const;  // the resolved configuration, as assignments

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  struct Impl;

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab::api
