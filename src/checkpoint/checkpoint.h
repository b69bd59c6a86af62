// Checkpoints: safetensors files holding every parameter, the Adam moments and, as metadata, the
// resolved configuration, the step, the data-loader position and the format version
// (docs/checkpoint-format.md). Writes are atomic (write-to-temp, fsync, rename): an interrupted
// save never leaves a half-written checkpoint in place of a good one.
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/gpt.h"

namespace attnlab {

constexpr const char* kCheckpointFormat = "attnlab";
constexpr int kCheckpointFormatVersion = 1;
constexpr int64_t kMaxCheckpointStep = int64_t(1) << 30;  // the largest train.steps

struct TrainingState {
  int64_t step = 0;              // optimizer steps completed
  uint64_t data_epoch = 0, data_index = 0;  // DataLoader::State after the last consumed batch
  uint64_t tokens_seen = 0;
  int ranks = 1;                 // data-parallel ranks of the run (recorded in "environment" when > 1)
};

// adam_m / adam_v may be nullptr (weights only: `attnlab export`). Refuses (Error, nothing written)
// when the weights or moments hold NaN or Inf. Records the numeric environment (train/environment.h).
void save_checkpoint(const std::string& path, const GPT<float>& model, const float* adam_m, const float* adam_v,
                     const TrainingState& state);

// Reads only the configuration stored in a checkpoint (to build the model before loading), and
// checks that the file holds every tensor that configuration implies (name, F32, shape) before
// anything is allocated for it.
Config read_checkpoint_config(const std::string& path);

// The "environment" metadata (JSON text; empty for checkpoints written before it was recorded).
std::string read_checkpoint_environment(const std::string& path);

// Loads parameters (and Adam moments when adam_m/adam_v are non-null: an error if absent).
// The stored configuration must match the model's; every tensor is checked for name, dtype and shape,
// against its stored checksum (unless set_verify_checkpoint_checksums(false); a file without
// checksums loads with a note on stderr), and for finite values (a NaN checkpoint is an Error naming
// the tensor; so is a negative Adam second moment). The step must be in [0, kMaxCheckpointStep].
// Whether load_checkpoint verifies tensor checksums (process-wide, default true; `--skip-checksums`).
void set_verify_checkpoint_checksums(bool verify);
bool verify_checkpoint_checksums();

TrainingState load_checkpoint(const std::string& path, GPT<float>& model, float* adam_m, float* adam_v);

}  // namespace attnlab
