// Synthetic long-context tasks (docs/long-context.md; docs/mechanisms.md §8.7, §8.8; MQAR): the
// 70-id character tokenizer, fixed bytes for a fixed seed, the layouts (answers where the spec puts
// them), the loss weights, the metrics on a perfect and a uniform predictor, and training through
// the ordinary training loop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "experiment/tasks.h"
#include "kernels/cross_entropy.h"
#include "model/config.h"
#include "model/gpt.h"

using namespace attnlab;
using namespace attnlab::tasks;

namespace {
uint64_t fnv1a(const std::vector<int32_t>& v, uint64_t h = 1469598103934665603ULL) {
  for (int32_t x : v)
    for (int k = 0; k < 4; ++k) h = (h ^ ((uint32_t)x >> (8 * k) & 0xff)) * 1099511628211ULL;
  return h;
}

struct Sample {
  std::vector<int32_t> tok, ans;
  std::string text() const { return CharTokenizer::decode(tok.data(), tok.size()); }
};
Sample make(const Task& t, int Ls, double depth, uint64_t seed, uint64_t i) {
  Sample s;
  s.tok.resize(Ls);
  s.ans.resize(t.answer_count(Ls));
  Rng rng = sample_rng(seed, kStreamEval, 0, i);
  t.sample(Ls, depth, rng, s.tok.data(), s.ans.data());
  return s;
}

std::unique_ptr<Task> task(const std::string& name, int T = 128) {
  TaskParams p;
  p.name = name;
  return Task::make(p, T);
}
}  // namespace

TEST(Tasks, CharTokenizerHas70Ids) {
  const std::string all = "abcdefghijklmnopqrstuvwxyz0123456789 :;,.?+-_=/'\"[](){}<>#@!$%^&*|\\";
  ASSERT_EQ(all.size(), 67u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(CharTokenizer::encode(all[i]), int32_t(3 + i));
    EXPECT_EQ(CharTokenizer::decode(int32_t(3 + i)), all[i]);
  }
  EXPECT_EQ(CharTokenizer::encode('A'), CharTokenizer::encode(' '));  // anything else is a space
  EXPECT_EQ(CharTokenizer::encode('\n'), 39);
  EXPECT_EQ(CharTokenizer::decode(1), '\0');
}

// The same seed gives the same bytes, on any machine (our own RNG, no std distributions): hashes of
// 64 samples per task (Ls = 129, depth 0.3, seed 42) recorded once. Another seed gives other bytes.
TEST(Tasks, FixedSeedFixedBytes) {
  const std::pair<const char*, uint64_t> expect[] = {
      {"passkey", 0x34b4babe5bbe1aa1ULL}, {"needle", 0x045c44c7af385222ULL}, {"mqar", 0x4ae3788d62173923ULL}};
  for (const auto& [name, h_expected] : expect) {
    SCOPED_TRACE(name);
    auto t = task(name);
    uint64_t h = 1469598103934665603ULL, h2 = h;
    for (int i = 0; i < 64; ++i) {
      h = fnv1a(make(*t, 129, 0.3, 42, i).tok, h);
      h2 = fnv1a(make(*t, 129, 0.3, 43, i).tok, h2);
    }
    uint64_t again = 1469598103934665603ULL;
    for (int i = 0; i < 64; ++i) again = fnv1a(make(*t, 129, 0.3, 42, i).tok, again);
    EXPECT_EQ(h, again);
    EXPECT_NE(h, h2);
    EXPECT_EQ(h, h_expected);
  }
}

// §8.7: " system log: " + filler[:p] + "passkey: " + key + " " + filler[p:] + " q: what is the
// passkey? a: " + key; 8 digits; filler from a–z and space; p = floor(U·F), U ∈ [0, 0.8); the answer
// is the last 8 targets.
TEST(Tasks, PasskeyLayout) {
  auto t = task("passkey");
  for (int Ls : {68, 129, 1025}) {
    const int F = Ls - 67;
    for (int i = 0; i < 50; ++i) {
      const Sample s = make(*t, Ls, 0, 5, i);
      const std::string x = s.text();
      ASSERT_EQ((int)x.size(), Ls);
      ASSERT_EQ(x.rfind(" system log: ", 0), 0u);
      const size_t k = x.find("passkey: ");
      ASSERT_NE(k, std::string::npos);
      const int p = (int)k - 13;
      EXPECT_GE(p, 0);
      EXPECT_LE(p, (int)std::floor(0.8 * F));
      const std::string key = x.substr(k + 9, 8);
      for (char c : key) EXPECT_TRUE(c >= '0' && c <= '9');
      EXPECT_EQ(x[k + 17], ' ');
      EXPECT_EQ(x.substr(Ls - 36), " q: what is the passkey? a: " + key);
      for (size_t j = 13; j < k; ++j) EXPECT_TRUE((x[j] >= 'a' && x[j] <= 'z') || x[j] == ' ');
      // Answer = last 8 targets; target index t is token t + 1.
      ASSERT_EQ(s.ans.size(), 8u);
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(s.ans[j], Ls - 9 + j);
        EXPECT_EQ(s.tok[s.ans[j] + 1], CharTokenizer::encode(key[j]));
      }
    }
  }
}

