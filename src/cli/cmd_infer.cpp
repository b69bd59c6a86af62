// `attnlab eval`, `attnlab forward`, `attnlab sample` and `attnlab grads` (the PyTorch reference
// test's input), through the public API (include/attnlab/) alone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/plots.h"
#include "cli/progress_line.h"
#include "cli/validators.h"

namespace attnlab::cli {
namespace {

// Prompt plus generated tokens at most (the KV cache grows with them): 1M.
constexpr int kMaxSampleTokens = 1 << 20;

// `--weights`: fp32 (as trained) or bf16 (the matrices rounded, decoding reads half the bytes).
const std::vector<std::string> kWeightFormats = {"fp32", "bf16"};

api::Weights weights_of(const std::string& name) { return name == "bf16" ? api::Weights::bf16 : api::Weights::fp32; }

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
  api::LengthSweepParams p = api::default_length_sweep_params();
  p.lengths = a.lengths;
  p.tokens = a.tokens;
  p.batch_size = a.batch_size;
  p.chunk = a.chunk;
  p.bucket = a.bucket;
  p.bos = a.bos;
  p.weights = weights_of(a.weights);
  p.on_progress = progress_line();
  const api::LengthSweep sweep = api::evaluate_lengths(a.checkpoint, a.data, p);
  std::printf("eval %s on %s\n%s", a.checkpoint.c_str(), a.data.c_str(), sweep.table.c_str());
  if (!a.json.empty()) {
    api::write_json_report(a.json, sweep.json);
    std::printf("wrote %s\n", a.json.c_str());
    // the PNG next to the JSON (F.json -> F.png), scripts/plot_long_context.py
    if (!a.no_plots) run_plot_script("plot_long_context.py", a.plot_script, {a.json});
  }
}

void run_eval(const EvalArgs& a) {
  if (!a.lengths.empty()) return run_length_eval(a);
  if (!a.json.empty() || a.tokens || a.chunk || a.bucket) fail("--json, --tokens, --chunk and --bucket need --lengths");
  if (a.no_plots || !a.plot_script.empty()) fail("--no-plots and --plot-script need --lengths and --json");
  api::EvalParams p = api::default_eval_params();
  p.seq_len = a.seq_len;
  p.batch_size = a.batch_size;
  p.batches = a.batches;
  p.weights = weights_of(a.weights);
  const api::EvalResult r = api::evaluate(a.checkpoint, a.data, p);
  std::printf("eval %s on %s: seq_len %d, %zu tokens, loss %.4f, perplexity %.5g\n", a.checkpoint.c_str(), a.data.c_str(),
              r.seq_len, r.tokens, r.loss, r.perplexity);
}

void run_forward(const ForwardArgs& a) {
  const api::Config cfg = api::Config::from_checkpoint(a.checkpoint);
  const int seq_len = std::stoi(cfg.get("model.seq_len")), V = std::stoi(cfg.get("model.vocab_size"));
  // Attention over one sequence costs O(T²) time: without --max-tokens, sequences are limited to
  // the length the model was trained on.
  if (a.max_tokens < 0) fail("--max-tokens ", a.max_tokens, ": must be positive");
  const int limit = a.max_tokens > 0 ? a.max_tokens : seq_len;
  auto seqs = api::read_token_file(a.tokens);
  if (seqs.size() == 1 && seqs[0].size() > (size_t)limit && api::is_token_shard(a.tokens)) {
    std::fprintf(stderr, "note: %s holds %zu tokens; using the first %d (%s)\n", a.tokens.c_str(), seqs[0].size(), limit,
                 a.max_tokens > 0 ? "--max-tokens" : "model.seq_len; raise with --max-tokens");
    seqs[0].resize((size_t)limit);
  }
  if (seqs[0].size() > (size_t)limit)
    fail("token file ", a.tokens, ": sequences of ", seqs[0].size(), " ids are longer than ",
         a.max_tokens > 0 ? "--max-tokens = " : "model.seq_len = ", limit, a.max_tokens > 0 ? "" : "; pass --max-tokens N to allow longer ones");
  if ((double)seqs.size() * (double)seqs[0].size() * V * 4.0 > 64e9)
    fail("token file ", a.tokens, ": ", seqs.size(), " x ", seqs[0].size(), " logits of ", V,
         " would take more than 64 GB; give fewer or shorter sequences");
  api::Model model = api::Model::load(a.checkpoint, weights_of(a.weights));
  const int B = (int)seqs.size(), T = (int)seqs[0].size();
  std::vector<int32_t> in;
  for (const auto& s : seqs) in.insert(in.end(), s.begin(), s.end());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] >= V) fail("token file ", a.tokens, ": id ", in[i], " at position ", i, " is outside the vocabulary of ", V);
  // One chunk through the cached path (Model::forward): exactly the uncached computation (a test
  // checks), and it handles any length the positional scheme allows.
  const std::vector<float> logits = model.forward(in, B, T);
  api::write_logits_npy(a.out, logits, B, T, V);
  std::printf("wrote %s: logits [%d, %d, %d]\n", a.out.c_str(), B, T, V);
}

