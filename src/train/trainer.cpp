#include "train/trainer.h"

#include <signal.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/gemm.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/shard.h"
#include "kernels/adamw.h"
#include "train/schedule.h"

namespace attnlab {

namespace {
// Ctrl-C / SIGTERM: finish the current step, evaluate, write a checkpoint and return. A second
// signal gets the default action (the handler resets itself), so a stuck run can still be killed.
volatile sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  signal(sig, SIG_DFL);
}

struct StopSignals {
  struct sigaction old_int {}, old_term {};
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

// The measured fp32 GEMM peak of the Zen 5 machine (docs/performance.md, measured limits: oneDNN
// ≈ 385 GFLOP/s with 2 threads), the denominator of the MFU figure. ATTNLAB_PEAK_GFLOPS overrides it
// for other machines.
double peak_gflops() {
  if (const char* e = std::getenv("ATTNLAB_PEAK_GFLOPS")) {
    const double v = std::atof(e);
    if (v > 0) return v;
  }
  return 385.0;
}

std::string format_eta(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const int m = int(s) / 60, sec = int(s) % 60;
  std::snprintf(buf, sizeof buf, "%d:%02d", m, sec);
  return buf;
}
}  // namespace

EvalResult evaluate(GPT<float>& model, const Shard& shard, int max_batches) {
  const int B = model.planned_B(), T = model.planned_T();
  const DataLoader windows(shard, B, T, 0);  // its sequential evaluation order; the seed is unused
  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  EvalResult r;
  const size_t batches = windows.eval_batches(max_batches > 0 ? (size_t)max_batches : 0);
  for (size_t k = 0; k < batches; ++k) {
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
  return 6.0 * n_matmul + 12.0 * m.n_layer * T * m.d_model;
}

double optimizer_step(GPT<float>& model, float* adam_m, float* adam_v, const TrainConfig& tc, double lr, int t) {
  float* params = model.params();
  float* grads = model.grads();
  const size_t total = model.registry().total();
  const double norm = std::sqrt(kernels::l2_norm_squared(grads, total));
  if (tc.grad_clip > 0 && norm > tc.grad_clip) kernels::scale_inplace(grads, total, float(tc.grad_clip / norm));
  // The registry lays decayed tensors out first (§0 policy), so AdamW is two contiguous calls.
  const size_t nd = model.registry().decayed_total();
  kernels::adamw_update(params, grads, adam_m, adam_v, nd, (float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps,
                        (float)tc.weight_decay, t);
  kernels::adamw_update(params + nd, grads + nd, adam_m + nd, adam_v + nd, total - nd, (float)lr, (float)tc.beta1,
                        (float)tc.beta2, (float)tc.eps, 0.0f, t);
  return norm;
}

TrainSummary train(const Config& cfg, const TrainOptions& opts) {
  const TrainConfig& tc = cfg.train;
  const int B = tc.batch_size, T = cfg.model.seq_len;
  Shard train_shard = Shard::open(cfg.data.train);
  Shard val_shard = Shard::open(cfg.data.val);
  if (train_shard.size() < (size_t)T + 1)
    fail("training data ", cfg.data.train, " has ", train_shard.size(), " tokens, fewer than model.seq_len + 1 = ", T + 1);
  if (val_shard.size() < (size_t)T + 1)
    fail("validation data ", cfg.data.val, " has ", val_shard.size(), " tokens, fewer than model.seq_len + 1 = ", T + 1);
  DataLoader loader(train_shard, B, T, tc.seed);
  loader.validate_vocab(cfg.model.vocab_size);
  {
    DataLoader val_check(val_shard, 1, T, 0);
    val_check.validate_vocab(cfg.model.vocab_size);
  }

  GPT<float> model(cfg);
  model.init_weights(tc.seed);
  model.plan(B, T);
  Buffer adam_m(model.registry().total() * sizeof(float)), adam_v(model.registry().total() * sizeof(float));
  TrainingState state;
  if (!opts.resume.empty()) {
    state = load_checkpoint(opts.resume, model, adam_m.as<float>(), adam_v.as<float>());
    loader.restore({state.data_epoch, state.data_index});
  }
  std::filesystem::create_directories(tc.out_dir);
  const std::string metrics_path = tc.out_dir + "/metrics.jsonl";
  std::ofstream metrics(metrics_path, opts.resume.empty() ? std::ios::trunc : std::ios::app);
  if (!metrics) fail("cannot write the metrics log ", metrics_path);

  const double flops_tok = training_flops_per_token(model, T);
  const size_t tokens_per_step = (size_t)B * T * tc.grad_accum;
  if (!opts.quiet) {
    std::printf("attnlab train: %zu parameters, %.1f MB activations, %s, %d threads\n", model.num_params(),
                model.activation_bytes() / 1e6, gemm_backend_name(), omp_threads());
    std::printf("data: %s (%zu tokens), %s (%zu tokens); %zu tokens per step\n", cfg.data.train.c_str(), train_shard.size(),
                cfg.data.val.c_str(), val_shard.size(), tokens_per_step);
    if (!opts.resume.empty()) std::printf("resumed from %s at step %lld\n", opts.resume.c_str(), (long long)state.step);
    std::fflush(stdout);
  }

  std::vector<int32_t> in((size_t)B * T), tgt((size_t)B * T);
  const float grad_scale = 1.0f / float((size_t)B * T * tc.grad_accum);
  TrainSummary sum;
  sum.losses.reserve(std::max<int64_t>(tc.steps - state.step, 0));
  Timer run_timer;
  double window_time = 0;
  int window_steps = 0;
  int steps_this_run = 0;
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
    save_checkpoint(path, model, adam_m.as<float>(), adam_v.as<float>(), state);
    sum.checkpoint = path;
  };
  auto run_eval = [&]() {
    const EvalResult r = evaluate(model, val_shard, tc.eval_batches);
    sum.val_loss = r.mean();
    if (!opts.quiet) {
      std::printf("step %6lld | val loss %.4f | ppl %.2f\n", (long long)state.step, r.mean(), std::exp(r.mean()));
      std::fflush(stdout);
    }
    metrics << nlohmann::json{{"step", state.step}, {"val_loss", r.mean()}, {"val_tokens", r.count}}.dump() << "\n";
    metrics.flush();
    if (opts.on_eval) opts.on_eval(state.step, r.mean(), r.count);
  };

  StopSignals signals;
  while (state.step < tc.steps) {
    Timer step_timer;
    model.zero_grad();
    double loss = 0;
    for (int micro = 0; micro < tc.grad_accum; ++micro) {
      loader.next(in.data(), tgt.data());
      loss += model.train_micro_step(in.data(), tgt.data(), grad_scale);
    }
    loss /= double(tokens_per_step);
    if (!std::isfinite(loss)) fail("training diverged at step ", state.step, ": loss is ", loss, " (lower train.lr?)");
    const double lr = learning_rate(tc, (int)state.step);
    const double norm = optimizer_step(model, adam_m.as<float>(), adam_v.as<float>(), tc, lr, (int)state.step + 1);
    state.step += 1;
    state.tokens_seen += tokens_per_step;
    ++steps_this_run;
    const double dt = step_timer.seconds();
    window_time += dt;
    ++window_steps;
    sum.losses.push_back(loss);
    sum.last_train_loss = loss;
    // Formatted into a fixed buffer: the step loop allocates nothing (tests/test_no_alloc.cpp).
    char line[256];
    std::snprintf(line, sizeof line, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.4f,\"tokens_per_s\":%.1f}\n",
                  (long long)state.step, loss, lr, norm, dt * 1e3, tokens_per_step / dt);
    metrics << line;
    train_seconds += dt;
    if (opts.on_step) opts.on_step(state.step, loss, tokens_per_step / dt);
    if (!opts.quiet && (state.step % tc.log_every == 0 || state.step == tc.steps || state.step == 1)) {
      const double ms = window_time / window_steps * 1e3;
      const double tps = tokens_per_step / (window_time / window_steps);
      const double mfu = tps * flops_tok / (peak_gflops() * 1e9) * 100.0;
      const double eta = (tc.steps - state.step) * window_time / window_steps;
      std::printf("step %6lld/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %.1f%% | ETA %s\n",
                  (long long)state.step, tc.steps, loss, lr, norm, ms, tps, mfu, format_eta(eta).c_str());
      std::fflush(stdout);
      window_time = 0;
      window_steps = 0;
    }
    if (tc.eval_every > 0 && state.step % tc.eval_every == 0 && state.step < tc.steps) run_eval();
    if (tc.ckpt_every > 0 && state.step % tc.ckpt_every == 0) save(checkpoint_path(state.step));
    if (opts.stop_after >= 0 && steps_this_run >= opts.stop_after) break;
    if (g_stop_signal) {
      sum.interrupted = state.step < tc.steps;
      if (!opts.quiet)
        std::printf("interrupted (signal %d) at step %lld: writing a checkpoint; continue with `attnlab train --resume %s/model.safetensors`\n",
                    (int)g_stop_signal, (long long)state.step, tc.out_dir.c_str());
      break;
    }
    if (tc.time_limit > 0 && run_timer.seconds() >= tc.time_limit && state.step < tc.steps) {
      if (!opts.quiet) std::printf("time limit of %.0f s reached at step %lld; stopping with a checkpoint\n", tc.time_limit, (long long)state.step);
      break;
    }
  }
  metrics.flush();
  sum.steps = state.step;
  const double elapsed = run_timer.seconds();
  sum.tokens_per_s = steps_this_run ? steps_this_run * tokens_per_step / elapsed : 0;
  sum.train_seconds = train_seconds;
  sum.steps_this_run = steps_this_run;
  sum.num_params = model.num_params();
  run_eval();
  save(tc.out_dir + "/model.safetensors");
  if (!opts.quiet) {
    std::printf("done: %lld steps, val loss %.4f, checkpoint %s\n", (long long)state.step, sum.val_loss, sum.checkpoint.c_str());
    std::fflush(stdout);
  }
  return sum;
}

}  // namespace attnlab
