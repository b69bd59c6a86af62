// `attnlab eval`, `attnlab forward`, `attnlab sample` and `attnlab grads` (the PyTorch reference test's input).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include <omp.h>

#include "cli/common.h"
#include "cli/plots.h"
#include "core/bandwidth.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/files.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "experiment/long_context.h"
#include "experiment/npy.h"
#include "experiment/sampling.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "train/trainer.h"

namespace attnlab::cli {
namespace {

// Prompt plus generated tokens at most (the KV cache grows with them): 1M.
constexpr int kMaxSampleTokens = 1 << 20;

bool is_token_shard(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return f && magic == kShardMagic;
}

// `--weights`: fp32 (as trained) or bf16 (the matrices rounded, decoding reads half the bytes).
const std::vector<std::string> kWeightFormats = {"fp32", "bf16"};

std::unique_ptr<GPT<float>> load_model(const std::string& path, const std::string& weights = "fp32") {
  const Config cfg = read_checkpoint_config(path);
  auto model = std::make_unique<GPT<float>>(cfg);
  load_checkpoint(path, *model, nullptr, nullptr);
  if (weights == "bf16") model->round_weights_to_bf16();
  return model;
}

void add_weights_option(CLI::App* cmd, std::string& weights) {
  cmd->add_option("--weights", weights,
                  "fp32 (default), or bf16: the linear layers' and the embedding's matrices rounded to bf16, "
                  "which decoding reads in half the bytes (activations, norms and the KV cache stay fp32)")
      ->check(CLI::IsMember(kWeightFormats));
}

struct EvalArgs {
  std::string checkpoint, data;
  int seq_len = 0, batch_size = 8, batches = 0;
  // length extrapolation (docs/long-context.md)
  std::string lengths, json, plot_script;
  bool no_plots = false;
  size_t tokens = 0;
  int chunk = 0, bucket = 0, bos = 1;
  std::string weights = "fp32";
};
struct ForwardArgs { std::string checkpoint, tokens, out, weights = "fp32"; int max_tokens = 0; };
struct SampleArgs {
  std::string checkpoint, prompt, tokenizer, weights = "fp32";
  int n = 100, top_k = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool quiet = false;  // no speed line on stderr
};
struct GradsArgs { std::string checkpoint, tokens, out; };

void run_length_eval(const EvalArgs& a) {
  if (a.seq_len > 0 || a.batches > 0) fail("--lengths replaces --seq-len and --batches (use --tokens for the budget)");
  const Config cfg = read_checkpoint_config(a.checkpoint);
  LengthEvalOptions o;
  o.lengths = parse_lengths(a.lengths, cfg.model.seq_len);
  o.token_budget = a.tokens;
  o.batch_size = a.batch_size;
  o.chunk = a.chunk;
  o.bucket = a.bucket;
  o.bos_id = a.bos;
  o.bf16_weights = a.weights == "bf16";
  Shard shard = Shard::open(a.data);
  const LengthEvalReport rep = evaluate_lengths(a.checkpoint, shard, o);
  std::printf("eval %s on %s\n%s", a.checkpoint.c_str(), a.data.c_str(), length_report_table(rep).c_str());
  if (!a.json.empty()) {
    data_files::write_file_atomically(a.json, {length_report_json(rep).dump(2), "\n"}, "JSON report");
    std::printf("wrote %s\n", a.json.c_str());
    // the PNG next to the JSON (F.json -> F.png), scripts/plot_long_context.py
    if (!a.no_plots) run_plot_script("plot_long_context.py", a.plot_script, {a.json});
  }
}

void run_eval(const EvalArgs& a) {
  if (!a.lengths.empty()) return run_length_eval(a);
  if (!a.json.empty() || a.tokens || a.chunk || a.bucket) fail("--json, --tokens, --chunk and --bucket need --lengths");
  if (a.no_plots || !a.plot_script.empty()) fail("--no-plots and --plot-script need --lengths and --json");
  if (a.seq_len < 0) fail("--seq-len ", a.seq_len, ": must be positive (or 0 for model.seq_len)");
  if (a.batches < 0) fail("--batches ", a.batches, ": must be positive (or 0 for the whole shard)");
  // The cheap checks first: the shard and the checkpoint's configuration, before any memory is planned.
  Shard shard = Shard::open(a.data);
  const Config cfg = read_checkpoint_config(a.checkpoint);
  const int T = a.seq_len > 0 ? a.seq_len : cfg.model.seq_len;
  if (shard.size() < (size_t)T + 1)
    fail("data ", a.data, " has ", shard.size(), " tokens, fewer than --seq-len + 1 = ", T + 1, "; use a shorter --seq-len");
  shard.validate_vocab(cfg.model.vocab_size);
  if (T > cfg.model.seq_len && cfg.attn.pos == "learned")
    fail("--seq-len ", T, " exceeds model.seq_len = ", cfg.model.seq_len, " of ", a.checkpoint,
         ": learned positions are undefined beyond it");
  auto model = load_model(a.checkpoint, a.weights);
  model->plan(a.batch_size, T);
  const EvalResult r = evaluate(*model, shard, a.batches);
  std::printf("eval %s on %s: seq_len %d, %zu tokens, loss %.4f, perplexity %.3f\n", a.checkpoint.c_str(), a.data.c_str(), T,
              r.count, r.mean(), std::exp(r.mean()));
}

void run_forward(const ForwardArgs& a) {
  const Config cfg = read_checkpoint_config(a.checkpoint);
  // Attention over one sequence costs O(T²) time: without --max-tokens, sequences are limited to
  // the length the model was trained on.
  if (a.max_tokens < 0) fail("--max-tokens ", a.max_tokens, ": must be positive");
  const int limit = a.max_tokens > 0 ? a.max_tokens : cfg.model.seq_len;
  auto seqs = read_token_file(a.tokens);
  if (seqs.size() == 1 && seqs[0].size() > (size_t)limit && is_token_shard(a.tokens)) {
    std::fprintf(stderr, "note: %s holds %zu tokens; using the first %d (%s)\n", a.tokens.c_str(), seqs[0].size(), limit,
                 a.max_tokens > 0 ? "--max-tokens" : "model.seq_len; raise with --max-tokens");
    seqs[0].resize((size_t)limit);
  }
  if (seqs[0].size() > (size_t)limit)
    fail("token file ", a.tokens, ": sequences of ", seqs[0].size(), " ids are longer than ",
         a.max_tokens > 0 ? "--max-tokens = " : "model.seq_len = ", limit, a.max_tokens > 0 ? "" : "; pass --max-tokens N to allow longer ones");
  if ((double)seqs.size() * (double)seqs[0].size() * cfg.model.vocab_size * 4.0 > 64e9)
    fail("token file ", a.tokens, ": ", seqs.size(), " x ", seqs[0].size(), " logits of ", cfg.model.vocab_size,
         " would take more than 64 GB; give fewer or shorter sequences");
  auto model = load_model(a.checkpoint, a.weights);
  const int B = (int)seqs.size(), T = (int)seqs[0].size(), V = model->config().model.vocab_size;
  std::vector<int32_t> in;
  for (const auto& s : seqs) in.insert(in.end(), s.begin(), s.end());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] >= V) fail("token file ", a.tokens, ": id ", in[i], " at position ", i, " is outside the vocabulary of ", V);
  // One chunk through the cached path: exactly the uncached computation (a test checks), and it
  // handles any length the positional scheme allows.
  model->plan_inference(B, T, T);
  std::vector<float> logits((size_t)B * T * V);
  model->forward_cached(logits.data(), in.data(), T, false);
  write_npy_f32(a.out, logits.data(), {B, T, V});
  std::printf("wrote %s: logits [%d, %d, %d]\n", a.out.c_str(), B, T, V);
}

