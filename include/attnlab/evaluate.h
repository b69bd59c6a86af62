// attnlab public API: scoring a checkpoint on token data — validation loss (`attnlab eval`), the
// length sweep beyond the training length (`attnlab eval --lengths`, docs/long-context.md), logits
// as a NumPy file (`attnlab forward`) and every gradient (`attnlab grads`).
//
//   api::EvalResult r = api::evaluate("runs/default/model.safetensors", "data/val.bin");
//   std::printf("loss %.4f, perplexity %.3f\n", r.loss, r.perplexity);
//   api::LengthSweepParams p = api::default_length_sweep_params();
//   p.lengths = "1,2,4,8";      // multiples of model.seq_len, or tokens: "1,3000tok"
//   api::LengthSweep s = api::evaluate_lengths(checkpoint, "data/val.bin", p);
//   api::write_json_report("lengths.json", s.json);
//
// Each function loads its own model from the checkpoint. Errors (attnlab::Error) name the file, and
// a parameter by the `attnlab eval` option it stands for (--seq-len for EvalParams::seq_len).
// Thread-safety: the functions share nothing; distinct calls may run on distinct threads at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnlab/error.h"
#include "attnlab/progress.h"
#include "attnlab/model.h"

namespace attnlab::api {

struct EvalParams {
  int seq_len = 0;      // tokens per window; 0: model.seq_len (longer needs a positional scheme that extrapolates)
  int batch_size = 8;   // windows per forward
  int batches = 0;      // at most this many batches; 0: every window of the shard
  Weights weights = Weights::fp32;
};
EvalParams default_eval_params();

struct EvalResult {
  int seq_len = 0;      // the window length used
  size_t tokens = 0;    // targets scored
  double loss = 0;      // mean cross-entropy (nats per token)
  double perplexity = 0;  // exp(loss)
};

// Mean loss of the checkpoint over consecutive windows of seq_len + 1 tokens of a token shard
// (`attnlab prepare`'s val.bin), each window once, in order: deterministic.
EvalResult evaluate(const std::string& checkpoint, const std::string& shard, const EvalParams& params = default_eval_params());

// docs/mechanisms.md §8.6: the shard's token stream cut into blocks of each length L, each read as
// BOS + its first L − 1 tokens; every length scores the same token budget, through the KV-cached
// forward in chunks (memory: the cache plus one chunk's activations).
struct LengthSweepParams {
  std::string lengths = "1,2,4,8";  // comma-separated: multiples of model.seq_len, or N tok (3000tok)
  size_t tokens = 0;    // tokens scored per length; 0: min(2^20, what the shard holds)
  int batch_size = 8;   // blocks side by side
  int chunk = 0;        // tokens per cached forward chunk; 0: model.seq_len
  int bucket = 0;       // width of the position buckets; 0: model.seq_len
  int bos = 1;          // the id put in front of each block (`attnlab prepare`'s BOS)
  Weights weights = Weights::fp32;
  ProgressCallback on_progress;  // after each batch of blocks (attnlab/progress.h); Ctrl-C: Interrupted
};
LengthSweepParams default_length_sweep_params();

struct LengthSweepRow {
  int length = 0;
  bool applicable = true;     // false: learned positions beyond model.seq_len (N/A, not an error)
  size_t blocks = 0, tokens = 0;
  double loss = 0;            // mean over the length's tokens
  size_t tokens_beyond_train = 0;
  double loss_beyond_train = 0;  // mean over targets at positions >= model.seq_len (0 when none)
  std::vector<size_t> bucket_tokens;
  std::vector<double> bucket_loss;  // mean per position bucket (0 where a bucket has no tokens)
  size_t planned_bytes = 0;   // the KV cache and one chunk's workspace
  double seconds = 0;
};

struct LengthSweep {
  int train_len = 0;          // model.seq_len
  std::vector<LengthSweepRow> rows;
  std::string table;          // the readable tables `attnlab eval --lengths` prints
  std::string json;           // the report, schema "attnlab-length-eval" version 1 (docs/long-context.md)
};

LengthSweep evaluate_lengths(const std::string& checkpoint, const std::string& shard,
                             const LengthSweepParams& params = default_length_sweep_params());

// Writes a JSON report (LengthSweep::json, TaskEvalResult::json) to `path` atomically, with a final newline.
void write_json_report(const std::string& path, const std::string& json);

// Writes logits (B, T, V) row-major as a NumPy .npy file (float32, format 1.0), atomically.
void write_logits_npy(const std::string& path, const std::vector<float>& logits, int B, int T, int V);

// For the PyTorch reference test (`attnlab grads`): the mean loss of the sequences of a token file
// (read_token_file; each of T + 1 ids: inputs its first T, targets its last T), and the gradient of
// every parameter, written to `out` as safetensors: "loss" [1], "logits" [B, T, V] and
// "grad.<parameter>" in the parameter's shape, with the configuration as metadata. Returns the loss.
double write_gradients(const std::string& checkpoint, const std::string& token_file, const std::string& out);

}  // namespace attnlab::api
