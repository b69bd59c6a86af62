// attnlab train: what a bit-exact resume depends on besides the checkpoint's contents. The same
// inputs give bit-identical fp32 results only with the same OpenMP thread count (the split of
// every reduction), the same CPU ISA that oneDNN and our kernels dispatch to, the same oneDNN
// build, and the same flush-to-zero / denormals-are-zero mode. Checkpoints record these
// (metadata key "environment"); `attnlab train --resume` warns about every one that differs.
#pragma once
#include <string>
#include <vector>

namespace attnlab {

// This process's environment as a JSON object of strings (threads, cpu_isa, build_isa, onednn,
// ftz, daz, cpu), ready to store as checkpoint metadata. `ranks`: the data-parallel ranks of the
// training (train/data_parallel.h), recorded when more than one (how each step's gradient sum is
// split and rounded).
std::string numeric_environment_json(int ranks = 1);

// Human-readable differences between a stored environment (JSON text written by
// numeric_environment_json, possibly from another machine) and this process's: one entry per
// field, e.g. "threads 2 -> 4". An unreadable record gives one entry saying so.
// A record without "ranks" was written by one process.
std::vector<std::string> numeric_environment_differences(const std::string& stored_json, int ranks = 1);

}  // namespace attnlab
