// attnlab public API: progress of long work (a length sweep, a task evaluation, an analysis), and
// how it ends when the user presses Ctrl-C.
//
// A function that takes a ProgressCallback calls it after each unit of work from the calling
// thread: `done` of `total` units (tokens scored, samples, windows; the stage says which). The
// library prints nothing; `attnlab` draws a progress line with an ETA from it.
//
// While such a function runs, the first SIGINT or SIGTERM asks it to stop at its next unit: it
// throws attnlab::Interrupted (nothing is written), and the CLI exits with status 3. A second
// signal ends the process at once.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace attnlab::api {

struct Progress {
  std::string stage;   // what is being done, e.g. "length 4096 (4x)", "passkey at 2x", "analyze"
  int64_t done = 0;    // units finished in this stage
  int64_t total = 0;   // units of this stage
  std::string unit;    // "tokens", "samples", "windows"
  double elapsed_seconds = 0;
  double eta_seconds = 0;  // seconds left over all stages: a moving average of the time per unit (NaN at first)
};
using ProgressCallback = std::function<void(const Progress&)>;

}  // namespace attnlab::api
