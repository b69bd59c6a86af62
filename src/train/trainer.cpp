#include "train/trainer.h"

#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "attnlab/distributed.h"
#include "core/distributed.h"
#include "core/error.h"
#include "core/files.h"
#include "core/gemm.h"
#include "core/json.h"
#include "core/peak.h"
#include "core/stop_signals.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "train/data_parallel.h"
#include "train/environment.h"
#include "train/schedule.h"

namespace attnlab {

namespace {
// Ctrl-C / SIGTERM (core/stop_signals.h): finish the current step, evaluate, write a checkpoint
// and return.
//
// request_stop(): the same clean stop asked for by code (the Python package's Ctrl-C handler, a
// callback) instead of a signal. An atomic store, so any thread (or a signal handler) may set it.
std::atomic<bool> g_stop_requested{false};

// A number for the JSON log: %.9g, or null when it is NaN or infinite (JSON has no such numbers).
// Writes into buf (no allocation: the step loop allocates nothing).
const char* json_number(char* buf, size_t size, double x) {
  if (!std::isfinite(x)) return "null";
  std::snprintf(buf, size, "%.9g", x);
  return buf;
}

bool write_all_fd(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

// metrics.jsonl, written line by line with write(2), every error reported (a log on a full disk,
// or symlinked to /dev/full, must not be lost silently). A fresh run starts it empty; a resumed
// run keeps only the lines of steps up to the checkpoint's (lines of a run killed after it, and a
// torn last line, are dropped), so each step appears once.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool resume, int64_t resume_step) : path_(path) {
    if (resume) keep_up_to(resume_step);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : O_TRUNC), 0644);
    if (fd_ < 0) {
      const int err = errno;
      fail("cannot write the metrics log ", path, ": ", std::strerror(err));
    }
  }
  ~MetricsLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const char* line, size_t n) {
    if (!write_all_fd(fd_, line, n)) {
      const int err = errno;
      fail("cannot write the metrics log ", path_, ": ", std::strerror(err),
           " (checkpoints written so far are intact; free space or fix the path and resume)");
    }
  }
  void write(const std::string& line) { write(line.data(), line.size()); }

 private:
  void keep_up_to(int64_t step) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;  // no log yet (the resumed run writes to another out_dir)
    std::string kept, line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline at the end: a line torn by a kill
      try {
        const auto j = nlohmann::json::parse(line);
        if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
          kept += line + "\n";
      } catch (const nlohmann::json::exception&) {
        // not JSON (a torn or foreign line): dropped
      }
    }
    in.close();
    TempFile t = create_temp_beside(path_);
    if (t.fd < 0) {
      const int err = errno;
      fail("cannot rewrite the metrics log ", path_, ": cannot create ", t.path, " (", std::strerror(err), ")");
    }
    const bool ok = write_all_fd(t.fd, kept.data(), kept.size()) && ::fsync(t.fd) == 0;
    const int err = errno;
    ::close(t.fd);
    if (!ok || ::rename(t.path.c_str(), path_.c_str()) != 0) {
      const int e = ok ? errno : err;
      ::unlink(t.path.c_str());
      fail("cannot rewrite the metrics log ", path_, ": ", std::strerror(e));
    }
  }
  std::string path_;
  int fd_ = -1;
};

// step_NNNNNN.safetensors and model.safetensors in dir: the checkpoints of a run.
std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool step_file = name.rfind("step_", 0) == 0 && name.size() > 17 &&
                           name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (step_file || name == "model.safetensors") out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string format_eta(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const int m = int(s) / 60, sec = int(s) % 60;
  std::snprintf(buf, sizeof buf, "%d:%02d", m, sec);
  return buf;
}
}  // namespace

EvalResult evaluate(GPT<float>& model, const Shard& shard, int max_batches, int part, int parts) {
  const int B = model.planned_B(), T = model.planned_T();
  const DataLoader windows(shard, B, T, 0);  // its sequential evaluation order; the seed is unused
  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  EvalResult r;
  const size_t batches = windows.eval_batches(max_batches > 0 ? (size_t)max_batches * (size_t)parts : 0);
  for (size_t k = (size_t)part; k < batches; k += (size_t)parts) {
    const int fresh = windows.eval_batch(k, in.data(), tgt.data());
    // Rows past `fresh` wrap round to windows already scored: ignore their targets (exact mean).
    std::fill(tgt.begin() + (size_t)fresh * T, tgt.end(), -1);
    r.count += (size_t)model.count_valid(tgt.data(), tgt.size());
    r.loss_sum += model.eval_loss(in.data(), tgt.data());
  }
  return r;
}