// §8.8: " doc: " + left + "needle: " + needle + " " + right + " q: what is the needle? a: " +
// needle; the header at clamp(floor(depth·(L−39)), 6, L−39), moved left so the right filler is
// never negative.
TEST(Tasks, NeedleLayout) {
  auto t = task("needle");
  for (int Ls : {66, 129, 513})
    for (double depth : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      const Sample s = make(*t, Ls, depth, 9, 1);
      const std::string x = s.text();
      ASSERT_EQ((int)x.size(), Ls);
      ASSERT_EQ(x.rfind(" doc: ", 0), 0u);
      const int start = (int)x.find("needle: ");
      const int want = std::min(std::clamp((int)std::floor(depth * (Ls - 39)), 6, Ls - 39), Ls - 60);
      EXPECT_EQ(start, want) << "Ls " << Ls << " depth " << depth;
      const std::string needle = x.substr(start + 8, 12);
      for (char c : needle) EXPECT_TRUE(c >= 'a' && c <= 'd');
      EXPECT_EQ(x.substr(Ls - 39), " q: what is the needle? a: " + needle);
      for (int j = 0; j < 12; ++j) EXPECT_EQ(s.tok[s.ans[j] + 1], CharTokenizer::encode(needle[j]));
    }
}

// MQAR: BOS, D pairs with distinct keys, then Q queries of those keys in the padded region; each
// answer target is the value paired with the queried key.
TEST(Tasks, MqarLayout) {
  TaskParams p;
  p.name = "mqar";
  p.mqar_keys = 32;
  p.kv_pairs = 8;
  p.queries = 6;
  auto t = Task::make(p, 64);
  EXPECT_EQ(t->vocab_size(), 67);
  for (int Ls : {65, 257}) {
    const Sample s = make(*t, Ls, 0, 3, 2);
    EXPECT_EQ(s.tok[0], CharTokenizer::kBos);
    std::vector<int> value_of(32, -1);
    for (int i = 0; i < 8; ++i) {
      const int k = s.tok[1 + 2 * i] - 3, v = s.tok[2 + 2 * i] - 3 - 32;
      ASSERT_TRUE(k >= 0 && k < 32 && v >= 0 && v < 32);
      EXPECT_EQ(value_of[k], -1);  // distinct keys
      value_of[k] = v;
    }
    int queries = 0;
    for (int i = 17; i < Ls; ++i) queries += s.tok[i] != CharTokenizer::kPad;
    EXPECT_EQ(queries, 12);
    ASSERT_EQ(s.ans.size(), 6u);
    for (int a : s.ans) {
      ASSERT_GE(a, 17);
      const int k = s.tok[a] - 3;
      ASSERT_TRUE(k >= 0 && k < 32 && value_of[k] >= 0);
      EXPECT_EQ(s.tok[a + 1] - 3 - 32, value_of[k]);
    }
  }
  EXPECT_THROW(Task::make(TaskParams{"mqar", 4, 8, 0}, 64), Error);  // more pairs than keys
  EXPECT_THROW(Task::make(TaskParams{"mqar", 64, 20, 20}, 64), Error);  // does not fit T
}

