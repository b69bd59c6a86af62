// Synthetic long-context tasks, generated from a seed (docs/long-context.md): passkey retrieval
// (docs/mechanisms.md §8.7), needle in a haystack (§8.8) and multi-query associative recall (MQAR,
// after Zoology). Training goes through the ordinary training loop (train/trainer.h) with a
// TrainData that yields task batches and per-token loss weights; evaluation is teacher-forced, in
// KV-cached chunks, at several lengths.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/progress.h"
#include "core/rng.h"
#include "train/trainer.h"

namespace attnlab::tasks {

// §8.7's character tokenizer: 70 ids. 0 <pad>, 1 <bos>, 2 <eos>, then a–z, 0–9, space and
// :;,.?+-_=/'"[](){}<>#@!$%^&*|\ in this order. Any other character encodes as a space.
struct CharTokenizer {
  static constexpr int kVocab = 70, kPad = 0, kBos = 1, kEos = 2;
  static int32_t encode(char c);
  static char decode(int32_t id);  // the character; '\0' for the three control ids
  static std::vector<int32_t> encode(std::string_view s);
  static std::string decode(const int32_t* ids, size_t n);
};

// MQAR's largest K (the generator's stack arrays), and the most needle depths an evaluation takes
// (sample i of cell (length L, depth index d) is drawn from stream L·64 + d).
inline constexpr int kMqarMaxKeys = 4096, kMaxNeedleDepths = 64;

struct TaskParams {
  std::string name;       // passkey | needle | mqar
  // MQAR only (0: defaults from the sequence length, see docs/long-context.md).
  int mqar_keys = 0;      // K keys and K values: vocabulary 3 + 2K (0: 64)
  int kv_pairs = 0;       // D key-value pairs (default min(K, T_train/8))
  int queries = 0;        // Q queries (default D)
};

// MQAR's K, D and Q with the defaults of TaskParams applied for a model of train_len tokens (not
// checked: Task::make checks them).
struct MqarShape {
  int keys = 0, kv_pairs = 0, queries = 0;
};
MqarShape mqar_shape(const TaskParams& p, int train_len);

// A task generates samples of Ls tokens: the model reads tokens [0, Ls−1) and predicts [1, Ls).
// The answer is a set of target indices (into the Ls−1 targets) that are scored.
class Task {
 public:
  virtual ~Task() = default;
  static std::unique_ptr<Task> make(const TaskParams& p, int train_len);
  virtual const char* name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int min_length() const = 0;      // smallest Ls the layout fits in
  virtual int answer_count(int Ls) const = 0;
  // Writes one sample into out[0, Ls) and the answer's target indices into ans[0, answer_count).
  // depth ∈ [0, 1]: the needle's depth (needle only; ignored by the others). Allocates nothing.
  virtual void sample(int Ls, double depth, Rng& rng, int32_t* out, int32_t* ans) const = 0;
  // Loss weighting in training: weight = all_weight + answer_weight·[answer], normalised so the
  // weights of a sample sum to its number of targets (passkey: (mean CE + 10·mean answer CE)/11).
  virtual double all_weight() const = 0;   // share of the plain mean: 1/11 for passkey, 0 otherwise
  virtual bool uses_depth() const { return false; }
  // Parameters that must match between training and evaluation (for the report).
  virtual nlohmann::json describe() const { return nlohmann::json{{"task", name()}}; }
};

// A sample's RNG: a pure function of (seed, stream, a, b), so any sample can be regenerated alone.
Rng sample_rng(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b);
// The fixed streams: training batches, training depths, validation, evaluation.
inline constexpr uint64_t kStreamTrain = 1, kStreamTrainDepth = 2, kStreamVal = 3, kStreamEval = 4;

// The training source: micro-batch k, row b is sample_rng(seed, kStreamTrain, k, b); the needle's
// depth of micro-batch k is 0.1 + 0.8·U from sample_rng(seed, kStreamTrainDepth, k, 0) (one per
// batch, §8.8). Validation: eval_batches fixed batches from kStreamVal.
class TaskTrainData final : public TrainData {
 public:
  TaskTrainData(std::shared_ptr<const Task> task, int B, int T, uint64_t seed);
  void next(int32_t* inputs, int32_t* targets, float* weights) override;
  bool weighted() const override { return true; }
  DataLoader::State state() const override { return {0, batch_}; }
  void restore(DataLoader::State s) override { batch_ = s.index; }
  EvalResult validate(GPT<float>& model, int max_batches) override;
  std::string describe() const override;
  // Batch k of a stream, without touching the training position (tests).
  void batch(uint64_t stream, uint64_t k, int32_t* inputs, int32_t* targets, float* weights) const;

 private:
  std::shared_ptr<const Task> task_;
  int B_, T_;
  uint64_t seed_, batch_ = 0;
  mutable std::vector<int32_t> sample_, ans_;
  std::vector<int32_t> vin_, vtgt_;
  std::vector<float> vw_, vloss_;
};

// Scores teacher-forced predictions of one sample's answer: argmax ids and per-token losses at
// every target, the targets, the answer's indices. Adds to the counters.
struct AnswerScore {
  size_t samples = 0, solved = 0, answer_tokens = 0, correct_tokens = 0;
  double logprob_sum = 0;  // Σ over samples of the answer's log-probability (Σ over its tokens)
  void add(const int32_t* argmax, const int32_t* targets, const float* losses, const int32_t* ans, int n_ans);
  double strict_accuracy() const { return samples ? double(solved) / samples : 0; }
  double token_accuracy() const { return answer_tokens ? double(correct_tokens) / answer_tokens : 0; }
  double mean_logprob() const { return samples ? logprob_sum / samples : 0; }
};

struct TaskEvalOptions {
  std::vector<int> lengths;                 // tokens the model reads (Ls − 1), from parse_lengths
  std::vector<double> depths;               // needle: the depth grid (default 0.1, 0.3, 0.5, 0.7, 0.9)
  int samples = 256;                        // per cell
  uint64_t seed = 1;
  int batch_size = 8, chunk = 0;            // chunk 0: T_train
  ProgressFn progress;                      // samples over every cell, after each batch; Ctrl-C stops there
};

struct TaskCell {
  int length = 0;
  double depth = -1;  // needle only
  bool applicable = true;
  AnswerScore score;
  double seconds = 0;
};

struct TaskEvalReport {
  std::string task;
  nlohmann::json params;
  int train_len = 0;
  std::string pos;
  int samples = 0, batch_size = 0, chunk = 0;
  uint64_t seed = 0;
  std::vector<TaskCell> cells;
};

// make_model returns a fresh model per length (each length plans its own KV cache).
TaskEvalReport evaluate_task(const Task& task, const std::function<std::unique_ptr<GPT<float>>()>& make_model,
                             const TaskEvalOptions& opts);
nlohmann::json task_report_json(const TaskEvalReport& r);
std::string task_report_table(const TaskEvalReport& r);

}  // namespace attnlab::tasks
