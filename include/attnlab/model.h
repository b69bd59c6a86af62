// attnlab public API: a model in memory, from a configuration or a checkpoint.
//
//   auto model = attnlab::api::Model::create(cfg, /*seed=*/1);
//   std::vector<float> logits = model.forward(tokens, B, T);   // (B, T, V), row-major
//   model.save("model.safetensors");
//   auto again = attnlab::api::Model::load("model.safetensors");
//   std::vector<int32_t> ids = again.generate(prompt, 20, params);
//   again.generate(prompt, 20, params, [](int32_t id) { show(id); return true; });  // streamed
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
#include <functional>
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

// The weights a loaded model computes with (`attnlab sample|eval|forward --weights`).
enum class Weights {
  fp32,  // as trained
  // The matrices of the linear layers and the tied embedding rounded to bf16 (to nearest even):
  // every forward multiplies by the rounded values, and decoding reads bf16 copies of them, half
  // the bytes. Norms, biases, the activations and the KV cache stay fp32. For inference (save()
  // writes the rounded values).
  bf16,
};

// A generation's ids and timing (Model::generate with a callback).
struct Generation {
  std::vector<int32_t> ids;     // the prompt followed by the generated ids
  int prompt_tokens = 0;
  int generated = 0;            // ids generated (n, or fewer when the callback stopped it)
  double prefill_seconds = 0;   // the prompt's one cached forward
  double decode_seconds = 0;    // the generated − 1 single-id forwards, with sampling and the callbacks
  bool interrupted = false;     // stopped by Ctrl-C / SIGTERM (streaming generate only): `ids` are those drawn so far
};

// The bandwidth bound of decoding (docs/performance.md, "Decode"): the bytes one decode step must
// read (the weights, and the KV cache at the mean context of the decoded ids) at this machine's
// measured read rate for a working set of that size. Measuring takes about 0.2–0.5 s (twice that
// when the DRAM rate is measured too); ATTNLAB_READ_GBPS replaces the measurement.
struct DecodeBound {
  double mean_context = 0;      // cached positions, averaged over the decode steps
  double weight_bytes = 0, kv_cache_bytes = 0;  // read per decode step
  double read_gb_per_s = 0;     // 1e9 bytes per second, over read_threads threads
  size_t read_set_bytes = 0;    // the working set that rate was measured over (the bytes read per step)
  int read_threads = 0;
  std::string read_source;      // "measured" or "ATTNLAB_READ_GBPS"
  double ms_per_token = 0;      // the bound: (weight_bytes + kv_cache_bytes) at read_gb_per_s
  // A working set of the decoder's size may be served largely by the last-level cache, which the
  // decoder need not get: when it is under 256 MB and the rate was measured, the rate over a set
  // far beyond any cache too.
  bool dram_measured = false;
  double dram_gb_per_s = 0, dram_ms_per_token = 0;
  size_t dram_set_bytes = 0;
};

// Whether loading a checkpoint (Model::load, evaluate, analyze, tasks, compare, train --resume)
// verifies each tensor against the xxHash64 checksum stored with it (docs/checkpoint-format.md):
// on by default, a mismatch is an Error naming the file and the tensor. Process-wide; off skips
// the hashing (about one pass over the file's bytes) for speed. `attnlab ... --skip-checksums`.
void set_verify_checksums(bool verify);

class Model {
 public:
  // A freshly initialised model (GPT-2 init, docs/mechanisms.md §1.4) of a configuration.
  static Model create(const Config& config, uint64_t seed);
  // The weights of a safetensors checkpoint written by attnlab (train, init, save); the stored
  // configuration comes with it. Every tensor is checked (name, shape, finite values).
  static Model load(const std::string& path, Weights weights = Weights::fp32);
  // Writes the weights and the configuration (no optimizer state) atomically to `path`.
  void save(const std::string& path) const;

  // Logits (B, T, V) of B sequences of T tokens, `tokens` (B, T) row-major.
  std::vector<float> forward(const std::vector<int32_t>& tokens, int B, int T);
  // Mean cross-entropy of predicting `targets` (B, T) from `inputs` (B, T); a negative target is ignored.
  double loss(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int B, int T);
  // The prompt followed by n generated ids (the KV cache holds the prompt once, then one id per step).
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int n,
                                const SamplingParams& params = default_sampling_params());
  // The same ids, each passed to on_token as soon as it is drawn (before the next forward);
  // on_token returning false stops the generation after that id. An empty on_token streams nothing.
  Generation generate(const std::vector<int32_t>& prompt, int n, const SamplingParams& params,
                      const std::function<bool(int32_t id)>& on_token);
  // The decode bound of a generation of `generated` ids after `prompt_tokens` (its generated − 1
  // decode steps), for this model's weights (fp32 or bf16). Measures the machine (see DecodeBound).
  DecodeBound decode_bound(int prompt_tokens, int generated) const;

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
