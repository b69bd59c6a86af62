// attnlab core: the machine's read bandwidth over a working set of a given size, measured, as the
// denominator of the decode bound (`attnlab sample`): a decoder that reads B bytes per token can at
// best run at bandwidth(B) / B tokens per second. docs/performance.md ("Decode") has the method.
#pragma once
#include <cstddef>

namespace attnlab {

struct ReadBandwidth {
  double gb_per_s = 0;      // 1e9 bytes per second, over all `threads`
  size_t bytes = 0;         // the working set the figure is for
  int threads = 0;
  const char* source = "";  // "measured" or "ATTNLAB_READ_GBPS"
};

// Streaming reads of one buffer of `bytes` bytes (at least 64 KiB; at most 4 GiB; distinct values on
// every page), split evenly over `threads` OpenMP threads, each summing its part as 8 side-by-side
// sequential streams (one core reads faster so than with one stream): the rate at
// which this machine can re-read a working set of that size again and again, as a decoder re-reads
// its weights and cache every token. The buffer's size sets which level serves it (a set that fits in
// the last-level cache reads far faster than one that does not). Best of 15 trials of at least 10 ms
// each (on a shared machine, the best trial is the one least disturbed). Allocates and frees the
// buffer; about 0.2–0.5 s. ATTNLAB_READ_GBPS (a positive number) replaces the measurement.
ReadBandwidth read_bandwidth(size_t bytes, int threads);

}  // namespace attnlab
