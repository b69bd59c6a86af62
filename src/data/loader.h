// attnlab data: batches of (B,T) windows from one token shard (docs/data.md, "Data loader").
// The shard is cut into W = (N-1)/T non-overlapping windows; window w is tokens [w*T, w*T+T], T+1
// tokens, whose first T are the inputs and last T the targets (next-token prediction). Training
// visits the windows of each epoch in a seeded random order, so a run is reproducible from its
// seed and a checkpointed State resumes it exactly. Evaluation walks the windows in order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/shard.h"

namespace attnlab {

class DataLoader {
 public:
  // Position of the next window to hand out: `index` into the permutation of epoch `epoch`.
  struct State {
    uint64_t epoch = 0, index = 0;
    bool operator==(const State&) const = default;
  };

  // The shard must outlive the loader. Errors if the shard has fewer than T+1 tokens.
  DataLoader(const Shard& shard, int B, int T, uint64_t seed);

  // Fills the next batch. inputs, targets: (B,T); targets[b][t] = inputs[b][t+1] within a window.
  // A batch may run past the end of an epoch; it then continues with the next epoch's order.
  void next(int32_t* inputs, int32_t* targets);
  // Data-parallel training: consumes the same B windows as next() but writes only rows
  // [first_row, first_row + rows) of that batch into inputs, targets (rows, T). The ranks of a job
  // each take their own rows of one global batch, so which windows a step sees does not depend on
  // how many ranks share it.
  void next_rows(int32_t* inputs, int32_t* targets, int first_row, int rows);

  State state() const { return {epoch_, index_}; }
  // After restore(s), next() returns exactly what it returned after the state s was taken.
  void restore(State s);

  // Sequential evaluation: batch k holds windows kB .. kB+B-1 in shard order, wrapping to window
  // 0 in the last batch so every batch is a full (B,T). eval_batches(max) = ceil(W/B), capped at
  // max when max > 0. eval_batch returns how many of its rows are windows not seen in an earlier
  // batch (B except in a wrapped last batch), for an exact mean over the shard.
  size_t eval_batches(size_t max_batches) const;
  int eval_batch(size_t k, int32_t* inputs, int32_t* targets) const;

  // Checks the shard's ids against a vocabulary (Shard::validate_vocab).
  void validate_vocab(int vocab_size) const { shard_->validate_vocab(vocab_size); }

  size_t num_windows() const { return windows_; }
  int batch_size() const { return B_; }
  int seq_len() const { return T_; }
  const Shard& shard() const { return *shard_; }

 private:
  void shuffle_epoch(uint64_t epoch);            // permutation_ := the order of `epoch`
  void copy_window(size_t w, int32_t* inputs, int32_t* targets) const;  // one row of (B,T)

  const Shard* shard_;
  int B_, T_;
  uint64_t seed_;
  size_t windows_;
  uint64_t epoch_ = 0, index_ = 0;
  std::vector<uint32_t> permutation_;            // allocated once; reshuffled in place per epoch
};

}  // namespace attnlab
