#include "experiment/tasks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "model/gpt.h"

namespace attnlab::tasks {

namespace {
constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789 :;,.?+-_=/'\"[](){}<>#@!$%^&*|\\";
static_assert(sizeof(kChars) - 1 + 3 == CharTokenizer::kVocab, "§8.7: 67 characters after the 3 control ids");

// Appends characters as ids, without allocating.
struct Writer {
  int32_t* out;
  int pos = 0;
  void put(char c) { out[pos++] = CharTokenizer::encode(c); }
  void put(const char* s) {
    for (; *s; ++s) put(*s);
  }
};

char draw(Rng& rng, const char* alphabet, int n) { return alphabet[rng.below((uint64_t)n)]; }

// §8.7 passkey retrieval.
class Passkey final : public Task {
 public:
  static constexpr const char* kHead = " system log: ";
  static constexpr const char* kKeyHeader = "passkey: ";
  static constexpr const char* kQuestion = " q: what is the passkey? a: ";
  static constexpr int kKey = 8, kFixed = 67;  // 13 + 9 + 8 + 1 + 28 + 8
  const char* name() const override { return "passkey"; }
  int vocab_size() const override { return CharTokenizer::kVocab; }
  int min_length() const override { return kFixed + 1; }
  int answer_count(int) const override { return kKey; }
  double all_weight() const override { return 1.0 / 11.0; }
  void sample(int Ls, double, Rng& rng, int32_t* out, int32_t* ans) const override {
    const int F = Ls - kFixed;
    char key[kKey + 1] = {};
    for (int i = 0; i < kKey; ++i) key[i] = char('0' + rng.below(10));
    const int p = (int)std::floor(rng.uniform() * 0.8 * F);  // U ~ U[0, 0.8)
    static constexpr char filler[] = "abcdefghijklmnopqrstuvwxyz ";
    Writer w{out};
    w.put(kHead);
    for (int i = 0; i < p; ++i) w.put(draw(rng, filler, 27));
    w.put(kKeyHeader);
    w.put(key);
    w.put(' ');
    for (int i = p; i < F; ++i) w.put(draw(rng, filler, 27));
    w.put(kQuestion);
    w.put(key);
    ATTNLAB_CHECK(w.pos == Ls, "passkey layout: ", w.pos, " != ", Ls);
    for (int i = 0; i < kKey; ++i) ans[i] = Ls - 1 - kKey + i;  // the last 8 targets
  }
};

// §8.8 needle in a haystack.
class Needle final : public Task {
 public:
  static constexpr const char* kHead = " doc: ";                          // 6
  static constexpr const char* kNeedleHeader = "needle: ";                // 8
  static constexpr const char* kQuestion = " q: what is the needle? a: ";  // 27
  static constexpr int kNeedle = 12, kFixed = 66;                         // 6 + 8 + 12 + 1 + 27 + 12
  const char* name() const override { return "needle"; }
  int vocab_size() const override { return CharTokenizer::kVocab; }
  int min_length() const override { return kFixed; }
  int answer_count(int) const override { return kNeedle; }
  double all_weight() const override { return 0.0; }  // only the answer is scored
  bool uses_depth() const override { return true; }
  void sample(int Ls, double depth, Rng& rng, int32_t* out, int32_t* ans) const override {
    char needle[kNeedle + 1] = {};
    for (int i = 0; i < kNeedle; ++i) needle[i] = draw(rng, "abcd", 4);
    // The header starts at clamp(floor(depth·(L−39)), 6, L−39); if the right filler would be
    // negative, the text moves left by the missing amount: s ≤ L − 60.
    int s = std::clamp((int)std::floor(depth * (Ls - 39)), 6, Ls - 39);
    s = std::min(s, Ls - 60);
    const int left = s - 6, right = Ls - 60 - s;
    Writer w{out};
    w.put(kHead);
    for (int i = 0; i < left; ++i) w.put(draw(rng, "abcd ", 5));
    w.put(kNeedleHeader);
    w.put(needle);
    w.put(' ');
    for (int i = 0; i < right; ++i) w.put(draw(rng, "abcd ", 5));
    w.put(kQuestion);
    w.put(needle);
    ATTNLAB_CHECK(w.pos == Ls, "needle layout: ", w.pos, " != ", Ls);
    for (int i = 0; i < kNeedle; ++i) ans[i] = Ls - 1 - kNeedle + i;
  }
};

// Multi-query associative recall (Zoology): BOS, D pairs (k v) with distinct keys, then a region
// where Q of the keys come back as (k v) pairs in random slots, the rest padding. The answer is
// each queried value, predicted at its key.
class Mqar final : public Task {
 public:
  Mqar(int K, int D, int Q) : K_(K), D_(D), Q_(Q) {}
  const char* name() const override { return "mqar"; }
  int vocab_size() const override { return 3 + 2 * K_; }
  int min_length() const override { return 1 + 2 * D_ + 2 * Q_; }
  int answer_count(int) const override { return Q_; }
  double all_weight() const override { return 0.0; }
  nlohmann::json describe() const override {
    return {{"task", "mqar"}, {"keys", K_}, {"kv_pairs", D_}, {"queries", Q_}};
  }
  void sample(int Ls, double, Rng& rng, int32_t* out, int32_t* ans) const override {
    // out doubles as scratch: key indices are shuffled in place in the query region first.
    int32_t keys[kMaxKeys], vals[kMaxKeys];
    for (int i = 0; i < K_; ++i) keys[i] = i;
    for (int i = 0; i < D_; ++i) std::swap(keys[i], keys[i + rng.below((uint64_t)(K_ - i))]);  // D distinct keys
    for (int i = 0; i < D_; ++i) vals[i] = (int32_t)rng.below((uint64_t)K_);
    out[0] = CharTokenizer::kBos;
    for (int i = 0; i < D_; ++i) {
      out[1 + 2 * i] = 3 + keys[i];
      out[2 + 2 * i] = 3 + K_ + vals[i];
    }
    // Query region: R positions, R/2 two-token slots; Q slots chosen by a partial shuffle kept in
    // the region itself (then overwritten), Q pairs chosen by a partial shuffle of 0..D−1.
    const int start = 1 + 2 * D_, R = Ls - start, slots = R / 2;
    int32_t* slot = out + start;  // slots ≤ R, so the scratch fits
    for (int i = 0; i < slots; ++i) slot[i] = i;
    for (int i = 0; i < Q_; ++i) std::swap(slot[i], slot[i + rng.below((uint64_t)(slots - i))]);
    int32_t chosen[kMaxKeys];
    std::copy(slot, slot + Q_, chosen);
    std::sort(chosen, chosen + Q_);
    int32_t which[kMaxKeys];
    for (int i = 0; i < D_; ++i) which[i] = i;
    for (int i = 0; i < Q_; ++i) std::swap(which[i], which[i + rng.below((uint64_t)(D_ - i))]);
    std::fill(out + start, out + Ls, CharTokenizer::kPad);
    for (int i = 0; i < Q_; ++i) {
      const int p = start + 2 * chosen[i];
      out[p] = 3 + keys[which[i]];
      out[p + 1] = 3 + K_ + vals[which[i]];
      ans[i] = p;  // the target at index p is token p + 1, the value
    }
  }
  static constexpr int kMaxKeys = kMqarMaxKeys;

