// attnlab data: deterministic, exactly resumable batches from one shard (docs/data.md).
#include "data/loader.h"

#include <limits>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace attnlab {

DataLoader::DataLoader(const Shard& shard, int B, int T, uint64_t seed)
    : shard_(&shard), B_(B), T_(T), seed_(seed), windows_(0) {
  if (B < 1) fail("data loader for ", shard.path(), ": batch size B = ", B, " must be at least 1");
  if (T < 1) fail("data loader for ", shard.path(), ": sequence length T = ", T, " must be at least 1");
  if (shard.size() < size_t(T) + 1)
    fail("shard ", shard.path(), ": ", shard.size(), " tokens, fewer than the T+1 = ", T + 1,
         " one window needs; use a shorter sequence length or more text (a larger val_fraction for val.bin)");
  windows_ = (shard.size() - 1) / size_t(T);
  if (windows_ > std::numeric_limits<uint32_t>::max())
    fail("shard ", shard.path(), ": ", windows_, " windows of T = ", T, " are too many for one loader; split the shard");
  permutation_.resize(windows_);
  shuffle_epoch(0);
}

// Fisher-Yates from the identity with a generator seeded by (seed, epoch): any epoch's order can
// be rebuilt on its own, which is what makes restore() exact without saving the permutation.
void DataLoader::shuffle_epoch(uint64_t epoch) {
  std::iota(permutation_.begin(), permutation_.end(), uint32_t(0));
  Rng rng(seed_ ^ (0x9e3779b97f4a7c15ULL * (epoch + 1)));
  for (size_t i = windows_ - 1; i > 0; --i) std::swap(permutation_[i], permutation_[rng.below(i + 1)]);
}

void DataLoader::copy_window(size_t w, int32_t* inputs, int32_t* targets) const {
  const uint16_t* src = shard_->tokens() + w * size_t(T_);
  for (int t = 0; t < T_; ++t) {
    inputs[t] = src[t];
    targets[t] = src[t + 1];
  }
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  for (int b = 0; b < B_; ++b) {
    if (index_ == windows_) {
      ++epoch_;
      index_ = 0;
      shuffle_epoch(epoch_);
    }
    copy_window(permutation_[index_++], inputs + size_t(b) * T_, targets + size_t(b) * T_);
  }
}

void DataLoader::next_rows(int32_t* inputs, int32_t* targets, int first_row, int rows) {
  ATTNLAB_CHECK(first_row >= 0 && rows >= 0 && first_row + rows <= B_);
  for (int b = 0; b < B_; ++b) {
    if (index_ == windows_) {
      ++epoch_;
      index_ = 0;
      shuffle_epoch(epoch_);
    }
    const uint32_t w = permutation_[index_++];
    if (b >= first_row && b < first_row + rows)
      copy_window(w, inputs + size_t(b - first_row) * T_, targets + size_t(b - first_row) * T_);
  }
}

void DataLoader::restore(State s) {
  if (s.index > windows_)
    fail("data loader for ", shard_->path(), ": resume position ", s.index, " is past the ", windows_,
         " windows of this shard (T = ", T_, "): the checkpoint was made with another shard or sequence length");
  if (s.epoch != epoch_) shuffle_epoch(s.epoch);
  epoch_ = s.epoch;
  index_ = s.index;
}

size_t DataLoader::eval_batches(size_t max_batches) const {
  const size_t all = (windows_ + size_t(B_) - 1) / size_t(B_);
  return max_batches > 0 && max_batches < all ? max_batches : all;
}

int DataLoader::eval_batch(size_t k, int32_t* inputs, int32_t* targets) const {
  int fresh = 0;
  for (int b = 0; b < B_; ++b) {
    const size_t w = k * size_t(B_) + size_t(b);
    if (w < windows_) ++fresh;
    copy_window(w % windows_, inputs + size_t(b) * T_, targets + size_t(b) * T_);
  }
  return fresh;
}

}  // namespace attnlab