// The loss weights of a micro-batch sum to B·T; passkey: (mean CE + 10·mean answer CE)/11, i.e.
// 1/11 everywhere plus (10/11)·T/8 on the answer; needle and mqar: T/n_answer on the answer only.
// next() advances, restore() replays.
TEST(Tasks, TrainingBatchesAndWeights) {
  const int B = 3, T = 96;
  for (const char* name : {"passkey", "needle", "mqar"}) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Task> t = task(name, T);
    TaskTrainData d(t, B, T, 11);
    std::vector<int32_t> in(B * T), tg(B * T), in2(B * T), tg2(B * T);
    std::vector<float> w(B * T), w2(B * T);
    d.next(in.data(), tg.data(), w.data());
    double sum = 0;
    for (float x : w) sum += x;
    EXPECT_NEAR(sum, B * T, 1e-3);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i + 1 < T; ++i) EXPECT_EQ(tg[b * T + i], in[b * T + i + 1]);
    if (std::string(name) == "passkey") {
      EXPECT_FLOAT_EQ(w[0], 1.0f / 11);
      EXPECT_FLOAT_EQ(w[T - 1], float(1.0 / 11 + 10.0 / 11 * T / 8));
    }
    const auto st = d.state();
    d.next(in.data(), tg.data(), w.data());
    d.restore(st);
    d.next(in2.data(), tg2.data(), w2.data());
    EXPECT_EQ(in, in2);
    EXPECT_EQ(w, w2);
  }
}

// Strict accuracy: a perfect predictor solves every sample (1); a predictor that guesses each of
// the 8 digits uniformly solves one with probability 10⁻⁸, so over 256 samples P(any solved) ≤
// 256·10⁻⁸ = 2.6e-6: the strict accuracy is 0. Its per-token accuracy is 1/10 with standard
// error √(0.09/2048) = 0.0066; we allow 5 of them.
TEST(Tasks, StrictAccuracyPerfectAndUniform) {
  auto t = task("passkey");
  const int Ls = 129, T = Ls - 1, n = 256;
  AnswerScore perfect, uniform;
  Rng guess(5);
  std::vector<float> zero(T, 0.0f);
  for (int i = 0; i < n; ++i) {
    const Sample s = make(*t, Ls, 0, 1, i);
    std::vector<int32_t> tg(s.tok.begin() + 1, s.tok.end()), arg = tg;
    perfect.add(arg.data(), tg.data(), zero.data(), s.ans.data(), 8);
    for (int a : s.ans) arg[a] = CharTokenizer::encode(char('0' + guess.below(10)));
    uniform.add(arg.data(), tg.data(), zero.data(), s.ans.data(), 8);
  }
  EXPECT_EQ(perfect.strict_accuracy(), 1.0);
  EXPECT_EQ(perfect.token_accuracy(), 1.0);
  EXPECT_EQ(uniform.strict_accuracy(), 0.0);
  EXPECT_NEAR(uniform.token_accuracy(), 0.1, 5 * 0.0066);
}

// The whole evaluation path on a model whose logits are all 0 (wte = 0): a uniform predictor over
// 70 ids. Its answer log-probability is 8·ln(1/70) = −33.99 (float logits of exactly 0: the
// log-sum-exp is ln 70 to within a few ulps), and argmax takes the lowest id among ties (<pad>),
// never a digit: strict and per-token accuracy 0. Learned positions give N/A beyond T_train.
TEST(Tasks, UniformModelThroughEvaluation) {
  const Config cfg = resolve_config(parse_config_text(
      "model.n_layer = 1\nmodel.d_model = 32\nmodel.n_head = 2\nmodel.seq_len = 80\nmodel.vocab_size = 70\nattn.pos = \"learned\"\n", "t"));
  auto make_model = [&] {
    auto m = std::make_unique<GPT<float>>(cfg);
    m->init_weights(1);
    std::fill(m->param("wte"), m->param("wte") + 70 * 32, 0.0f);
    return m;
  };
  auto t = task("passkey", 80);
  TaskEvalOptions o;
  o.lengths = {80, 160};
  o.samples = 20;
  o.batch_size = 8;
  o.chunk = 32;
  const auto rep = evaluate_task(*t, make_model, o);
  ASSERT_EQ(rep.cells.size(), 2u);
  const auto& c = rep.cells[0];
  EXPECT_EQ(c.score.samples, 20u);
  EXPECT_EQ(c.score.strict_accuracy(), 0.0);
  EXPECT_EQ(c.score.token_accuracy(), 0.0);
  EXPECT_NEAR(c.score.mean_logprob(), -8 * std::log(70.0), 1e-4);
  EXPECT_FALSE(rep.cells[1].applicable);
  EXPECT_TRUE(task_report_json(rep)["cells"][1]["strict_accuracy"].is_null());
}