double training_flops_per_token(const GPT<float>& model, int T) {
  const auto& m = model.config().model;
  double n_matmul = 0;
  for (const auto& s : model.registry().specs())
    if (s.shape.size() == 2 && s.name != "wpe") n_matmul += double(s.numel);  // wte counts once, as the LM head
  // Attention: QKᵀ and PV cost 4·d FLOPs per (query, key) pair and layer forward, 8·d backward;
  // causal, query i has i + 1 keys: (T + 1)/2 pairs per token on average.
  return 6.0 * n_matmul + 12.0 * m.n_layer * m.d_model * (T + 1) / 2.0;
}

double optimizer_step(GPT<float>& model, float* adam_m, float* adam_v, const TrainConfig& tc, double lr, int t) {
  float* params = model.params();
  float* grads = model.grads();
  const size_t total = model.registry().total();
  const double norm = std::sqrt(kernels::l2_norm_squared(grads, total));
  // A NaN or infinite gradient would pass through clipping (NaN > clip is false) and AdamW into
  // every weight: leave everything untouched and let the caller skip the step.
  if (!std::isfinite(norm)) return norm;
  if (tc.grad_clip > 0 && norm > tc.grad_clip) kernels::scale_inplace(grads, total, float(tc.grad_clip / norm));
  // The registry lays decayed tensors out first (§0 policy), so AdamW is two contiguous calls.
  const size_t nd = model.registry().decayed_total();
  kernels::adamw_update(params, grads, adam_m, adam_v, nd, (float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps,
                        (float)tc.weight_decay, t);
  kernels::adamw_update(params + nd, grads + nd, adam_m + nd, adam_v + nd, total - nd, (float)lr, (float)tc.beta1,
                        (float)tc.beta2, (float)tc.eps, 0.0f, t);
  return norm;
}

namespace {
// The default source: shuffled windows of the training shard, validation on the validation shard.
class ShardTrainData final : public TrainData {
 public:
  explicit ShardTrainData(const Config& cfg)
      : cfg_(cfg),
        train_(Shard::open(cfg.data.train)),
        val_(Shard::open(cfg.data.val)),
        loader_(checked(train_, cfg.data.train, "training", cfg.model.seq_len), cfg.train.batch_size, cfg.model.seq_len,
                cfg.train.seed) {
    // The tokenizer (when there is one) against the model's vocabulary. Larger than the model's: the
    // sampler could not embed its ids, an error now rather than at `attnlab sample`. Smaller: the
    // extra rows are never a target and merely waste parameters; `sample` never draws them.
    if (std::error_code ec; std::filesystem::exists(cfg.data.tokenizer, ec)) {
      const Tokenizer tok = Tokenizer::load(cfg.data.tokenizer);
      if (tok.vocab_size() > cfg.model.vocab_size)
        fail("data.tokenizer ", cfg.data.tokenizer, " has ", tok.vocab_size(), " tokens, more than model.vocab_size = ",
             cfg.model.vocab_size, "; set model.vocab_size = ", tok.vocab_size());
      if (tok.vocab_size() < cfg.model.vocab_size)
        std::fprintf(stderr,
                     "warning: model.vocab_size = %d is larger than the %d tokens of %s: ids %d..%d never occur in the data "
                     "(wasted parameters; `attnlab sample` never draws them); set model.vocab_size = %d to match\n",
                     cfg.model.vocab_size, tok.vocab_size(), cfg.data.tokenizer.c_str(), tok.vocab_size(),
                     cfg.model.vocab_size - 1, tok.vocab_size());
    }
    checked(val_, cfg.data.val, "validation", cfg.model.seq_len);
    loader_.validate_vocab(cfg.model.vocab_size);
    DataLoader val_check(val_, 1, cfg.model.seq_len, 0);
    val_check.validate_vocab(cfg.model.vocab_size);
  }
  void next(int32_t* inputs, int32_t* targets, float*) override {
    if (parts_ == 1) loader_.next(inputs, targets);
    else loader_.next_rows(inputs, targets, part_ * rows_, rows_);
  }
  DataLoader::State state() const override { return loader_.state(); }
  void restore(DataLoader::State s) override { loader_.restore(s); }
  EvalResult validate(GPT<float>& model, int max_batches) override { return evaluate(model, val_, max_batches, part_, parts_); }
  bool split(int part, int parts) override {
    part_ = part;
    parts_ = parts;
    rows_ = cfg_.train.batch_size / parts;
    return true;
  }
  std::string describe() const override {
    return "data: " + cfg_.data.train + " (" + std::to_string(train_.size()) + " tokens), " + cfg_.data.val + " (" +
           std::to_string(val_.size()) + " tokens)";
  }

 private:
  static const Shard& checked(const Shard& s, const std::string& path, const char* what, int T) {
    if (s.size() < (size_t)T + 1) fail(what, " data ", path, " has ", s.size(), " tokens, fewer than model.seq_len + 1 = ", T + 1);
    return s;
  }
  const Config& cfg_;
  Shard train_, val_;
  DataLoader loader_;
  int part_ = 0, parts_ = 1, rows_ = 0;  // split(): this rank's rows of every batch
};
}  // namespace

void request_stop() { g_stop_requested.store(true); }

TrainSummary train(const Config& cfg, const TrainOptions& opts) {
  ShardTrainData data(cfg);
  return train(cfg, opts, data);
}

TrainSummary train(const Config& cfg, const TrainOptions& opts, TrainData& loader) {
  const TrainConfig& tc = cfg.train;
  const int B = tc.batch_size, T = cfg.model.seq_len;
  const bool resuming = !opts.resume.empty();
  g_stop_requested.store(false);  // a request stops the run in progress, not a later one
  // Data-parallel training (train/data_parallel.h): N ranks, each with B/N rows of every batch;
  // rank 0, the writer, alone prints, logs and writes files.
  const int ranks = opts.data_parallel ? distributed::size() : 1;
  const bool writer = ranks == 1 || distributed::rank() == 0;
  const bool quiet = opts.quiet || !writer;

  // Every check before training. With several ranks, the errors of all are gathered before any
  // collective starts (distributed::first_error): a rank that cannot start must not leave the
  // others waiting for it, and every rank stops with the same message, printed once.
  DirLock lock;
  std::unique_ptr<GPT<float>> model_holder;
  Buffer adam_m, adam_v;
  TrainingState state;
  std::optional<MetricsLog> metrics;
  auto setup = [&] {
    if (ranks > 1) {
      if (B % ranks != 0)
        fail("train.batch_size = ", B, " does not divide among the ", ranks, " ranks of this job (mpirun -np ", ranks,
             "): each rank trains on train.batch_size / N sequences of every batch; choose a multiple of ", ranks);
      if (!loader.split(distributed::rank(), ranks))
        fail("data-parallel training (", ranks, " ranks) needs the token shards of data.dir; this data source trains in one process");
    }
    // The run directory first: one trainer per directory (a second gets an error naming the holder),
    // temporaries of killed writers removed, and a fresh run never mixed with an earlier run's files.
    if (writer) {
      {
        std::error_code ec;
        std::filesystem::create_directories(tc.out_dir, ec);
        if (ec || !std::filesystem::is_directory(tc.out_dir))
          fail("train.out_dir ", tc.out_dir, ": cannot create the directory (", ec ? ec.message() : "not a directory", ")");
      }
      lock = DirLock::acquire(tc.out_dir, "train.out_dir", "attnlab train");
      if (const size_t stale = remove_stale_temps(tc.out_dir); stale && !opts.quiet)
        std::printf("removed %zu temporary file%s left in %s by a writer that was killed\n", stale, stale == 1 ? "" : "s",
                    tc.out_dir.c_str());
      if (!resuming) {
        const std::vector<std::string> old = checkpoints_in(tc.out_dir);
        if (!old.empty() && !opts.force) {
          std::string list;
          for (size_t i = 0; i < old.size() && i < 3; ++i) list.append(i ? ", " : "").append(old[i]);
          if (old.size() > 3) list += ", ... (" + std::to_string(old.size()) + " files)";
          const std::string newest = std::find(old.begin(), old.end(), "model.safetensors") != old.end() ? "model.safetensors" : old.back();
          fail("train.out_dir ", tc.out_dir, " already holds checkpoints of an earlier run (", list,
               "); a new run would mix its files with them. Continue that run with `attnlab train --resume ", tc.out_dir, "/",
               newest, "`, choose another train.out_dir, or pass --force to delete them and start over");
        }
        for (const auto& name : old) std::filesystem::remove(std::filesystem::path(tc.out_dir) / name);
      }
    }

    model_holder = std::make_unique<GPT<float>>(cfg);
    GPT<float>& model = *model_holder;
    model.init_weights(tc.seed);
    model.plan(B / ranks, T);
    const size_t total = model.registry().total();
    adam_m = Buffer(total * sizeof(float));
    adam_v = Buffer(total * sizeof(float));
    if (resuming) {
      state = load_checkpoint(opts.resume, model, adam_m.as<float>(), adam_v.as<float>());
      if (state.step >= tc.steps)
        fail("checkpoint ", opts.resume, " is at step ", state.step, " and train.steps = ", tc.steps,
             ": there is nothing left to train; raise it, e.g. --set train.steps=", std::max<int64_t>(state.step * 2, 1));
      const Config stored = read_checkpoint_config(opts.resume);
      if (stored.data.train != cfg.data.train) {
        // Other data: the stored position indexes the old shard's windows and means nothing here.
        if (writer) std::fprintf(stderr,
                     "note: data.train is %s, the checkpoint's was %s: the data loader starts at the beginning of the new "
                     "shard (the run is no longer the one the original data would have given)\n",
                     cfg.data.train.c_str(), stored.data.train.c_str());
      } else {
        loader.restore({state.data_epoch, state.data_index});
      }
      // Bitwise-exact continuation needs the same numeric environment (train/environment.h).
      const std::string env = read_checkpoint_environment(opts.resume);
      const std::vector<std::string> diff =
          env.empty() ? std::vector<std::string>{"the checkpoint does not record its environment"} : numeric_environment_differences(env, ranks);
      if (!diff.empty() && writer) {
        std::string list;
        for (const auto& d : diff) list.append(list.empty() ? "" : "; ").append(d);
        std::fprintf(stderr,
                     "warning: resuming %s in another numeric environment (%s): training continues correctly, but not bit "
                     "for bit as the original run would have (that needs the same thread count, data-parallel ranks, CPU ISA, oneDNN build and "
                     "FTZ/DAZ mode)\n",
                     opts.resume.c_str(), list.c_str());
      }
      // The schedule is a function of train.steps, warmup, lr, ...: changing them moves the curve.
      const double lr_was = learning_rate(stored.train, (int)state.step), lr_now = learning_rate(tc, (int)state.step);
      if (writer && std::fabs(lr_now - lr_was) > 1e-9 * std::max(std::fabs(lr_was), 1e-30)) {
        std::string changed;
        auto note = [&](const char* key, double a, double b) {
          if (a != b) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%s%s %g -> %g", changed.empty() ? "" : ", ", key, a, b);
            changed += buf;
          }
        };
        note("train.steps", stored.train.steps, tc.steps);
        note("train.lr", stored.train.lr, tc.lr);
        note("train.warmup", stored.train.warmup, tc.warmup);
        note("train.min_lr_ratio", stored.train.min_lr_ratio, tc.min_lr_ratio);
        note("train.wsd_decay_frac", stored.train.wsd_decay_frac, tc.wsd_decay_frac);
        if (stored.train.schedule != tc.schedule)
          changed.append(changed.empty() ? "" : ", ").append("train.schedule ").append(stored.train.schedule).append(" -> ").append(tc.schedule);
        std::fprintf(stderr,
                     "warning: the learning-rate schedule differs from the checkpoint's (%s): at step %lld the learning "
                     "rate jumps from %.4g (the stored schedule) to %.4g\n",
                     changed.c_str(), (long long)state.step, lr_was, lr_now);
      }
    }
    if (writer) metrics.emplace(tc.out_dir + "/metrics.jsonl", resuming, state.step);
  };
  if (ranks == 1) {
    setup();
  } else {
    std::string mine;
    try {
      setup();
    } catch (const Error& e) {
      mine = e.what();
    }
    if (const std::string error = distributed::first_error(mine); !error.empty()) throw JobError(error);
  }
  GPT<float>& model = *model_holder;
  const size_t total = model.registry().total();
  // The ranks' reductions, and with ZeRO-1 each rank's shard of the moments (the loaded or zero
  // whole ones give it theirs).
  std::unique_ptr<DataParallel> dp;
  if (ranks > 1) {
    dp = std::make_unique<DataParallel>(model, tc);
    if (dp->zero()) {
      Buffer m_shard(dp->moment_elements() * sizeof(float)), v_shard(dp->moment_elements() * sizeof(float));
      dp->take_moments(adam_m.as<float>(), adam_v.as<float>(), m_shard.as<float>(), v_shard.as<float>());
      adam_m = std::move(m_shard);
      adam_v = std::move(v_shard);
    }
  }

  const double flops_tok = training_flops_per_token(model, T);
  const size_t tokens_per_step = (size_t)B * T * tc.grad_accum;
  // The MFU denominator: this machine's FMA peak over the threads the run uses, measured once
  // here (about 0.1 s), not in the step loop.
  const bool bf16 = cfg.train.precision == "bf16";
  const PeakFlops peak = quiet ? PeakFlops{} : peak_flops(omp_threads(), bf16);
  if (!quiet) {
    std::printf("attnlab train: %zu parameters, %.1f MB activations, %s, attention kernels %s, %d threads\n",
                model.num_params(), model.activation_bytes() / 1e6, gemm_backend_name(bf16),
                kernels::attention_kernels().name, omp_threads());
    std::printf("MFU = model FLOPs (%.3g per token) / %.0f GFLOP/s, the %s %s peak of %d threads "
                "(%s overrides)%s\n",
                flops_tok, peak.gflops, peak.source, peak.isa, peak.threads,
                bf16 ? "ATTNLAB_PEAK_GFLOPS_BF16" : "ATTNLAB_PEAK_GFLOPS",
                bf16 ? "; train.precision = bf16: the products on bf16 operands" : "");
    std::printf("%s; %zu tokens per step\n", loader.describe().c_str(), tokens_per_step);
    if (dp)
      std::printf("data-parallel: %d ranks x %d sequences per batch, %zu gradient buckets, %s\n", ranks, B / ranks, dp->buckets(),
                  dp->zero() ? "ZeRO-1 (AdamW moments sharded)" : "AdamW moments on every rank");
    if (resuming) std::printf("resumed from %s at step %lld\n", opts.resume.c_str(), (long long)state.step);
    std::fflush(stdout);
  }

  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  std::vector<float> weights(loader.weighted() ? (size_t)B * T : 0);
  // ZeRO-1 checkpoints: rank 0 gathers the moments here (allocated at the first save).
  Buffer m_all, v_all;
  const float grad_scale = 1.0f / float((size_t)B * T * tc.grad_accum);
  TrainSummary sum;
  sum.losses.reserve(std::max<int64_t>(tc.steps - state.step, 0));
  Timer run_timer;
  double window_time = 0;
  int window_steps = 0;
  int steps_this_run = 0;
  int bad_streak = 0;  // consecutive steps whose update was skipped
  std::string last_checkpoint = resuming ? opts.resume : "none";
  double train_seconds = 0;
  auto checkpoint_path = [&](int64_t step) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "/step_%06lld.safetensors", (long long)step);
    return tc.out_dir + buf;
  };
  auto save = [&](const std::string& path) {
    auto ds = loader.state();
    state.data_epoch = ds.epoch;
    state.data_index = ds.index;
    state.ranks = ranks;
    if (dp) {
      // One checkpoint per step, written by rank 0 alone, with the whole state (ZeRO-1: the moment
      // shards gathered first), in the one-process format: any number of ranks can resume it.
      const float* m = adam_m.as<float>();
      const float* v = adam_v.as<float>();
      if (dp->zero()) {
        if (writer && !m_all.data()) {
          m_all = Buffer(total * sizeof(float));
          v_all = Buffer(total * sizeof(float));
        }
        dp->gather_moments(m, v, m_all.as<float>(), v_all.as<float>());
        m = m_all.as<float>();
        v = v_all.as<float>();
      }
      if (writer) save_checkpoint(path, model, m, v, state);
    } else {
      save_checkpoint(path, model, adam_m.as<float>(), adam_v.as<float>(), state);
    }
    sum.checkpoint = path;
    last_checkpoint = path;
  };
  auto run_eval = [&]() {
    EvalResult r = loader.validate(model, tc.eval_batches);
    if (dp) dp->sum_validation(&r.loss_sum, &r.count);
    sum.val_loss = r.mean();
    if (!quiet) {
      std::printf("step %6lld | val loss %.4f | ppl %.2f\n", (long long)state.step, r.mean(), std::exp(r.mean()));
      std::fflush(stdout);
    }
    // nlohmann writes NaN and Inf as null: the log stays valid JSON.
    if (metrics) metrics->write(nlohmann::json{{"step", state.step}, {"val_loss", r.mean()}, {"val_tokens", r.count}}.dump() + "\n");
    if (opts.on_eval) opts.on_eval(state.step, r.mean(), r.count);
  };

  // Data-parallel: an error on one rank (a full disk under its log, say) must not leave the others
  // waiting in a collective until train.dp_timeout: the job ends at once, this rank saying why.
  try {
    StopSignals signals;
    while (state.step < tc.steps) {
      Timer step_timer;
      model.zero_grad();
      double loss = 0;
      for (int micro = 0; micro < tc.grad_accum; ++micro) {
        loader.next(in.data(), tgt.data(), weights.data());
        // Data-parallel: the last micro-batch's backward starts the gradient sums as layers finish.
        if (dp && micro == tc.grad_accum - 1) dp->arm();
        loss += model.train_micro_step(in.data(), tgt.data(), grad_scale, loader.weighted() ? weights.data() : nullptr);
      }
      // Data-parallel: the sums finished, the step's loss and gradient norm over all ranks, and
      // whether any rank must stop after this step (a signal, the time limit), agreed by all so that
      // they leave the loop at the same step.
      double comm_seconds = 0;
      DataParallel::Totals totals;
      if (dp) {
        comm_seconds = dp->finish_backward();
        totals = dp->totals(loss, stop_requested() || g_stop_requested.load(), tc.time_limit > 0 && run_timer.seconds() >= tc.time_limit,
                            comm_seconds);
        loss = totals.loss_sum;
      }
      loss /= double(tokens_per_step);
      const double lr = learning_rate(tc, (int)state.step);
      // The non-finite guard: a NaN/Inf loss or gradient skips the update (weights and moments stay
      // as after the last good step; optimizer_step changes nothing for a non-finite gradient).
      double norm = NAN;
      if (dp) {
        if (std::isfinite(loss)) norm = totals.norm;
        if (std::isfinite(loss) && std::isfinite(norm)) dp->update(adam_m.as<float>(), adam_v.as<float>(), norm, lr, (int)state.step + 1);
      } else if (std::isfinite(loss)) {
        norm = optimizer_step(model, adam_m.as<float>(), adam_v.as<float>(), tc, lr, (int)state.step + 1);
      }
      const bool updated = std::isfinite(loss) && std::isfinite(norm);
      state.step += 1;
      state.tokens_seen += tokens_per_step;
      ++steps_this_run;
      const double dt = step_timer.seconds();
      window_time += dt;
      ++window_steps;
      sum.losses.push_back(loss);
      sum.last_train_loss = loss;
      // Formatted into fixed buffers: the step loop allocates nothing (tests/test_no_alloc.cpp).
      // Non-finite numbers are written as null (valid JSON), and a skipped step says so.
      char line[320], loss_text[32], norm_text[32];
      // Data-parallel steps add comm_ms, the communication the backward did not hide (the slowest
      // rank's wait for the gradient sums after its backward), and wait_ms, this rank's own wait
      // (comm_ms plus the time it waited for slower ranks).
      const int len = dp ? std::snprintf(line, sizeof line,
                                         "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,%s\"ms\":%.4f,\"comm_ms\":%.4f,"
                                         "\"wait_ms\":%.4f,\"tokens_per_s\":%.1f}\n",
                                         (long long)state.step, json_number(loss_text, sizeof loss_text, loss), lr,
                                         json_number(norm_text, sizeof norm_text, norm), updated ? "" : "\"skipped\":true,", dt * 1e3,
                                         totals.exposed_comm_seconds * 1e3, comm_seconds * 1e3, tokens_per_step / dt)
                         : std::snprintf(line, sizeof line,
                                    "{\"step\":%lld,\"loss\":%s,\"lr\":%.9g,\"grad_norm\":%s,%s\"ms\":%.4f,\"tokens_per_s\":%.1f}\n",
                                    (long long)state.step, json_number(loss_text, sizeof loss_text, loss), lr,
                                    json_number(norm_text, sizeof norm_text, norm), updated ? "" : "\"skipped\":true,", dt * 1e3,
                                    tokens_per_step / dt);
      if (metrics) metrics->write(line, size_t(std::min<int>(len, int(sizeof line) - 1)));
      if (updated) {
        bad_streak = 0;
        // A finite gradient can still push weights to Inf (a huge lr × weight_decay): stop before
        // such weights reach a checkpoint.
        if (!kernels::all_finite(model.params(), total))
          fail("training diverged at step ", state.step, ": the update made some weights NaN or Inf (train.lr = ", tc.lr,
               ", train.weight_decay = ", tc.weight_decay, "); nothing was saved after it (last checkpoint: ", last_checkpoint,
               "); lower train.lr or train.weight_decay");
      } else {
        ++bad_streak;
        ++sum.skipped_steps;
        if (writer) std::fprintf(stderr, "step %lld: non-finite %s (loss %g, gradient norm %g): update skipped (%d of train.max_bad_steps = %d in a row)\n",
                     (long long)state.step, std::isfinite(loss) ? "gradient" : "loss", loss, norm, bad_streak, tc.max_bad_steps);
        if (bad_streak >= tc.max_bad_steps)
          fail("training diverged: ", bad_streak, " steps in a row (", state.step - bad_streak + 1, " to ", state.step,
               ") had a non-finite loss or gradient and were skipped; no checkpoint was written after step ",
               state.step - bad_streak, " (last checkpoint: ", last_checkpoint, "); lower train.lr (now ", tc.lr,
               ") or raise train.max_bad_steps (now ", tc.max_bad_steps, ")");
      }
      train_seconds += dt;
      if (opts.on_step) opts.on_step(state.step, loss, tokens_per_step / dt);
      if (!quiet && (state.step % tc.log_every == 0 || state.step == tc.steps || state.step == 1)) {
        const double ms = window_time / window_steps * 1e3;
        const double tps = tokens_per_step / (window_time / window_steps);
        const double mfu = tps * flops_tok / (peak.gflops * 1e9) * 100.0;
        const double eta = (tc.steps - state.step) * window_time / window_steps;
        std::printf("step %6lld/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %.1f%% | ETA %s\n",
                    (long long)state.step, tc.steps, loss, lr, norm, ms, tps, mfu, format_eta(eta).c_str());
        std::fflush(stdout);
        window_time = 0;
        window_steps = 0;
      }
      if (tc.eval_every > 0 && state.step % tc.eval_every == 0 && state.step < tc.steps) run_eval();
      // Checkpoints only after a good update: during a streak of skipped steps the newest file on
      // disk stays the last good one.
      if (tc.ckpt_every > 0 && state.step % tc.ckpt_every == 0 && bad_streak == 0) save(checkpoint_path(state.step));
      if (opts.stop_after >= 0 && steps_this_run >= opts.stop_after) break;
      if (dp ? totals.stop_signal : stop_requested() || g_stop_requested.load()) {
        sum.interrupted = state.step < tc.steps;
        if (!quiet) {
          const std::string why = stop_signal() ? "signal " + std::to_string(stop_signal()) : std::string("stop requested");
          std::printf("interrupted (%s) at step %lld: writing a checkpoint; continue with `attnlab train --resume %s/model.safetensors`\n",
                      why.c_str(), (long long)state.step, tc.out_dir.c_str());
        }
        break;
      }
      if ((dp ? totals.stop_time : tc.time_limit > 0 && run_timer.seconds() >= tc.time_limit) && state.step < tc.steps) {
        if (!quiet) std::printf("time limit of %.0f s reached at step %lld; stopping with a checkpoint\n", tc.time_limit, (long long)state.step);
        break;
      }
    }
    sum.steps = state.step;
    const double elapsed = run_timer.seconds();
    sum.tokens_per_s = steps_this_run ? steps_this_run * tokens_per_step / elapsed : 0;
    sum.train_seconds = train_seconds;
    sum.steps_this_run = steps_this_run;
    sum.num_params = model.num_params();
    run_eval();
    save(tc.out_dir + "/model.safetensors");
    if (!quiet) {
      std::printf("done: %lld steps, val loss %.4f, checkpoint %s\n", (long long)state.step, sum.val_loss, sum.checkpoint.c_str());
      std::fflush(stdout);
    }
    return sum;
  } catch (const Error& e) {
    if (!dp) throw;
    dp->abort_job(e.what());
  }
}

}  // namespace attnlab
