// Data-parallel training across ranks (train/data_parallel.h, docs/distributed.md).
#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/adamw.h"

namespace attnlab {

namespace {

// Clipping by `scale` (1: none) and AdamW step t on parameters [begin, end) of the buffer; grads,
// m and v hold the elements of that range from their index 0. The range is cut at the end of the
// decayed tensors (ParamRegistry lays them out first), as the one-process optimizer_step does.
void clip_and_adamw(float* params, float* grads, float* m, float* v, size_t begin, size_t end, size_t decayed_end,
                    const TrainConfig& tc, float scale, double lr, int t) {
  const size_t n = end - begin;
  if (scale != 1.0f) kernels::scale_inplace(grads, n, scale);
  const size_t split = std::clamp(decayed_end, begin, end) - begin;
  kernels::adamw_update(params + begin, grads, m, v, split, (float)lr, (float)tc.beta1, (float)tc.beta2, (float)tc.eps,
                        (float)tc.weight_decay, t);
  kernels::adamw_update(params + begin + split, grads + split, m + split, v + split, n - split, (float)lr, (float)tc.beta1,
                        (float)tc.beta2, (float)tc.eps, 0.0f, t);
}

}  // namespace

DataParallel::DataParallel(GPT<float>& model, const TrainConfig& tc)
    : model_(model),
      tc_(tc),
      rank_(distributed::rank()),
      ranks_(distributed::size()),
      zero_(tc.zero == 1),
      total_(model.registry().total()) {
  if (total_ > (size_t)std::numeric_limits<int>::max())
    fail("data-parallel training: ", total_, " parameters are more than one MPI message of floats can count (2^31 - 1)");
  // Shards: N contiguous ranges of whole 16-element (64-byte) groups, the last one shorter.
  const size_t group = 16, groups = (total_ + group - 1) / group;
  const size_t per_rank = (groups + (size_t)ranks_ - 1) / (size_t)ranks_ * group;
  for (int r = 0; r < ranks_; ++r) {
    const size_t begin = std::min(total_, (size_t)r * per_rank), end = std::min(total_, begin + per_rank);
    shard_begin_.push_back(begin);
    shard_count_.push_back(int(end - begin));
    shard_displacement_.push_back(int(begin));
  }

  // Buckets in the buffer's order, cut where the completing layer changes and at the size limit.
  // dp_bucket_mb = 0: one bucket, completed by the end of the backward (no overlap; the baseline
  // the overlap is measured against).
  const size_t limit = tc.dp_bucket_mb > 0 ? std::max<size_t>(group, size_t(tc.dp_bucket_mb * 1e6 / sizeof(float)) / group * group)
                                            : total_;
  std::vector<const ParamSpec*> order;
  for (const ParamSpec& s : model.registry().specs()) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const ParamSpec* a, const ParamSpec* b) { return a->offset < b->offset; });
  auto add_range = [&](size_t lo, size_t hi, int ready_layer) {
    while (lo < hi) {
      if (buckets_.empty() || buckets_.back().ready_layer != ready_layer || buckets_.back().end - buckets_.back().begin >= limit) {
        Bucket b;
        b.begin = b.end = lo;
        b.ready_layer = ready_layer;
        buckets_.push_back(std::move(b));
      }
      Bucket& b = buckets_.back();
      const size_t take = std::min(hi - lo, limit - (b.end - b.begin));
      b.end += take;
      lo += take;
    }
  };
  // Each tensor with the alignment padding after it (zero in every rank's gradient).
  if (!order.empty() && order.front()->offset > 0) add_range(0, order.front()->offset, -1);
  for (size_t i = 0; i < order.size(); ++i)
    add_range(order[i]->offset, i + 1 < order.size() ? order[i + 1]->offset : total_,
              tc.dp_bucket_mb > 0 ? GPT<float>::gradient_final_layer(*order[i]) : -1);
  if (zero_) {
    shard_grad_ = Buffer(std::max<size_t>(shard_size(), 1) * sizeof(float));
    for (Bucket& b : buckets_) {
      for (int r = 0; r < ranks_; ++r) {
        const size_t lo = std::max(b.begin, shard_begin_[(size_t)r]), hi = std::min(b.end, shard_begin_[(size_t)r] + (size_t)shard_count_[(size_t)r]);
        b.counts.push_back(hi > lo ? int(hi - lo) : 0);
      }
      const size_t lo = std::max(b.begin, shard_begin());
      b.receive = shard_grad_.as<float>() + (lo > shard_begin() ? std::min(lo - shard_begin(), shard_size()) : 0);
    }
  }
  totals_.resize(4 + (size_t)ranks_);
  // The request table: every bucket may be in flight at once.
  comm_ = std::make_unique<distributed::Collectives>((int)buckets_.size() + 1, tc.dp_timeout);
}