// Training on a task is `train()` with TaskTrainData: the loop, AdamW and the checkpoint are the
// ordinary ones. A few steps of MQAR at a high learning rate lower the weighted loss.
TEST(Tasks, TrainsThroughTheTrainingLoop) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attnlab_test_tasks_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TaskParams p{"mqar", 8, 4, 4};
  std::shared_ptr<const Task> t = Task::make(p, 32);
  const Config cfg = resolve_config(parse_config_text(
      "model.n_layer = 2\nmodel.d_model = 32\nmodel.n_head = 2\nmodel.seq_len = 32\nmodel.vocab_size = 19\n"
      "train.batch_size = 8\ntrain.steps = 30\ntrain.warmup = 2\ntrain.lr = 1e-2\ntrain.eval_every = 0\ntrain.eval_batches = 2\n"
      "train.out_dir = \"" + dir.string() + "\"\n", "t"));
  TaskTrainData data(t, 8, 32, 1);
  TrainOptions opts;
  opts.quiet = true;
  const TrainSummary s = train(cfg, opts, data);
  ASSERT_EQ(s.losses.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += s.losses[i], last += s.losses[25 + i];
  EXPECT_LT(last, first);
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  fs::remove_all(dir);
}

// The loss weights inside the fused LM head: row i's gradient is grad_scale·w_i·(p − onehot) and the
// return value Σ w_i·loss_i. Checked against unweighted calls on one row at a time with grad_scale·w_i
// (the same operations per row, so equal to rounding of the shared GEMMs: 1e-6 relative), weight 0
// gives a zero dx row, and all-ones weights equal no weights bit for bit. The argmax output of the
// loss-only head equals the argmax of the full logits.
TEST(Tasks, WeightedLmHeadAndArgmax) {
  const int N = 6, C = 8, V = 11;
  Rng r(2);
  std::vector<float> x(N * C), wte(V * C), w = {0.5f, 0.0f, 2.0f, 1.0f, 3.0f, 0.25f}, ones(N, 1.0f);
  for (auto& v : x) v = (float)r.normal();
  for (auto& v : wte) v = (float)r.normal();
  std::vector<int32_t> tg = {1, 4, 10, 0, 7, 3};
  std::vector<float> scratch(kernels::lm_head_scratch_size(4, V)), losses(N);
  std::vector<float> dx(N * C), dwte(V * C, 0.0f), dx1(N * C), dwte1(V * C, 0.0f), dxr(C), dwter(V * C, 0.0f);
  const double total = kernels::lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(), tg.data(), N, C,
                                                            V, 0.1f, scratch.data(), 4, w.data());
  double want = 0;
  for (int i = 0; i < N; ++i) {
    want += (double)w[i] * (double)losses[i];
    kernels::lm_head_ce_forward_backward(dxr.data(), dwter.data(), (float*)nullptr, x.data() + i * C, wte.data(), tg.data() + i, 1, C, V,
                                         0.1f * w[i], scratch.data(), 4);
    for (int c = 0; c < C; ++c) EXPECT_NEAR(dx[i * C + c], dxr[c], 1e-6 * (1 + std::fabs(dxr[c])));
    if (w[i] == 0) {
      for (int c = 0; c < C; ++c) EXPECT_EQ(dx[i * C + c], 0.0f);
    }
  }
  for (int k = 0; k < V * C; ++k) EXPECT_NEAR(dwte[k], dwter[k], 1e-6 * (1 + std::fabs(dwter[k])));
  EXPECT_NEAR(total, want, 1e-9 * want);
  std::vector<float> dx0(N * C), dwte0(V * C, 0.0f);
  const double t1 = kernels::lm_head_ce_forward_backward(dx1.data(), dwte1.data(), (float*)nullptr, x.data(), wte.data(), tg.data(), N, C,
                                                         V, 0.1f, scratch.data(), 4, ones.data());
  const double t0 = kernels::lm_head_ce_forward_backward(dx0.data(), dwte0.data(), (float*)nullptr, x.data(), wte.data(), tg.data(), N, C,
                                                         V, 0.1f, scratch.data(), 4);
  EXPECT_EQ(t1, t0);
  EXPECT_EQ(dx1, dx0);
  EXPECT_EQ(dwte1, dwte0);
  std::vector<int32_t> arg(N);
  std::vector<float> logits(N * V);
  kernels::lm_head_ce_forward(losses.data(), x.data(), wte.data(), tg.data(), N, C, V, scratch.data(), 4, arg.data());
  kernels::lm_head_logits(logits.data(), x.data(), wte.data(), N, C, V);
  for (int i = 0; i < N; ++i)
    EXPECT_EQ(arg[i], int32_t(std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) - (logits.begin() + i * V)));
}
