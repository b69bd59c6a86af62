// Data-parallel training across the ranks of an MPI job (`mpirun -np N attnlab train`,
// docs/distributed.md): every rank holds the whole model, trains on its own B/N rows of each global
// batch, and the ranks sum their gradients; rank 0 alone prints and writes files.
//
// Gradients are summed in buckets, contiguous ranges of the gradient buffer cut where the layer
// that completes them changes (GPT::gradient_final_layer) and at train.dp_bucket_mb: the backward
// runs from the last layer to the first, and each bucket's non-blocking sum starts as soon as the
// layer that completes it is done, while the backward of the layers below goes on (progress is
// made between sublayers). The buckets are laid out once; a step allocates nothing.
//
// The step is the one-process step over the global batch: each rank scales its micro-batch's
// gradient by 1/(global B·T·grad_accum), so the sum over ranks is the gradient of the global mean
// loss; the norm clipped against is the global one (each rank computes the share of Σg² of its
// shard of the reduced gradient, and the shares are summed); every rank then takes the same AdamW
// step. With train.zero = 1 (ZeRO-1) each rank keeps AdamW's moments for its shard only: the
// buckets are reduce-scattered (each rank receives the sum of its shard), each rank updates its
// shard of the parameters, and the parameters are gathered to every rank. Both modes compute the
// same numbers from the same sums (the same norm shares, elementwise AdamW), so their runs are
// bit-identical when MPI's all-reduce and reduce-scatter add the ranks in the same order: always
// for 2 ranks (tests/cli/mpi_train.sh checks it), not promised by MPI for more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/distributed.h"
#include "model/config.h"
#include "model/gpt.h"

namespace attnlab {

class DataParallel final : public BackwardListener {
 public:
  // Collective: every rank constructs it at the same point, with the same model configuration.
  DataParallel(GPT<float>& model, const TrainConfig& tc);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  bool zero() const { return zero_; }
  // This rank's shard of the parameter buffer, [shard_begin, shard_begin + shard_size): its share
  // of the gradient norm, and with ZeRO-1 the moments it keeps and the parameters it updates.
  size_t shard_begin() const { return shard_begin_[(size_t)rank_]; }
  size_t shard_size() const { return (size_t)shard_count_[(size_t)rank_]; }
  // Elements of each AdamW moment buffer this rank holds: its shard (ZeRO-1) or the whole model.
  size_t moment_elements() const { return zero_ ? shard_size() : total_; }
  size_t buckets() const { return buckets_.size(); }

  // Before the last micro-batch's backward of a step (the earlier ones only accumulate locally):
  // from now on the backward's layer_done() starts the buckets it completes.
  void arm();
  void layer_done(int l) override;
  void between_sublayers() override;
  // After the backward: starts the buckets only its end completes and waits for every sum.
  // Returns the seconds spent waiting (the communication the backward did not hide).
  double finish_backward();

  struct Totals {
    double loss_sum = 0;  // Σ over ranks of the step's summed losses
    double norm = 0;      // the global gradient norm (after the sum over ranks)
    bool stop_signal = false;  // some rank was asked to stop after this step (a signal, request_stop())
    bool stop_time = false;    // some rank reached train.time_limit
    // Of the ranks' waits for the sums after their backward (finish_backward()): the shortest, the
    // slowest rank's, is the communication the backward did not hide; the longest minus it is the
    // time the faster ranks waited for the slowest (load imbalance, not communication).
    double exposed_comm_seconds = 0, imbalance_seconds = 0;
  };
  // The step's totals, agreed by every rank (one small sum). waited: finish_backward()'s seconds.
  Totals totals(double local_loss_sum, bool stop_signal, bool stop_time, double waited);
  // Clipping against `norm` and AdamW step t on this rank's part (all of it, or the shard with
  // ZeRO-1, whose parameters are then gathered to every rank). adam_m, adam_v: moment_elements().
  void update(float* adam_m, float* adam_v, double norm, double lr, int t);

  // Checkpoints: the whole moments on rank 0 (m_all, v_all: every parameter; other ranks pass
  // anything). Without ZeRO-1 rank 0 holds them already and this copies nothing.
  void gather_moments(const float* adam_m, const float* adam_v, float* m_all, float* v_all);
  // Resume: this rank's moments from the whole ones (ZeRO-1: its shard).
  void take_moments(const float* m_all, const float* v_all, float* adam_m, float* adam_v) const;

  // An error on this rank alone: ends the job now (distributed::abort_job), naming this rank.
  [[noreturn]] void abort_job(const std::string& message) { comm_->abort_job(message); }

  // Validation: the sums of every rank's share (loss sum, count).
  void sum_validation(double* loss_sum, size_t* count);

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // elements of the gradient buffer
    int ready_layer = -1;       // complete once this layer's backward is done; -1: at the end of the backward
    std::vector<int> counts;    // ZeRO-1: the elements of each rank's shard inside it (the reduce-scatter)
    float* receive = nullptr;   // ZeRO-1: where this rank's part of it lands in shard_grad_
    bool started = false;
  };
  void start(Bucket& b);

  GPT<float>& model_;
  const TrainConfig& tc_;
  int rank_ = 0, ranks_ = 1;
  bool zero_ = false;
  size_t total_ = 0;
  std::vector<size_t> shard_begin_;
  std::vector<int> shard_count_, shard_displacement_;
  std::vector<Bucket> buckets_;
  Buffer shard_grad_;  // ZeRO-1: this rank's shard of the summed gradient
  std::vector<double> totals_;  // the step's small sum: loss, Σg² share, stop flags, each rank's wait
  bool armed_ = false;
  std::unique_ptr<distributed::Collectives> comm_;
};

}  // namespace attnlab
