// Validation loss beyond the training length (docs/mechanisms.md §8.6; docs/long-context.md).
// The shard's token stream is cut into blocks of L tokens, each read as BOS + its first L−1 tokens
// with its L tokens as the targets, so positions restart at 0 in every block. Every length scores
// the same token budget (the same stream prefix), and the evaluation runs in chunks through the
// KV-cached forward: memory is the cache (linear in L) plus one chunk's activations, never L×L.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/progress.h"
#include "data/shard.h"
#include "model/config.h"

namespace attnlab {

template <class T>
class GPT;

// "1,2,4,8" are multiples of T_train; an entry with the suffix "tok" is an absolute length in
// tokens ("1,2,3000tok"). Fractional multiples are allowed when they give a whole number of
// tokens. Errors name the entry and `source` (the option, or a grid file's line).
std::vector<int> parse_lengths(const std::string& text, int train_len, const std::string& source = "--lengths");

// Refuses, before any work, an evaluation whose KV cache at the longest of `lengths` (B sequences
// side by side) cannot fit in this machine's memory; the error starts with `what` (the option or
// grid line) and gives the figure.
void check_inference_memory(const std::string& what, const Config& cfg, const std::vector<int>& lengths, int B);

struct LengthEvalOptions {
  std::vector<int> lengths;     // absolute, in tokens (parse_lengths)
  size_t token_budget = 0;      // tokens scored per length; 0: min(2^20, the stream cut to the longest length)
  int batch_size = 8;           // blocks evaluated side by side
  int chunk = 0;                // tokens per forward chunk; 0: T_train
  int bucket = 0;               // width of the position buckets; 0: T_train
  int bos_id = 1;               // the id put in front of each block (attnlab prepare's tokenizer: 1)
  bool bf16_weights = false;    // GPT::round_weights_to_bf16 after loading (`--weights bf16`)
  ProgressFn progress;          // tokens scored over the whole sweep, after each batch; Ctrl-C stops there
};

struct LengthResult {
  int length = 0;
  bool applicable = true;       // false for learned positions beyond T_train (N/A, not an error)
  size_t blocks = 0, tokens = 0;
  double loss_sum = 0;
  size_t beyond_tokens = 0;     // targets at positions >= T_train
  double beyond_sum = 0;
  std::vector<double> bucket_sum;
  std::vector<size_t> bucket_tokens;
  size_t planned_bytes = 0;     // GPT::inference_bytes(): KV cache + one chunk's workspace
  double seconds = 0;
  double loss() const { return tokens ? loss_sum / double(tokens) : 0; }
  double beyond_loss() const { return beyond_tokens ? beyond_sum / double(beyond_tokens) : 0; }
};

struct LengthEvalReport {
  int train_len = 0;
  std::string pos;
  size_t stream_tokens = 0, token_budget = 0;
  int batch_size = 0, chunk = 0, bucket = 0, bos_id = 0;
  std::vector<LengthResult> results;
};

// Loads the checkpoint once per length (each length plans its own cache) and evaluates.
LengthEvalReport evaluate_lengths(const std::string& checkpoint, const Shard& shard, const LengthEvalOptions& opts);
// The same on a model already loaded: `make_model` returns a fresh model per length.
LengthEvalReport evaluate_lengths(const std::function<std::unique_ptr<GPT<float>>()>& make_model, const Shard& shard,
                                  const LengthEvalOptions& opts);

// docs/long-context.md: the JSON schema "attnlab-length-eval" version 1, and the readable tables.
nlohmann::json length_report_json(const LengthEvalReport& r);
std::string length_report_table(const LengthEvalReport& r);

// Peak resident set size of this process so far (getrusage), in bytes.
size_t peak_rss_bytes();

}  // namespace attnlab
