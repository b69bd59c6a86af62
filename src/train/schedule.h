// Learning-rate schedules: linear warmup, then cosine decay, WSD (warmup-stable-decay) or constant.
#pragma once
#include <cmath>
#include <string>

#include "model/config.h"

namespace attnlab {

// lr at optimizer step `step` (0-based) of `cfg.steps`.
inline double learning_rate(const TrainConfig& cfg, int step) {
  const double peak = cfg.lr, floor = cfg.lr * cfg.min_lr_ratio;
  if (step < cfg.warmup) return peak * double(step + 1) / double(cfg.warmup);
  if (cfg.schedule == "constant") return peak;
  const int total = std::max(cfg.steps, 1);
  if (cfg.schedule == "wsd") {
    const int decay_steps = (int)std::round(cfg.wsd_decay_frac * total);
    const int decay_start = total - decay_steps;
    if (step < decay_start || decay_steps == 0) return peak;
    const double frac = double(step - decay_start + 1) / double(decay_steps);
    return peak + (floor - peak) * std::min(frac, 1.0);
  }
  // cosine from peak (end of warmup) to floor (last step)
  const int span = std::max(total - cfg.warmup, 1);
  const double progress = std::min(double(step - cfg.warmup) / double(span), 1.0);
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace attnlab
