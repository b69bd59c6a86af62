// attnlab::api::Model (include/attnlab/model.h): a GPT<float> and its inference plan.
// GPT plans its inference workspace and KV cache once (plan_inference); a call of another shape
// gets a new GPT of the same configuration with the weights copied over, planned for that shape.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "api/internal.h"
#include "attnlab/model.h"
#include "core/bandwidth.h"
#include "core/denormals.h"
#include "core/error.h"
#include "core/stop_signals.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "experiment/sampling.h"
#include "model/gpt.h"
#include "checkpoint/checkpoint.h"

namespace attnlab::api {

struct Model::Impl {
  std::unique_ptr<GPT<float>> gpt;
  // 0: no inference plan yet; -1: the weights changed after planning (a new plan is due).
  int planned_B = 0, planned_capacity = 0, planned_chunk = 0;
  bool bf16 = false;                // Weights::bf16: round_weights_to_bf16 before every plan
  std::string origin = "Model::generate";  // names the model in generate's errors

  // The model ready for B rows, `capacity` cached positions, chunks of up to `chunk` tokens, with
  // an empty cache.
  GPT<float>& inference(int B, int capacity, int chunk) {
    if (planned_B <= 0 || B != planned_B || capacity > planned_capacity || chunk > planned_chunk) {
      const bool fresh = planned_B == 0;
      auto planned = fresh ? std::move(gpt) : std::make_unique<GPT<float>>(gpt->config());
      if (!fresh) {
        std::memcpy(planned->params(), gpt->params(), gpt->registry().total() * sizeof(float));
        // (The weights are rounded already; rounding again is exact and makes the bf16 copies,
        // which the plan must see.)
        if (bf16) planned->round_weights_to_bf16();
      }
      planned->plan_inference(B, capacity, chunk);
      gpt = std::move(planned);
      planned_B = B;
      planned_capacity = capacity;
      planned_chunk = chunk;
    }
    gpt->reset_cache();
    return *gpt;
  }

  void check_tokens(const std::vector<int32_t>& tokens, const char* what) const {
    const int V = gpt->config().model.vocab_size;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= V)
        fail(what, ": id ", tokens[i], " at position ", i, " is outside the vocabulary [0, ", V, ")");
  }
  void check_shape(size_t n, int B, int T, const char* what) const {
    if (B < 1 || T < 1) fail(what, ": B = ", B, " and T = ", T, " must be positive");
    if (n != (size_t)B * T) fail(what, ": ", n, " ids, but B·T = ", B, "·", T, " = ", (size_t)B * T);
    // (Worded as the cached forward's own check, which `attnlab forward` reported before the API.)
    if (gpt->config().attn.pos == "learned" && T > gpt->config().model.seq_len)
      fail("learned positions are undefined beyond model.seq_len = ", gpt->config().model.seq_len, " (asked for position ",
           T - 1, ")");
  }
};

SamplingParams default_sampling_params() { return SamplingParams{}; }

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

void set_verify_checksums(bool verify) { set_verify_checkpoint_checksums(verify); }

Model Model::create(const Config& config, uint64_t seed) {
  auto impl = std::make_unique<Impl>();
  impl->gpt = std::make_unique<GPT<float>>(resolve(config));
  ScopedFlushDenormals flush;
  impl->gpt->init_weights(seed);
  return Model(std::move(impl));
}

std::unique_ptr<GPT<float>> load_model(const std::string& checkpoint, Weights weights) {
  auto model = std::make_unique<GPT<float>>(read_checkpoint_config(checkpoint));
  load_checkpoint(checkpoint, *model, nullptr, nullptr);
  if (weights == Weights::bf16) {
    ScopedFlushDenormals flush;  // (the rounding as the CLI has always done it, FTZ/DAZ set)
    model->round_weights_to_bf16();
  }
  return model;
}

Model Model::load(const std::string& path, Weights weights) {
  auto impl = std::make_unique<Impl>();
  impl->gpt = load_model(path, weights);
  impl->bf16 = weights == Weights::bf16;
  impl->origin = "checkpoint " + path;
  return Model(std::move(impl));
}

void Model::save(const std::string& path) const {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  save_checkpoint(path, *impl_->gpt, nullptr, nullptr, TrainingState{});
}

std::vector<float> Model::forward(const std::vector<int32_t>& tokens, int B, int T) {
  impl_->check_shape(tokens.size(), B, T, "Model::forward");
  impl_->check_tokens(tokens, "Model::forward");
  ScopedFlushDenormals flush;
  // One chunk through the cached path: exactly the uncached computation (tests/test_model.cpp).
  GPT<float>& gpt = impl_->inference(B, T, T);
  std::vector<float> logits((size_t)B * T * gpt.config().model.vocab_size);
  gpt.forward_cached(logits.data(), tokens.data(), T, false);
  return logits;
}

double Model::loss(const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int B, int T) {
  impl_->check_shape(inputs.size(), B, T, "Model::loss inputs");
  impl_->check_shape(targets.size(), B, T, "Model::loss targets");
  impl_->check_tokens(inputs, "Model::loss inputs");
  const int V = vocab_size();
  size_t valid = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] >= V) fail("Model::loss targets: id ", targets[i], " at position ", i, " is outside the vocabulary [0, ", V, ")");
    valid += targets[i] >= 0;
  }
  if (valid == 0) fail("Model::loss: every target is negative (ignored); nothing to score");
  ScopedFlushDenormals flush;
  GPT<float>& gpt = impl_->inference(B, T, T);
  std::vector<float> losses((size_t)B * T);
  const double sum = gpt.forward_cached_loss(inputs.data(), targets.data(), T, losses.data());
  return sum / (double)valid;
}

