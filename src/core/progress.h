// attnlab core: progress of long work, reported through a callback (library code does not print),
// and the safe points where Ctrl-C stops it (core/stop_signals.h).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "attnlab/error.h"
#include "core/stop_signals.h"
#include "core/timer.h"

namespace attnlab {

// Seconds left of work reported as `done` of `total` units: an exponential moving average of the
// seconds per unit between reports (weight 0.2 for the newest), so that one slow or fast batch
// does not swing the estimate, as a single step's time would. NaN before the second report.
class EtaEstimate {
 public:
  double update(int64_t done, int64_t total) {
    const double now = clock_.seconds();
    if (last_done_ >= 0 && done > last_done_) {
      const double per_unit = (now - last_time_) / double(done - last_done_);
      seconds_per_unit_ = seconds_per_unit_ < 0 ? per_unit : 0.8 * seconds_per_unit_ + 0.2 * per_unit;
    } else if (last_done_ < 0 && done > 0) {
      seconds_per_unit_ = now / double(done);  // from the start: the first batch's own time
    }
    last_done_ = done;
    last_time_ = now;
    return seconds_per_unit_ < 0 ? NAN : seconds_per_unit_ * double(total - done);
  }
  double elapsed() const { return clock_.seconds(); }

 private:
  Timer clock_;
  int64_t last_done_ = -1;
  double last_time_ = 0, seconds_per_unit_ = -1;
};

// `done` of `total` `unit` of the work named by `stage` are finished.
using ProgressFn = std::function<void(const std::string& stage, int64_t done, int64_t total, const char* unit)>;

// Called after each unit of work: reports it, then throws Interrupted when a stop signal came
// (the caller's StopSignals scope turns Ctrl-C into that request).
inline void report_progress(const ProgressFn& progress, const std::string& stage, int64_t done, int64_t total,
                            const char* unit) {
  if (progress) progress(stage, done, total, unit);
  if (stop_requested())
    throw Interrupted("interrupted (signal " + std::to_string(stop_signal()) + ") at " + stage + ", " + std::to_string(done) +
                      " of " + std::to_string(total) + " " + unit + " done");
}

}  // namespace attnlab
