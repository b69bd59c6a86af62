#include "experiment/long_context.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/memory.h"
#include "attnlab/printable.h"
#include "core/timer.h"
#include "model/gpt.h"
#include "checkpoint/checkpoint.h"

namespace attnlab {

std::vector<int> parse_lengths(const std::string& text, int train_len, const std::string& source) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) fail(source, " ", printable(text), ": empty entry");
    std::string s = item.substr(b, e - b + 1);
    bool absolute = false;
    if (s.size() > 3 && s.compare(s.size() - 3, 3, "tok") == 0) {
      absolute = true;
      s.resize(s.size() - 3);
    }
    size_t used = 0;
    double v = 0;
    try { v = std::stod(s, &used); } catch (...) { used = 0; }
    if (used != s.size() || !(v > 0))
      fail(source, " entry ", printable(item), ": expected a positive multiple of T_train (e.g. 4) or a length in tokens (e.g. 3000tok)");
    const double len = absolute ? v : v * train_len;
    // Too long first: 1e9 × T_train is a whole number, just far beyond any data or memory.
    if (len > (1 << 30))
      fail(source, " entry ", printable(item), ": ", std::llround(std::min(len, 1e18)), " tokens", absolute ? "" : " (× T_train = ",
           absolute ? "" : std::to_string(train_len), absolute ? "" : ")",
           " is too long: at most 2^30 = 1073741824 tokens, and the data must hold that many");
    if (len != std::floor(len))
      fail(source, " entry ", printable(item), ": ", len, " tokens is not a whole number of tokens (T_train = ", train_len, ")");
    if (len < 1) fail(source, " entry ", printable(item), ": a length must be at least 1 token");
    out.push_back((int)len);
  }
  if (out.empty()) fail(source, " ", printable(text), ": no lengths");
  return out;
}

void check_inference_memory(const std::string& what, const Config& cfg, const std::vector<int>& lengths, int B) {
  if (lengths.empty()) return;
  const double longest = *std::max_element(lengths.begin(), lengths.end());
  const double kv_dim = double(cfg.model.kv_heads) * cfg.model.head_dim();
  const double bytes = 2.0 * cfg.model.n_layer * B * longest * kv_dim * sizeof(float);
  check_fits_in_memory(what + ": evaluating at " + std::to_string((long long)longest) + " tokens", bytes,
                       "the KV cache: " + std::to_string(B) + " sequences x " + std::to_string(cfg.model.n_layer) +
                           " layers x 2 x " + std::to_string((long long)kv_dim) + " floats per token",
                       "use shorter lengths or a smaller batch");
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return (size_t)ru.ru_maxrss * 1024;  // Linux reports KiB
}

LengthEvalReport evaluate_lengths(const std::string& checkpoint, const Shard& shard, const LengthEvalOptions& opts) {
  const Config cfg = read_checkpoint_config(checkpoint);
  return evaluate_lengths(
      [&] {
        auto m = std::make_unique<GPT<float>>(cfg);
        load_checkpoint(checkpoint, *m, nullptr, nullptr);
        if (opts.bf16_weights) m->round_weights_to_bf16();
        return m;
      },
      shard, opts);
}

