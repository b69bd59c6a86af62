// Shared by the training tests (test_train, test_reliability): a scratch directory per test and a
// small learnable token stream written as llm.c shards.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "data/shard.h"

namespace attnlab::test_util {

// An empty directory "<tmp>/attnlab_test_<prefix>_<name>_<pid>" (removed first if it exists).
inline std::filesystem::path temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path d = fs::temp_directory_path() / ("attnlab_test_" + prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// train.bin (20,000 tokens) and val.bin (3,000) in `dir`: a noisy repeating pattern over a
// vocabulary of V, fixed by seed 1.
inline void write_learnable_shards(const std::filesystem::path& dir, int V) {
  Rng r(1);
  for (const char* name : {"train.bin", "val.bin"}) {
    std::vector<uint16_t> toks(name[0] == 't' ? 20000 : 3000);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = (uint16_t)(r.uniform() < 0.9 ? (i * 7) % V : r.below(V));
    write_shard((dir / name).string(), toks.data(), toks.size());
  }
}

}  // namespace attnlab::test_util