void run_sample(const SampleArgs& a) {
  // The options first, each error naming the option.
  if (!std::isfinite(a.temperature) || a.temperature < 0)
    fail("--temperature ", a.temperature, ": must be a finite number >= 0 (0 = greedy)");
  if (a.top_k < 0) fail("--top-k ", a.top_k, ": must be >= 0 (0 = all tokens)");
  if (a.n < 0 || a.n > kMaxSampleTokens) fail("-n ", a.n, ": must be in [0, ", kMaxSampleTokens, "]");
  auto model = load_model(a.checkpoint, a.weights);
  const Config& cfg = model->config();
  const std::string tok_path = a.tokenizer.empty() ? cfg.data.tokenizer : a.tokenizer;
  Tokenizer tok = Tokenizer::load(tok_path);
  if (tok.vocab_size() > cfg.model.vocab_size)
    fail("tokenizer ", tok_path, " has ", tok.vocab_size(), " tokens but the model's vocabulary is ", cfg.model.vocab_size);
  std::vector<int> ids = tok.encode(a.prompt);
  if (ids.empty()) {
    if (tok.bos_id() < 0) fail("--prompt is empty and the tokenizer has no BOS token to start from");
    ids.push_back(tok.bos_id());
  }
  int n = a.n;
  const int prompt_len = (int)ids.size();
  if (prompt_len > kMaxSampleTokens) fail("--prompt: ", prompt_len, " tokens, more than ", kMaxSampleTokens);
  if (cfg.attn.pos == "learned" && prompt_len + n > cfg.model.seq_len) {
    if (prompt_len >= cfg.model.seq_len)
      fail("the prompt has ", prompt_len, " tokens; learned positions allow at most model.seq_len = ", cfg.model.seq_len);
    n = cfg.model.seq_len - prompt_len;
    std::fprintf(stderr, "note: learned positions end at model.seq_len = %d; generating %d tokens\n", cfg.model.seq_len, n);
  }
  model->plan_inference(1, prompt_len + n, std::max(prompt_len, 1));
  const int V = cfg.model.vocab_size, tok_vocab = std::min(V, tok.vocab_size());
  std::vector<float> logits(V);
  std::vector<int> order(V);
  std::vector<int32_t> in(ids.begin(), ids.end());
  Rng rng(a.seed);
  Timer prefill_timer;
  model->forward_cached(logits.data(), in.data(), prompt_len, true);
  const double prefill_s = prefill_timer.seconds();
  std::vector<int> out = ids;
  Timer decode_timer;
  for (int i = 0; i < n; ++i) {
    for (int v = 0; v < V; ++v)
      if (!std::isfinite(logits[v]))
        fail("checkpoint ", a.checkpoint, ": the model gives a non-finite logit (", logits[v], " for id ", v,
             " at generated token ", i, "); its weights are damaged or the run diverged");
    // (Among the tokenizer's ids: a model vocabulary larger than the tokenizer's has rows no text can decode.)
    int32_t next = sample_token(logits, tok_vocab, order, a.temperature, a.top_k, rng);
    out.push_back(next);
    if (i + 1 < n) model->forward_cached(logits.data(), &next, 1, true);
  }
  const double decode_s = decode_timer.seconds();
  std::printf("%s\n", tok.decode(out).c_str());
  // Speed on stderr (stdout is the text): prefill = the prompt in one cached forward; decode = the
  // n − 1 single-token forwards plus sampling.
  if (!a.quiet) {
    std::fprintf(stderr, "prefill: %d tokens in %.1f ms (%.0f tokens/s)", prompt_len, prefill_s * 1e3, prompt_len / std::max(prefill_s, 1e-9));
    if (n > 1)
      std::fprintf(stderr, "; decode: %d tokens in %.1f ms (%.0f tokens/s, %.2f ms/token)", n - 1, decode_s * 1e3,
                   (n - 1) / std::max(decode_s, 1e-9), decode_s * 1e3 / (n - 1));
    std::fprintf(stderr, "\n");
    if (n > 1) {
      // The bandwidth bound: the bytes one decode step must read (weights and the cache at the mean
      // context of the decoded tokens) at the machine's read rate for a working set of that size.
      const double mean_context = prompt_len + (n - 1) / 2.0;
      const auto db = model->decode_bytes(mean_context);
      const double bytes = db.weights + db.kv_cache;
      const ReadBandwidth bw = read_bandwidth((size_t)bytes, omp_get_max_threads());
      const double bound_ms = bytes / (bw.gb_per_s * 1e9) * 1e3, ms = decode_s * 1e3 / (n - 1);
      std::fprintf(stderr,
                   "decode bound: %.2f MB read per token (weights %.2f, KV cache %.2f at mean context %.0f) at %.1f GB/s "
                   "(%s, %d threads, %.1f MB working set) = %.3f ms/token; decode ran at %.0f%% of it\n",
                   bytes / 1e6, db.weights / 1e6, db.kv_cache / 1e6, mean_context, bw.gb_per_s, bw.source, bw.threads,
                   bw.bytes / 1e6, bound_ms, 100.0 * bound_ms / ms);
      // A working set of the decoder's size, re-read back to back, may be served largely by the
      // last-level cache, which the decoder itself (with its activations and everything else the
      // machine runs) need not get: beside that bound, the rate for a set far beyond any cache.
      constexpr size_t kDramSet = size_t(256) << 20;
      if (bytes < double(kDramSet) && std::strcmp(bw.source, "measured") == 0) {
        const ReadBandwidth dram = read_bandwidth(kDramSet, omp_get_max_threads());
        const double dram_ms = bytes / (dram.gb_per_s * 1e9) * 1e3;
        std::fprintf(stderr,
                     "DRAM bound: the same bytes at %.1f GB/s (measured over %.0f MB, beyond the caches) = %.3f ms/token; "
                     "decode ran at %.0f%% of it\n",
                     dram.gb_per_s, dram.bytes / 1e6, dram_ms, 100.0 * dram_ms / ms);
      }
    }
  }
}

