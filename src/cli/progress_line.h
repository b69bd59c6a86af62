// The progress line of `attnlab eval --lengths`, `task --eval` and `analyze` on stderr (stdout
// keeps the results): the stage, done/total, percent and the library's ETA (a moving average over
// batches, attnlab/progress.h). On a terminal one line is redrawn; otherwise (a log, a test) a line
// every 10 s and at the end.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "attnlab/progress.h"

namespace attnlab::cli {

inline std::string eta_text(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// A callback for the API's on_progress; `quiet` gives none.
inline api::ProgressCallback progress_line(bool quiet = false) {
  if (quiet) return {};
  const bool tty = ::isatty(STDERR_FILENO);
  auto last = std::make_shared<double>(-1e9);
  return [tty, last](const api::Progress& p) {
    const bool end = p.done >= p.total;
    if (!tty && !end && p.elapsed_seconds - *last < 10) return;
    *last = p.elapsed_seconds;
    std::fprintf(stderr, "%s%s: %lld/%lld %s (%.0f%%), ETA %s%s", tty ? "\r" : "", p.stage.c_str(), (long long)p.done,
                 (long long)p.total, p.unit.c_str(), 100.0 * double(p.done) / double(p.total > 0 ? p.total : 1),
                 eta_text(p.eta_seconds).c_str(), tty && !end ? "   " : "\n");
    std::fflush(stderr);
  };
}

}  // namespace attnlab::cli
