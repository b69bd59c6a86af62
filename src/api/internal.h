// What the public API's implementation files (src/api/) share: the bridge from a public Config to
// the internal resolved one, and back; a checkpoint loaded as the internal model; the training
// parameters as the training loop's options and its summary as the public result.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "attnlab/config.h"
#include "attnlab/model.h"
#include "attnlab/progress.h"
#include "attnlab/trainer.h"
#include "core/progress.h"
#include "core/stop_signals.h"
#include "model/config.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace attnlab::api {

struct Config::Impl {
  std::vector<Assignment> assignments;  // in order; later ones win
};

// Applies and validates the assignments (attnlab::resolve_config).
attnlab::Config resolve(const Config& config);
// A public Config whose assignments are every key of a resolved configuration.
Config from_resolved(const attnlab::Config& resolved, const std::string& origin);

// The model of a checkpoint (its stored configuration, every tensor checked), its matrices rounded
// to bf16 for Weights::bf16 (GPT::round_weights_to_bf16).
std::unique_ptr<GPT<float>> load_model(const std::string& checkpoint, Weights weights = Weights::fp32);

// TrainParams as the training loop's options (callbacks included), and its summary as a TrainResult.
TrainOptions train_options(const TrainParams& params);

// A public progress callback as the internal one (empty stays empty).
ProgressFn progress_fn(const ProgressCallback& callback);

// Runs `work` with Ctrl-C / SIGTERM turned into a stop at its next progress report
// (core/stop_signals.h); an Interrupted gets "; nothing was written: run the command again to redo it".
template <class F>
auto interruptible(F&& work) -> decltype(work()) {
  StopSignals signals;
  try {
    return work();
  } catch (const Interrupted& e) {
    throw Interrupted(std::string(e.what()) + "; nothing was written: run the command again to redo it");
  }
}
TrainResult train_result(const TrainSummary& summary);

}  // namespace attnlab::api