void run_grads(const GradsArgs& a) {
  auto model = load_model(a.checkpoint);
  const auto seqs = read_token_file(a.tokens);
  const int B = (int)seqs.size(), T = (int)seqs[0].size() - 1, V = model->config().model.vocab_size;
  if (T < 1) fail("token file ", a.tokens, ": sequences need at least 2 ids (inputs and targets)");
  std::vector<int32_t> in, tgt;
  for (const auto& s : seqs) {
    in.insert(in.end(), s.begin(), s.end() - 1);
    tgt.insert(tgt.end(), s.begin() + 1, s.end());
  }
  model->plan(B, T);
  model->zero_grad();
  const double loss = model->train_micro_step(in.data(), tgt.data(), 1.0f / float(B * T)) / double(B * T);
  std::vector<float> logits((size_t)B * T * V);
  model->logits(logits.data(), in.data());
  const float loss_f = (float)loss;
  std::vector<TensorRef> ts;
  ts.push_back({"loss", {1}, &loss_f, "F32"});
  ts.push_back({"logits", {B, T, V}, logits.data(), "F32"});
  for (const auto& s : model->registry().specs()) ts.push_back({"grad." + s.name, s.shape, model->grads() + s.offset, "F32"});
  write_safetensors(a.out, ts, {{"config", model->config().to_json().dump()}});
  std::printf("loss %.6f; wrote %s\n", loss, a.out.c_str());
}

}  // namespace