LengthEvalReport evaluate_lengths(const std::function<std::unique_ptr<GPT<float>>()>& make_model, const Shard& shard,
                                  const LengthEvalOptions& opts) {
  if (opts.lengths.empty()) fail("no evaluation lengths");
  if (opts.batch_size < 1) fail("--batch-size must be positive");
  LengthEvalReport rep;
  {
    auto probe = make_model();
    const Config& cfg = probe->config();
    rep.train_len = cfg.model.seq_len;
    rep.pos = cfg.attn.pos;
    shard.validate_vocab(cfg.model.vocab_size);
    if (opts.bos_id < 0 || opts.bos_id >= cfg.model.vocab_size)
      fail("--bos ", opts.bos_id, " is outside the model's vocabulary of ", cfg.model.vocab_size);
  }
  const int Ttr = rep.train_len;
  rep.batch_size = opts.batch_size;
  rep.chunk = opts.chunk > 0 ? opts.chunk : Ttr;
  rep.bucket = opts.bucket > 0 ? opts.bucket : Ttr;
  rep.bos_id = opts.bos_id;
  // The stream: the shard, without a leading BOS (each block gets its own in front).
  const uint16_t* stream = shard.tokens();
  size_t S = shard.size();
  if (S > 0 && stream[0] == opts.bos_id) ++stream, --S;
  rep.stream_tokens = S;
  const int Lmax = *std::max_element(opts.lengths.begin(), opts.lengths.end());
  const size_t fit = S / (size_t)Lmax * (size_t)Lmax;
  if (fit == 0) fail("data ", shard.path(), " has ", S, " tokens after its leading BOS, fewer than the longest length ", Lmax);
  rep.token_budget = opts.token_budget > 0 ? std::min(opts.token_budget, fit) : std::min<size_t>(size_t(1) << 20, fit);
  if (rep.token_budget < (size_t)Lmax)
    fail("--tokens ", opts.token_budget, " is smaller than the longest length ", Lmax, ": no block of that length would be scored");

  // Progress in tokens scored over every applicable length (a batch of longer blocks takes longer
  // per token; the display's ETA is smoothed over batches).
  int64_t work_total = 0, work_done = 0;
  for (int L : opts.lengths)
    if (!(rep.pos == "learned" && L > Ttr)) work_total += int64_t(rep.token_budget / (size_t)L) * L;
  for (int L : opts.lengths) {
    LengthResult r;
    r.length = L;
    const int nb = (L + rep.bucket - 1) / rep.bucket;
    r.bucket_sum.assign(nb, 0.0);
    r.bucket_tokens.assign(nb, 0);
    if (rep.pos == "learned" && L > Ttr) {
      r.applicable = false;  // §8.6: learned positions are not applicable beyond T_train
      rep.results.push_back(std::move(r));
      continue;
    }
    Timer timer;
    auto model = make_model();
    const int B = opts.batch_size, C = std::min(rep.chunk, L);
    model->plan_inference(B, L, C);
    r.planned_bytes = model->inference_bytes();
    r.blocks = rep.token_budget / (size_t)L;
    std::vector<int32_t> in((size_t)B * L), tgt((size_t)B * L), cin((size_t)B * C), ctgt((size_t)B * C);
    std::vector<float> losses((size_t)B * C);
    for (size_t k0 = 0; k0 < r.blocks; k0 += B) {
      const int rows = (int)std::min<size_t>(B, r.blocks - k0);
      for (int b = 0; b < B; ++b) {
        // Rows past the last block repeat block 0 with their targets ignored (the batch stays full).
        const size_t k = b < rows ? k0 + b : 0;
        const uint16_t* blk = stream + k * (size_t)L;
        int32_t* ib = in.data() + (size_t)b * L;
        int32_t* tb = tgt.data() + (size_t)b * L;
        ib[0] = opts.bos_id;
        for (int t = 1; t < L; ++t) ib[t] = blk[t - 1];
        for (int t = 0; t < L; ++t) tb[t] = b < rows ? (int32_t)blk[t] : -1;
      }
      model->reset_cache();
      for (int c0 = 0; c0 < L; c0 += C) {
        const int n = std::min(C, L - c0);
        for (int b = 0; b < B; ++b) {
          std::copy_n(in.data() + (size_t)b * L + c0, n, cin.data() + (size_t)b * n);
          std::copy_n(tgt.data() + (size_t)b * L + c0, n, ctgt.data() + (size_t)b * n);
        }
        model->forward_cached_loss(cin.data(), ctgt.data(), n, losses.data());
        // (inside the chunk loop: a block of 2048 × T_train is one long stretch of work)
        report_progress(opts.progress, "length " + std::to_string(L), work_done + int64_t(rows) * (c0 + n), work_total, "tokens");
        // Sums in a fixed order (block, then position): the result does not depend on threads.
        for (int b = 0; b < rows; ++b)
          for (int t = 0; t < n; ++t) {
            const double l = losses[(size_t)b * n + t];
            const int pos = c0 + t;
            r.loss_sum += l;
            r.bucket_sum[pos / rep.bucket] += l;
            r.bucket_tokens[pos / rep.bucket] += 1;
            if (pos >= Ttr) r.beyond_sum += l, r.beyond_tokens += 1;
          }
      }
      work_done += int64_t(rows) * L;
    }
    r.tokens = r.blocks * (size_t)L;
    r.seconds = timer.seconds();
    rep.results.push_back(std::move(r));
  }
  return rep;
}