 private:
  int K_, D_, Q_;
};
}  // namespace

int32_t CharTokenizer::encode(char c) {
  const char* p = c ? std::strchr(kChars, c) : nullptr;
  return p ? int32_t(3 + (p - kChars)) : int32_t(3 + 36);  // unknown → space
}
char CharTokenizer::decode(int32_t id) {
  if (id < 3 || id >= kVocab) return '\0';
  return kChars[id - 3];
}
std::vector<int32_t> CharTokenizer::encode(std::string_view s) {
  std::vector<int32_t> out;
  out.reserve(s.size());
  for (char c : s) out.push_back(encode(c));
  return out;
}
std::string CharTokenizer::decode(const int32_t* ids, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    if (char c = decode(ids[i])) s.push_back(c);
  return s;
}

MqarShape mqar_shape(const TaskParams& p, int train_len) {
  MqarShape s;
  s.keys = p.mqar_keys > 0 ? p.mqar_keys : 64;
  s.kv_pairs = p.kv_pairs > 0 ? p.kv_pairs : std::max(1, std::min(s.keys, train_len / 8));
  s.queries = p.queries > 0 ? p.queries : s.kv_pairs;
  return s;
}

std::unique_ptr<Task> Task::make(const TaskParams& p, int train_len) {
  if (p.name == "passkey") return std::make_unique<Passkey>();
  if (p.name == "needle") return std::make_unique<Needle>();
  if (p.name == "mqar") {
    const MqarShape shape = mqar_shape(p, train_len);
    const int K = shape.keys, D = shape.kv_pairs, Q = shape.queries;
    if (K < 2 || K > Mqar::kMaxKeys) fail("--keys ", K, ": MQAR needs 2..", Mqar::kMaxKeys, " keys");
    if (D > K) fail("--kv-pairs ", D, " exceeds the ", K, " distinct keys (--keys)");
    if (Q > D) fail("--queries ", Q, " exceeds the ", D, " key-value pairs");
    if (1 + 2 * D + 2 * Q > train_len + 1)
      fail("MQAR with ", D, " pairs and ", Q, " queries needs ", 2 * D + 2 * Q, " tokens, more than model.seq_len = ", train_len);
    return std::make_unique<Mqar>(K, D, Q);
  }
  fail("unknown task '", p.name, "' (choose passkey, needle or mqar)");
}

Rng sample_rng(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  // Each field through a splitmix64 finaliser, chained: distinct tuples give unrelated seeds.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(seed);
  h = mix(h ^ stream);
  h = mix(h ^ a);
  h = mix(h ^ b);
  return Rng(h);
}

TaskTrainData::TaskTrainData(std::shared_ptr<const Task> task, int B, int T, uint64_t seed)
    : task_(std::move(task)), B_(B), T_(T), seed_(seed) {
  if (T + 1 < task_->min_length())
    fail("task ", task_->name(), " needs samples of at least ", task_->min_length(), " tokens: model.seq_len must be at least ",
         task_->min_length() - 1);
  sample_.resize((size_t)T + 1);
  ans_.resize((size_t)task_->answer_count(T + 1));
  vin_.resize((size_t)B * T);
  vtgt_.resize((size_t)B * T);
  vw_.resize((size_t)B * T);
  vloss_.resize((size_t)B * T);
}

void TaskTrainData::batch(uint64_t stream, uint64_t k, int32_t* inputs, int32_t* targets, float* weights) const {
  const int T = T_, Ls = T + 1, na = (int)ans_.size();
  double depth = 0.5;
  if (task_->uses_depth()) {
    Rng d = sample_rng(seed_, stream == kStreamTrain ? kStreamTrainDepth : stream + 100, k, 0);
    depth = 0.1 + 0.8 * d.uniform();
  }
  // Weights: all_weight for every target plus the answer's share, summing to T per sample.
  const double a = task_->all_weight(), b = (1.0 - a) * T / na;
  for (int r = 0; r < B_; ++r) {
    Rng rng = sample_rng(seed_, stream, k, (uint64_t)r);
    task_->sample(Ls, depth, rng, sample_.data(), ans_.data());
    int32_t* in = inputs + (size_t)r * T;
    int32_t* tg = targets + (size_t)r * T;
    float* w = weights + (size_t)r * T;
    std::copy(sample_.begin(), sample_.end() - 1, in);
    std::copy(sample_.begin() + 1, sample_.end(), tg);
    std::fill(w, w + T, (float)a);
    for (int i = 0; i < na; ++i) w[ans_[i]] = (float)(a + b);
  }
}

void TaskTrainData::next(int32_t* inputs, int32_t* targets, float* weights) {
  batch(kStreamTrain, batch_++, inputs, targets, weights);
}

EvalResult TaskTrainData::validate(GPT<float>& model, int max_batches) {
  EvalResult r;
  const int nb = max_batches > 0 ? max_batches : 8;
  for (int k = 0; k < nb; ++k) {
    batch(kStreamVal, (uint64_t)k, vin_.data(), vtgt_.data(), vw_.data());
    model.eval_loss(vin_.data(), vtgt_.data(), vloss_.data());
    for (size_t i = 0; i < vw_.size(); ++i) r.loss_sum += (double)vw_[i] * vloss_[i];
    r.count += vw_.size();  // the weights of a batch sum to B·T
  }
  return r;
}

std::string TaskTrainData::describe() const {
  return std::string("task: ") + task_->name() + " " + task_->describe().dump() + ", vocabulary " +
         std::to_string(task_->vocab_size()) + ", seed " + std::to_string(seed_);
}

void AnswerScore::add(const int32_t* argmax, const int32_t* targets, const float* losses, const int32_t* ans, int n_ans) {
  bool all = true;
  double lp = 0;
  for (int i = 0; i < n_ans; ++i) {
    const int t = ans[i];
    const bool ok = argmax[t] == targets[t];
    all = all && ok;
    correct_tokens += ok;
    lp -= (double)losses[t];
  }
  answer_tokens += (size_t)n_ans;
  solved += all;
  samples += 1;
  logprob_sum += lp;
}

TaskEvalReport evaluate_task(const Task& task, const std::function<std::unique_ptr<GPT<float>>()>& make_model,
                             const TaskEvalOptions& opts) {
  TaskEvalReport rep;
  rep.task = task.name();
  rep.params = task.describe();
  {
    auto probe = make_model();
    const Config& cfg = probe->config();
    rep.train_len = cfg.model.seq_len;
    rep.pos = cfg.attn.pos;
    if (cfg.model.vocab_size != task.vocab_size())
      fail("the checkpoint's vocabulary is ", cfg.model.vocab_size, " but task ", task.name(), " uses ", task.vocab_size(),
           " ids: was it trained on this task (attnlab task ", task.name(), " --train)?");
  }
  if (opts.samples < 1) fail("--samples must be positive");
  rep.samples = opts.samples;
  rep.seed = opts.seed;
  rep.batch_size = opts.batch_size;
  rep.chunk = opts.chunk > 0 ? opts.chunk : rep.train_len;
  std::vector<double> depths = {-1};
  if (task.uses_depth()) depths = opts.depths.empty() ? std::vector<double>{0.1, 0.3, 0.5, 0.7, 0.9} : opts.depths;
  for (double d : depths)
    if (task.uses_depth() && !(d >= 0 && d <= 1)) fail("--depths: ", d, " is outside [0, 1]");
  if ((int)depths.size() > kMaxNeedleDepths) fail("--depths: ", depths.size(), " depths; at most ", kMaxNeedleDepths);
  int64_t work_total = 0, work_done = 0;  // samples over every applicable cell
  for (int L : opts.lengths)
    if (!(rep.pos == "learned" && L > rep.train_len)) work_total += int64_t(depths.size()) * opts.samples;
  for (int L : opts.lengths) {
    const int Ls = L + 1;
    if (Ls < task.min_length())
      fail("length ", L, " is too short for task ", task.name(), ": its layout needs ", task.min_length() - 1, " tokens");
    const int B = opts.batch_size, C = std::min(rep.chunk, L), na = task.answer_count(Ls);
    std::unique_ptr<GPT<float>> model;
    const bool applicable = !(rep.pos == "learned" && L > rep.train_len);
    if (applicable) {
      model = make_model();
      model->plan_inference(B, L, C);
    }
    std::vector<int32_t> sample((size_t)Ls), in((size_t)B * L), tgt((size_t)B * L), ans((size_t)B * na);
    std::vector<int32_t> cin((size_t)B * C), ctgt((size_t)B * C), carg((size_t)B * C), arg((size_t)B * L);
    std::vector<float> closs((size_t)B * C), loss((size_t)B * L);
    for (size_t di = 0; di < depths.size(); ++di) {
      TaskCell cell;
      cell.length = L;
      cell.depth = depths[di];
      cell.applicable = applicable;
      if (!applicable) {
        rep.cells.push_back(cell);
        continue;
      }
      Timer timer;
      for (int s0 = 0; s0 < opts.samples; s0 += B) {
        const int rows = std::min(B, opts.samples - s0);
        for (int b = 0; b < B; ++b) {
          // Sample i of a cell: sample_rng(seed, eval, length·64 + depth index, i). Rows past the
          // last sample repeat row 0 and are not scored.
          const int i = s0 + (b < rows ? b : 0);
          Rng rng = sample_rng(opts.seed, kStreamEval, (uint64_t)L * 64 + di, (uint64_t)i);
          task.sample(Ls, std::max(0.0, depths[di]), rng, sample.data(), ans.data() + (size_t)b * na);
          std::copy(sample.begin(), sample.end() - 1, in.begin() + (size_t)b * L);
          std::copy(sample.begin() + 1, sample.end(), tgt.begin() + (size_t)b * L);
        }
        model->reset_cache();
        for (int c0 = 0; c0 < L; c0 += C) {
          const int n = std::min(C, L - c0);
          for (int b = 0; b < B; ++b) {
            std::copy_n(in.data() + (size_t)b * L + c0, n, cin.data() + (size_t)b * n);
            std::copy_n(tgt.data() + (size_t)b * L + c0, n, ctgt.data() + (size_t)b * n);
          }
          model->forward_cached_loss(cin.data(), ctgt.data(), n, closs.data(), carg.data());
          for (int b = 0; b < B; ++b) {
            std::copy_n(closs.data() + (size_t)b * n, n, loss.data() + (size_t)b * L + c0);
            std::copy_n(carg.data() + (size_t)b * n, n, arg.data() + (size_t)b * L + c0);
          }
        }
        for (int b = 0; b < rows; ++b)
          cell.score.add(arg.data() + (size_t)b * L, tgt.data() + (size_t)b * L, loss.data() + (size_t)b * L,
                         ans.data() + (size_t)b * na, na);
        work_done += rows;
        report_progress(opts.progress,
                        std::string(task.name()) + " at " + std::to_string(L) + " tokens" +
                            (depths[di] >= 0 ? " (depth " + std::to_string(depths[di]).substr(0, 4) + ")" : std::string()),
                        work_done, work_total, "samples");
      }
      cell.seconds = timer.seconds();
      rep.cells.push_back(cell);
    }
  }
  return rep;
}

nlohmann::json task_report_json(const TaskEvalReport& rep) {
  using nlohmann::json;
  json cells = json::array();
  for (const auto& c : rep.cells) {
    json j{{"length", c.length}, {"multiple", double(c.length) / rep.train_len}, {"applicable", c.applicable}};
    if (c.depth >= 0) j["depth"] = c.depth;
    if (!c.applicable) {
      j["reason"] = "learned positions are undefined beyond model.seq_len";
      j["strict_accuracy"] = nullptr;
      j["token_accuracy"] = nullptr;
      j["answer_logprob"] = nullptr;
    } else {
      j["samples"] = c.score.samples;
      j["solved"] = c.score.solved;
      j["strict_accuracy"] = c.score.strict_accuracy();
      j["answer_tokens"] = c.score.answer_tokens;
      j["token_accuracy"] = c.score.token_accuracy();
      j["answer_logprob"] = c.score.mean_logprob();
      j["seconds"] = c.seconds;
    }
    cells.push_back(j);
  }
  return json{{"format", "attnlab-task-eval"}, {"version", 1},        {"task", rep.task},   {"params", rep.params},
              {"train_len", rep.train_len},  {"pos", rep.pos},       {"samples", rep.samples},
              {"seed", rep.seed},            {"batch_size", rep.batch_size}, {"chunk", rep.chunk}, {"cells", cells}};
}

std::string task_report_table(const TaskEvalReport& rep) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "task %s: T_train %d, attn.pos %s, %d samples per cell, seed %llu\n", rep.task.c_str(),
                rep.train_len, rep.pos.c_str(), rep.samples, (unsigned long long)rep.seed);
  out += line;
  std::snprintf(line, sizeof line, "%8s %6s %6s %8s %9s %12s %8s\n", "length", "xT", "depth", "strict", "per-token", "log p(ans)",
                "seconds");
  out += line;
  for (const auto& c : rep.cells) {
    char depth[16] = "-";
    if (c.depth >= 0) std::snprintf(depth, sizeof depth, "%.2f", c.depth);
    if (!c.applicable)
      std::snprintf(line, sizeof line, "%8d %6.2f %6s %8s %9s %12s %8s\n", c.length, double(c.length) / rep.train_len, depth, "N/A",
                    "N/A", "N/A", "-");
    else
      std::snprintf(line, sizeof line, "%8d %6.2f %6s %8.3f %9.3f %12.3f %8.1f\n", c.length, double(c.length) / rep.train_len, depth,
                    c.score.strict_accuracy(), c.score.token_accuracy(), c.score.mean_logprob(), c.seconds);
    out += line;
  }
  return out;
}

}  // namespace attnlab::tasks