void DataParallel::arm() {
  armed_ = true;
  for (Bucket& b : buckets_) b.started = false;
  model_.set_backward_listener(this);
}

void DataParallel::start(Bucket& b) {
  b.started = true;
  float* grads = model_.grads() + b.begin;
  if (zero_) comm_->start_sum_scatter(grads, b.receive, b.counts.data());
  else comm_->start_sum(grads, b.end - b.begin);
}

void DataParallel::layer_done(int l) {
  if (!armed_) return;
  // Every rank walks the same buckets in the same order: the collectives start in the same order.
  for (Bucket& b : buckets_)
    if (!b.started && b.ready_layer >= l) start(b);
  comm_->progress();
}

void DataParallel::between_sublayers() {
  if (armed_) comm_->progress();
}

double DataParallel::finish_backward() {
  model_.set_backward_listener(nullptr);
  armed_ = false;
  for (Bucket& b : buckets_)
    if (!b.started) start(b);
  return comm_->wait_all("summing the gradients of a step across ranks");
}

DataParallel::Totals DataParallel::totals(double local_loss_sum, bool stop_signal, bool stop_time, double waited) {
  // This rank's share of Σg²: its shard of the summed gradient. Summing the shares (in the order
  // MPI sums them) gives the same norm in both modes: the shards and their sums are the same.
  const float* shard = zero_ ? shard_grad_.as<float>() : model_.grads() + shard_begin();
  std::fill(totals_.begin(), totals_.end(), 0.0);
  totals_[0] = local_loss_sum;
  totals_[1] = kernels::l2_norm_squared(shard, shard_size());
  totals_[2] = stop_signal ? 1.0 : 0.0;
  totals_[3] = stop_time ? 1.0 : 0.0;
  totals_[4 + (size_t)rank_] = waited;  // the others' slots are 0: the sum gathers every rank's wait
  comm_->sum(totals_.data(), (int)totals_.size(), "summing a step's loss and gradient norm across ranks");
  const auto [shortest, longest] = std::minmax_element(totals_.begin() + 4, totals_.end());
  return {totals_[0], std::sqrt(totals_[1]), totals_[2] > 0, totals_[3] > 0, *shortest, *longest - *shortest};
}

void DataParallel::update(float* adam_m, float* adam_v, double norm, double lr, int t) {
  const float scale = tc_.grad_clip > 0 && norm > tc_.grad_clip ? float(tc_.grad_clip / norm) : 1.0f;
  const size_t decayed = model_.registry().decayed_total();
  if (!zero_) {
    clip_and_adamw(model_.params(), model_.grads(), adam_m, adam_v, 0, total_, decayed, tc_, scale, lr, t);
    return;
  }
  clip_and_adamw(model_.params(), shard_grad_.as<float>(), adam_m, adam_v, shard_begin(), shard_begin() + shard_size(), decayed,
                 tc_, scale, lr, t);
  comm_->gather_all(model_.params(), shard_count_.data(), shard_displacement_.data(), "gathering the updated parameters (ZeRO-1)");
}

void DataParallel::gather_moments(const float* adam_m, const float* adam_v, float* m_all, float* v_all) {
  if (!zero_) return;
  comm_->gather_to_root(adam_m, m_all, shard_count_.data(), shard_displacement_.data(), "gathering AdamW's moments for a checkpoint");
  comm_->gather_to_root(adam_v, v_all, shard_count_.data(), shard_displacement_.data(), "gathering AdamW's moments for a checkpoint");
}

void DataParallel::take_moments(const float* m_all, const float* v_all, float* adam_m, float* adam_v) const {
  const size_t begin = zero_ ? shard_begin() : 0, n = moment_elements();
  std::memcpy(adam_m, m_all + begin, n * sizeof(float));
  std::memcpy(adam_v, v_all + begin, n * sizeof(float));
}

void DataParallel::sum_validation(double* loss_sum, size_t* count) {
  double values[2] = {*loss_sum, double(*count)};
  comm_->sum(values, 2, "summing the validation loss across ranks");
  *loss_sum = values[0];
  *count = size_t(values[1]);
}

}  // namespace attnlab
