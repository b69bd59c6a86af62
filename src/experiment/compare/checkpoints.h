// The checkpoints in a run directory of `attnlab compare`: which one a resume continues from, and
// pruning the periodic ones (docs/compare.md "Running, stopping, resuming").
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace attnlab::compare {

// The checkpoint with the most steps in a run directory ("" when none); its step in *step.
// `unreadable`, if given, receives the names of the checkpoint files that could not be read.
std::string latest_checkpoint(const std::filesystem::path& dir, int64_t* step, std::vector<std::string>* unreadable = nullptr);
// Removes the trainer's step_NNNNNN.safetensors in `dir` with a step below `keep` (all of them for
// keep < 0): a run keeps at most its latest periodic checkpoint, and none once finished.
void prune_step_checkpoints(const std::filesystem::path& dir, int64_t keep);
// After a stop (signal, --stop-after-steps): removes every step_NNNNNN.safetensors but the newest,
// so that a stopped run holds model.safetensors (the stop's step, what --resume continues from)
// and at most one periodic checkpoint before it.
void keep_newest_step_checkpoint(const std::filesystem::path& dir);

}  // namespace attnlab::compare