void register_infer(CLI::App& app) {
  {
    auto* a = program_lifetime<EvalArgs>();
    auto* cmd = app.add_subcommand("eval", "validation loss and perplexity of a checkpoint on a token shard");
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--data", a->data, "token shard (llm.c format, from `attnlab prepare`)")->required();
    cmd->add_option("--seq-len", a->seq_len, "evaluation length (default: model.seq_len)");
    cmd->add_option("--batch-size", a->batch_size, "sequences per batch")->check(CLI::PositiveNumber);
    cmd->add_option("--batches", a->batches, "at most this many batches (default: the whole shard)");
    cmd->add_option("--lengths", a->lengths,
                    "length extrapolation (docs/long-context.md): BOS-prefixed blocks of these lengths, multiples of "
                    "model.seq_len (1,2,4,8) or tokens with the suffix tok (3000tok)");
    cmd->add_option("--tokens", a->tokens, "with --lengths: tokens scored per length (default: 2^20, or what the shard holds)");
    cmd->add_option("--chunk", a->chunk, "with --lengths: tokens per KV-cached forward chunk (default: model.seq_len)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--bucket", a->bucket, "with --lengths: width of the position buckets (default: model.seq_len)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--bos", a->bos, "with --lengths: the id put in front of each block (default 1, attnlab prepare's BOS)");
    add_weights_option(cmd, a->weights);
    cmd->add_option("--json", a->json, "with --lengths: also write the report as JSON to this file, and a PNG next to it");
    cmd->add_flag("--no-plots", a->no_plots, "with --json: write the JSON only (no PNG)");
    cmd->add_option("--plot-script", a->plot_script, "with --json: the plotting script (default: scripts/plot_long_context.py of the source tree)");
    cmd->callback([a] { run_eval(*a); });
  }
  {
    auto* a = program_lifetime<ForwardArgs>();
    auto* cmd = app.add_subcommand("forward", "write the logits for given token ids as a NumPy .npy file");
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--tokens", a->tokens, "llm.c shard, or text file with one sequence of ids per line")->required();
    cmd->add_option("--out", a->out, "output .npy (float32 [B, T, V])")->required();
    cmd->add_option("--max-tokens", a->max_tokens,
                    "longest sequence allowed (default: model.seq_len); a longer shard is cut to its first N tokens");
    add_weights_option(cmd, a->weights);
    cmd->callback([a] { run_forward(*a); });
  }
  {
    auto* a = program_lifetime<SampleArgs>();
    auto* cmd = app.add_subcommand("sample", "generate text with a KV cache");
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--prompt", a->prompt, "prompt text")->required();
    cmd->add_option("-n", a->n, "tokens to generate");
    cmd->add_option("--temperature", a->temperature, "softmax temperature (0 = greedy)");
    cmd->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0 = all)");
    cmd->add_flag("--quiet", a->quiet, "do not print the prefill and decode speed (stderr)");
    cmd->add_option("--seed", a->seed, "sampling seed");
    cmd->add_option("--tokenizer", a->tokenizer, "SentencePiece model (default: the checkpoint's data.tokenizer)");
    add_weights_option(cmd, a->weights);
    cmd->callback([a] { run_sample(*a); });
  }
  {
    auto* a = program_lifetime<GradsArgs>();
    auto* cmd = app.add_subcommand("grads", "loss, logits and every parameter gradient for given sequences (reference tests)");
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--tokens", a->tokens, "text file, one sequence of T+1 ids per line")->required();
    cmd->add_option("--out", a->out, "output .safetensors")->required();
    cmd->callback([a] { run_grads(*a); });
  }
}

}  // namespace attnlab::cli