std::vector<int32_t> Model::generate(const std::vector<int32_t>& prompt, int n, const SamplingParams& params) {
  return generate(prompt, n, params, nullptr).ids;
}

Generation Model::generate(const std::vector<int32_t>& prompt, int n, const SamplingParams& params,
                           const std::function<bool(int32_t id)>& on_token) {
  if (prompt.empty()) fail("Model::generate: the prompt is empty (give at least one id, e.g. the tokenizer's BOS)");
  if (n < 0) fail("Model::generate: n = ", n, " must be >= 0");
  if (!std::isfinite(params.temperature) || params.temperature < 0)
    fail("SamplingParams::temperature ", params.temperature, ": must be a finite number >= 0 (0 = greedy)");
  if (params.top_k < 0) fail("SamplingParams::top_k ", params.top_k, ": must be >= 0 (0 = all ids)");
  impl_->check_tokens(prompt, "Model::generate prompt");
  const attnlab::Config& cfg = impl_->gpt->config();
  const int V = cfg.model.vocab_size;
  if (params.vocab_limit < 0 || params.vocab_limit > V)
    fail("SamplingParams::vocab_limit ", params.vocab_limit, ": must be in [0, vocab_size = ", V, "]");
  const int prompt_len = (int)prompt.size();
  if (cfg.attn.pos == "learned" && prompt_len + n > cfg.model.seq_len)
    fail("Model::generate: ", prompt_len, " prompt ids + n = ", n, " exceed model.seq_len = ", cfg.model.seq_len,
         ": learned positions are undefined beyond it");
  ScopedFlushDenormals flush;
  // The prompt in one chunk, then one id at a time (`attnlab sample` runs exactly this).
  GPT<float>& gpt = impl_->inference(1, prompt_len + n, prompt_len);
  std::vector<float> logits(V);
  std::vector<int> order(V);
  const int draw_vocab = params.vocab_limit > 0 ? params.vocab_limit : V;
  Rng rng(params.seed);
  Generation g;
  g.prompt_tokens = prompt_len;
  g.ids.reserve((size_t)prompt_len + n);
  g.ids = prompt;
  Timer prefill_timer;
  gpt.forward_cached(logits.data(), prompt.data(), prompt_len, true);
  g.prefill_seconds = prefill_timer.seconds();
  Timer decode_timer;
  // A streamed generation can be long (-n 1000000): Ctrl-C ends it after the current id, the ids
  // so far returned (Generation::interrupted). Not for the plain overload, which streams nothing.
  std::unique_ptr<StopSignals> signals;
  if (on_token) signals = std::make_unique<StopSignals>();
  for (int i = 0; i < n; ++i) {
    for (int v = 0; v < V; ++v)
      if (!std::isfinite(logits[v]))
        fail(impl_->origin, ": the model gives a non-finite logit (", logits[v], " for id ", v, " at generated token ", i,
             "); its weights are damaged or the run diverged");
    int32_t next = sample_token(logits, draw_vocab, order, params.temperature, params.top_k, rng);
    g.ids.push_back(next);
    ++g.generated;
    if (on_token && !on_token(next)) break;
    if (signals && stop_requested()) {
      g.interrupted = true;
      break;
    }
    if (i + 1 < n) gpt.forward_cached(logits.data(), &next, 1, true);
  }
  g.decode_seconds = decode_timer.seconds();
  return g;
}

DecodeBound Model::decode_bound(int prompt_tokens, int generated) const {
  if (prompt_tokens < 1 || generated < 2)
    fail("Model::decode_bound: ", prompt_tokens, " prompt ids and ", generated, " generated: a decode step needs a prompt and 2 generated ids");
  DecodeBound b;
  b.mean_context = prompt_tokens + (generated - 1) / 2.0;
  const auto db = impl_->gpt->decode_bytes(b.mean_context);
  b.weight_bytes = db.weights;
  b.kv_cache_bytes = db.kv_cache;
  const double bytes = db.weights + db.kv_cache;
  const ReadBandwidth bw = read_bandwidth((size_t)bytes, omp_threads());
  b.read_gb_per_s = bw.gb_per_s;
  b.read_set_bytes = bw.bytes;
  b.read_threads = bw.threads;
  b.read_source = bw.source;
  b.ms_per_token = bytes / (bw.gb_per_s * 1e9) * 1e3;
  constexpr size_t kDramSet = size_t(256) << 20;
  if (bytes < double(kDramSet) && std::strcmp(bw.source, "measured") == 0) {
    const ReadBandwidth dram = read_bandwidth(kDramSet, omp_threads());
    b.dram_measured = true;
    b.dram_gb_per_s = dram.gb_per_s;
    b.dram_set_bytes = dram.bytes;
    b.dram_ms_per_token = bytes / (dram.gb_per_s * 1e9) * 1e3;
  }
  return b;
}

size_t Model::num_params() const { return impl_->gpt->num_params(); }
int Model::vocab_size() const { return impl_->gpt->config().model.vocab_size; }
Config Model::config() const { return from_resolved(impl_->gpt->config(), "the model's configuration"); }

}  // namespace attnlab::api
