#pragma once
#include <chrono>

namespace attnlab {
// Wall-clock seconds since construction (steady clock).
class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void reset() { t0_ = std::chrono::steady_clock::now(); }
 private:
  std::chrono::steady_clock::time_point t0_;
};
}  // namespace attnlab