// Prints the text of a growing id sequence as it grows, in O(window) per id: the text of a segment
// of ids is decoded together with the id before it, whose own text is cut off, so that a word's
// leading space (SentencePiece's ▁) survives the segment boundary; a new segment starts every 64
// ids. A trailing U+FFFD (a UTF-8 character whose bytes are not all drawn yet) is held back.
class TextStream {
 public:
  TextStream(const api::Tokenizer& tok, const std::vector<int32_t>& prompt) : tok_(tok), ids_(prompt) {
    std::fputs(tok_.decode(ids_).c_str(), stdout);
    std::fflush(stdout);
    start_ = ids_.size();
  }
  void add(int32_t id) {
    ids_.push_back(id);
    flush_segment(false);
    if (ids_.size() - start_ >= 64) {
      flush_segment(true);
      start_ = ids_.size();
      emitted_ = 0;
    }
  }
  void finish() {
    flush_segment(true);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  void flush_segment(bool all) {
    if (ids_.size() == start_) return;
    const std::vector<int32_t> seg(ids_.begin() + std::ptrdiff_t(start_ - (start_ > 0 ? 1 : 0)), ids_.end());
    std::string text = tok_.decode(seg);
    if (start_ > 0) {
      const std::string before = tok_.decode({ids_[start_ - 1]});
      if (text.compare(0, before.size(), before) != 0) return;  // not separable yet: wait for more ids
      text.erase(0, before.size());
    }
    static const std::string replacement = "\xEF\xBF\xBD";
    size_t end = text.size();
    if (!all && end >= replacement.size() && text.compare(end - replacement.size(), replacement.size(), replacement) == 0)
      end -= replacement.size();
    if (end > emitted_) {
      std::fwrite(text.data() + emitted_, 1, end - emitted_, stdout);
      std::fflush(stdout);
      emitted_ = end;
    }
  }
  const api::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t start_ = 0, emitted_ = 0;
};

void run_sample(const SampleArgs& a) {
  // The options first, each error naming the option.
  if (!std::isfinite(a.temperature) || a.temperature < 0)
    fail("--temperature ", a.temperature, ": must be a finite number >= 0 (0 = greedy)");
  if (a.top_k < 0) fail("--top-k ", a.top_k, ": must be >= 0 (0 = all tokens)");
  if (a.n < 0 || a.n > kMaxSampleTokens) fail("-n ", a.n, ": must be in [0, ", kMaxSampleTokens, "]");
  api::Model model = api::Model::load(a.checkpoint, weights_of(a.weights));
  const api::Config cfg = model.config();
  const int V = model.vocab_size(), seq_len = std::stoi(cfg.get("model.seq_len"));
  const bool learned = cfg.get("attn.pos") == "learned";
  const std::string tok_path = a.tokenizer.empty() ? cfg.get("data.tokenizer") : a.tokenizer;
  api::Tokenizer tok = api::Tokenizer::load(tok_path);
  if (tok.vocab_size() > V)
    fail("tokenizer ", tok_path, " has ", tok.vocab_size(), " tokens but the model's vocabulary is ", V);
  std::vector<int32_t> ids = tok.encode(a.prompt);
  if (ids.empty()) {
    if (tok.bos_id() < 0) fail("--prompt is empty and the tokenizer has no BOS token to start from");
    ids.push_back(tok.bos_id());
  }
  int n = a.n;
  const int prompt_len = (int)ids.size();
  if (prompt_len > kMaxSampleTokens) fail("--prompt: ", prompt_len, " tokens, more than ", kMaxSampleTokens);
  if (learned && prompt_len + n > seq_len) {
    if (prompt_len >= seq_len)
      fail("the prompt has ", prompt_len, " tokens; learned positions allow at most model.seq_len = ", seq_len);
    n = seq_len - prompt_len;
    std::fprintf(stderr, "note: learned positions end at model.seq_len = %d; generating %d tokens\n", seq_len, n);
  }
  // RoPE and no positions (NoPE) are not built to extrapolate (docs/long-context.md: RoPE's recall
  // falls below chance beyond T_train); ALiBi and GOAT are. Say so before the text degrades.
  const std::string pos = cfg.get("attn.pos");
  if ((pos == "rope" || pos == "none") && prompt_len + n > seq_len)
    std::fprintf(stderr,
                 "warning: the context reaches %d tokens, beyond model.seq_len = %d the model was trained on; attn.pos = %s "
                 "does not extrapolate, so the text after token %d may degrade (use -n %d or less to stay within it)\n",
                 prompt_len + n, seq_len, pos.c_str(), seq_len, std::max(0, seq_len - prompt_len));
  api::SamplingParams sp = api::default_sampling_params();
  sp.temperature = a.temperature;
  sp.top_k = a.top_k;
  sp.seed = a.seed;
  // (Among the tokenizer's ids: a model vocabulary larger than the tokenizer's has rows no text can decode.)
  sp.vocab_limit = std::min(V, tok.vocab_size());
  // The text streams as it is generated: the prompt first, then each id's piece when it is drawn.
  TextStream stream(tok, ids);
  const api::Generation g = model.generate(ids, n, sp, [&](int32_t id) {
    stream.add(id);
    return true;
  });
  stream.finish();
  if (g.interrupted)
    throw Interrupted("interrupted after " + std::to_string(g.generated) + " of " + std::to_string(n) +
                      " tokens (the text so far is above); run the command again to sample anew (the same --seed gives the same text)");
  // Speed on stderr (stdout is the text): prefill = the prompt in one cached forward; decode = the
  // n − 1 single-token forwards plus sampling.
  if (!a.quiet) {
    const double prefill_s = g.prefill_seconds, decode_s = g.decode_seconds;
    std::fprintf(stderr, "prefill: %d tokens in %.1f ms (%.0f tokens/s)", prompt_len, prefill_s * 1e3, prompt_len / std::max(prefill_s, 1e-9));
    if (n > 1)
      std::fprintf(stderr, "; decode: %d tokens in %.1f ms (%.0f tokens/s, %.2f ms/token)", n - 1, decode_s * 1e3,
                   (n - 1) / std::max(decode_s, 1e-9), decode_s * 1e3 / (n - 1));
    std::fprintf(stderr, "\n");
    if (n > 1) {
      // The bandwidth bound: the bytes one decode step must read (weights and the cache at the mean
      // context of the decoded tokens) at the machine's read rate for a working set of that size.
      const api::DecodeBound b = model.decode_bound(prompt_len, n);
      const double bytes = b.weight_bytes + b.kv_cache_bytes, ms = decode_s * 1e3 / (n - 1);
      std::fprintf(stderr,
                   "decode bound: %.2f MB read per token (weights %.2f, KV cache %.2f at mean context %.0f) at %.1f GB/s "
                   "(%s, %d threads, %.1f MB working set) = %.3f ms/token; decode ran at %.0f%% of it\n",
                   bytes / 1e6, b.weight_bytes / 1e6, b.kv_cache_bytes / 1e6, b.mean_context, b.read_gb_per_s,
                   b.read_source.c_str(), b.read_threads, b.read_set_bytes / 1e6, b.ms_per_token, 100.0 * b.ms_per_token / ms);
      // A working set of the decoder's size, re-read back to back, may be served largely by the
      // last-level cache, which the decoder itself (with its activations and everything else the
      // machine runs) need not get: beside that bound, the rate for a set far beyond any cache.
      if (b.dram_measured)
        std::fprintf(stderr,
                     "DRAM bound: the same bytes at %.1f GB/s (measured over %.0f MB, beyond the caches) = %.3f ms/token; "
                     "decode ran at %.0f%% of it\n",
                     b.dram_gb_per_s, b.dram_set_bytes / 1e6, b.dram_ms_per_token, 100.0 * b.dram_ms_per_token / ms);
    }
  }
}

void run_grads(const GradsArgs& a) {
  const double loss = api::write_gradients(a.checkpoint, a.tokens, a.out);
  std::printf("loss %.6f; wrote %s\n", loss, a.out.c_str());
}

}  // namespace