nlohmann::json length_report_json(const LengthEvalReport& rep) {
  using nlohmann::json;
  json lengths = json::array();
  for (const auto& r : rep.results) {
    json j{{"length", r.length}, {"multiple", double(r.length) / rep.train_len}, {"applicable", r.applicable}};
    if (!r.applicable) {
      j["reason"] = "learned positions are undefined beyond model.seq_len";
      j["loss"] = nullptr;
      j["perplexity"] = nullptr;
      j["loss_beyond_train"] = nullptr;
      lengths.push_back(j);
      continue;
    }
    j["blocks"] = r.blocks;
    j["tokens"] = r.tokens;
    j["loss"] = r.loss();
    j["perplexity"] = std::exp(r.loss());
    j["tokens_beyond_train"] = r.beyond_tokens;
    j["loss_beyond_train"] = r.beyond_tokens ? json(r.beyond_loss()) : json(nullptr);
    json buckets = json::array();
    for (size_t i = 0; i < r.bucket_sum.size(); ++i) {
      const int start = (int)i * rep.bucket, end = std::min(r.length, start + rep.bucket);
      buckets.push_back({{"start", start},
                         {"end", end},
                         {"tokens", r.bucket_tokens[i]},
                         {"loss", r.bucket_tokens[i] ? json(r.bucket_sum[i] / double(r.bucket_tokens[i])) : json(nullptr)}});
    }
    j["buckets"] = buckets;
    j["planned_bytes"] = r.planned_bytes;
    j["seconds"] = r.seconds;
    lengths.push_back(j);
  }
  return json{{"format", "attnlab-length-eval"},
              {"version", 1},
              {"train_len", rep.train_len},
              {"pos", rep.pos},
              {"stream_tokens", rep.stream_tokens},
              {"token_budget", rep.token_budget},
              {"batch_size", rep.batch_size},
              {"chunk", rep.chunk},
              {"bucket", rep.bucket},
              {"bos_id", rep.bos_id},
              {"lengths", lengths},
              {"peak_rss_bytes", peak_rss_bytes()}};
}

std::string length_report_table(const LengthEvalReport& rep) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "length evaluation (docs/mechanisms.md §8.6): T_train %d, attn.pos %s, %zu tokens per length\n",
                rep.train_len, rep.pos.c_str(), rep.token_budget);
  out += line;
  std::snprintf(line, sizeof line, "%8s %6s %7s %9s %8s %10s %12s %9s\n", "length", "xT", "blocks", "loss", "ppl", "loss>=T",
                "planned MB", "seconds");
  out += line;
  for (const auto& r : rep.results) {
    if (!r.applicable) {
      std::snprintf(line, sizeof line, "%8d %6.2f %7s %9s %8s %10s %12s %9s\n", r.length, double(r.length) / rep.train_len, "-",
                    "N/A", "N/A", "N/A", "-", "-");
    } else {
      char beyond[32] = "-";
      if (r.beyond_tokens) std::snprintf(beyond, sizeof beyond, "%.4f", r.beyond_loss());
      std::snprintf(line, sizeof line, "%8d %6.2f %7zu %9.4f %8.2f %10s %12.2f %9.1f\n", r.length, double(r.length) / rep.train_len,
                    r.blocks, r.loss(), std::exp(r.loss()), beyond, r.planned_bytes / 1e6, r.seconds);
    }
    out += line;
  }
  // Loss per position bucket: one row per bucket, one column per length.
  size_t nb = 0;
  for (const auto& r : rep.results) nb = std::max(nb, r.bucket_sum.size());
  out += "loss per position bucket\n";
  std::snprintf(line, sizeof line, "%15s", "positions");
  out += line;
  for (const auto& r : rep.results) {
    std::snprintf(line, sizeof line, " %9d", r.length);
    out += line;
  }
  out += "\n";
  for (size_t i = 0; i < nb; ++i) {
    char range[32];
    std::snprintf(range, sizeof range, "[%zu, %zu)", i * rep.bucket, (i + 1) * rep.bucket);
    std::snprintf(line, sizeof line, "%15s", range);
    out += line;
    for (const auto& r : rep.results) {
      if (!r.applicable) std::snprintf(line, sizeof line, " %9s", i < r.bucket_sum.size() ? "N/A" : "");
      else if (i < r.bucket_sum.size() && r.bucket_tokens[i]) std::snprintf(line, sizeof line, " %9.4f", r.bucket_sum[i] / r.bucket_tokens[i]);
      else std::snprintf(line, sizeof line, " %9s", "");
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace attnlab
