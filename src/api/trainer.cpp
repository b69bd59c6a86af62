// attnlab::api::train (include/attnlab/trainer.h): the library's training loop (train/trainer.h)
// with its event callbacks, fed by a public DataSource through the internal TrainData interface.
#include <cmath>
#include <memory>

#include "api/internal.h"
#include "attnlab/trainer.h"
#include "core/denormals.h"
#include "core/error.h"

namespace attnlab::api {
namespace {

// A public DataSource as the training loop's TrainData. Its resume position is the number of
// batches drawn (DataLoader::State{0, batches}); validation draws from params.validation.
class SourceTrainData final : public TrainData {
 public:
  SourceTrainData(DataSource& source, DataSource* validation, int B, int T)
      : source_(source), validation_(validation), B_(B), T_(T) {
    if (validation_) {
      val_inputs_.resize((size_t)B * T);
      val_targets_.resize((size_t)B * T);
    }
  }
  void next(int32_t* inputs, int32_t* targets, float*) override {
    source_.next(inputs, targets, B_, T_);
    ++batches_;
  }
  DataLoader::State state() const override { return {0, batches_}; }
  void restore(DataLoader::State s) override {
    if (s.epoch != 0) fail("resume: the checkpoint's data position (epoch ", s.epoch, ") was not written by a DataSource run");
    source_.skip(s.index, B_, T_);
    batches_ = s.index;
  }
  EvalResult validate(GPT<float>& model, int max_batches) override {
    if (!validation_) return {NAN, 1};  // mean() = NaN: no validation data
    EvalResult r;
    for (int i = 0; i < std::max(max_batches, 1); ++i) {
      validation_->next(val_inputs_.data(), val_targets_.data(), B_, T_);
      r.loss_sum += model.eval_loss(val_inputs_.data(), val_targets_.data());
      r.count += (size_t)model.count_valid(val_targets_.data(), val_targets_.size());
    }
    return r;
  }
  std::string describe() const override {
    return source_.describe() + (validation_ ? "; validation: " + validation_->describe() : "; no validation data");
  }

 private:
  DataSource& source_;
  DataSource* validation_;
  int B_, T_;
  uint64_t batches_ = 0;
  std::vector<int32_t> val_inputs_, val_targets_;
};

}  // namespace

ProgressFn progress_fn(const ProgressCallback& callback) {
  if (!callback) return {};
  auto eta = std::make_shared<EtaEstimate>();
  return [callback, eta](const std::string& stage, int64_t done, int64_t total, const char* unit) {
    Progress p;
    p.stage = stage;
    p.done = done;
    p.total = total;
    p.unit = unit;
    p.eta_seconds = eta->update(done, total);
    p.elapsed_seconds = eta->elapsed();
    callback(p);
  };
}

TrainOptions train_options(const TrainParams& p) {
  TrainOptions o;
  o.resume = p.resume;
  o.stop_after = p.stop_after;
  o.force = p.force;
  o.quiet = p.quiet;
  o.data_parallel = true;  // under a DistributedSession of N processes: one model across them (docs/distributed.md)
  o.on_step = p.on_step;
  if (p.on_eval) o.on_eval = [f = p.on_eval](int64_t step, double val_loss, size_t) { f(step, val_loss); };
  return o;
}

TrainResult train_result(const TrainSummary& s) {
  TrainResult r;
  r.steps = s.steps;
  r.steps_this_run = s.steps_this_run;
  r.last_train_loss = s.last_train_loss;
  r.val_loss = s.val_loss;
  r.tokens_per_s = s.tokens_per_s;
  r.train_seconds = s.train_seconds;
  r.num_params = s.num_params;
  r.checkpoint = s.checkpoint;
  r.losses = s.losses;
  r.skipped_steps = s.skipped_steps;
  r.interrupted = s.interrupted;
  return r;
}

TrainParams default_train_params() { return TrainParams{}; }

void request_train_stop() { attnlab::request_stop(); }

TrainResult train(const Config& config, const TrainParams& params) {
  if (params.validation) fail("TrainParams::validation: only for a DataSource; training on data.dir validates on its val.bin");
  const attnlab::Config cfg = resolve(config);
  ScopedFlushDenormals flush;
  return train_result(attnlab::train(cfg, train_options(params)));
}

TrainResult train(const Config& config, DataSource& source, const TrainParams& params) {
  const attnlab::Config cfg = resolve(config);
  SourceTrainData data(source, params.validation, cfg.train.batch_size, cfg.model.seq_len);
  ScopedFlushDenormals flush;
  return train_result(attnlab::train(cfg, train_options(params), data));
}

}  // namespace attnlab::api