void register_infer(CLI::App& app) {
  {
    auto* a = program_lifetime<EvalArgs>();
    auto* cmd = app.add_subcommand("eval", "validation loss and perplexity of a checkpoint on a token shard");
    add_skip_checksums_flag(cmd);
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--data", a->data, "token shard (llm.c format, from `attnlab prepare`)")->required();
    cmd->add_option("--seq-len", a->seq_len, "evaluation length (0: model.seq_len)")->check(at_least(0, "0 = model.seq_len"));
    cmd->add_option("--batch-size", a->batch_size, "sequences per batch")->check(at_least(1));
    cmd->add_option("--batches", a->batches, "at most this many batches (0: the whole shard)")->check(at_least(0, "0 = the whole shard"));
    cmd->add_option("--lengths", a->lengths,
                    "length extrapolation (docs/long-context.md): BOS-prefixed blocks of these lengths, multiples of "
                    "model.seq_len (1,2,4,8) or tokens with the suffix tok (3000tok)")
        ->check(not_empty("1,2,4,8"));
    cmd->add_option("--tokens", a->tokens, "with --lengths: tokens scored per length (0: 2^20, or what the shard holds)")
        ->check(at_least(0, "0 = 2^20 or what the shard holds"));
    cmd->add_option("--chunk", a->chunk, "with --lengths: tokens per KV-cached forward chunk (0: model.seq_len)")
        ->check(at_least(0, "0 = model.seq_len"));
    cmd->add_option("--bucket", a->bucket, "with --lengths: width of the position buckets (0: model.seq_len)")
        ->check(at_least(0, "0 = model.seq_len"));
    cmd->add_option("--bos", a->bos, "with --lengths: the id put in front of each block (1: attnlab prepare's BOS)")->check(at_least(0));
    add_weights_option(cmd, a->weights);
    cmd->add_option("--json", a->json, "with --lengths: also write the report as JSON to this file, and a PNG next to it");
    cmd->add_flag("--no-plots", a->no_plots, "with --json: write the JSON only (no PNG)");
    cmd->add_option("--plot-script", a->plot_script, "with --json: the plotting script (default: scripts/plot_long_context.py of the source tree)");
    cmd->callback([a] { run_eval(*a); });
  }
  {
    auto* a = program_lifetime<ForwardArgs>();
    auto* cmd = app.add_subcommand("forward", "write the logits for given token ids as a NumPy .npy file");
    add_skip_checksums_flag(cmd);
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--tokens", a->tokens, "llm.c shard, or text file with one sequence of ids per line")->required();
    cmd->add_option("--out", a->out, "output .npy (float32 [B, T, V])")->required();
    cmd->add_option("--max-tokens", a->max_tokens,
                    "longest sequence allowed (0: model.seq_len); a longer shard is cut to its first N tokens")
        ->check(at_least(0, "0 = model.seq_len"));
    add_weights_option(cmd, a->weights);
    cmd->callback([a] { run_forward(*a); });
  }
  {
    auto* a = program_lifetime<SampleArgs>();
    auto* cmd = app.add_subcommand("sample", "generate text with a KV cache");
    add_skip_checksums_flag(cmd);
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--prompt", a->prompt, "prompt text")->required();
    cmd->add_option("-n", a->n, "tokens to generate")->check(in_range(0, kMaxSampleTokens));
    cmd->add_option("--temperature", a->temperature, "softmax temperature (0 = greedy)");
    cmd->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0 = all)")->check(at_least(0, "0 = all tokens"));
    cmd->add_flag("--quiet", a->quiet, "do not print the prefill and decode speed (stderr)");
    cmd->add_option("--seed", a->seed, "sampling seed")->check(seed_value());
    cmd->add_option("--tokenizer", a->tokenizer, "SentencePiece model (default: the checkpoint's data.tokenizer)");
    add_weights_option(cmd, a->weights);
    cmd->callback([a] { run_sample(*a); });
  }
  {
    auto* a = program_lifetime<GradsArgs>();
    auto* cmd = app.add_subcommand("grads", "loss, logits and every parameter gradient for given sequences (reference tests)");
    add_skip_checksums_flag(cmd);
    cmd->add_option("--checkpoint", a->checkpoint, "checkpoint (.safetensors)")->required();
    cmd->add_option("--tokens", a->tokens, "text file, one sequence of T+1 ids per line")->required();
    cmd->add_option("--out", a->out, "output .safetensors")->required();
    cmd->callback([a] { run_grads(*a); });
  }
}

}  // namespace attnlab::cli
