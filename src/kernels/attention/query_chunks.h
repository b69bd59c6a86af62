// attnlab kernels, fused attention: the backward's split of each (b, kv head) pair's queries into
// chunks of about equal work (kernels/attention.h, attention_backward), independent of the kernel
// set but for its tile. The tasks that use it: kernels/attention/backward.h.
#pragma once
#include <algorithm>

#include "kernels/attention/shape.h"

namespace attnlab::kernels {

// The backward's split over queries (see attention_backward): with fewer than kAttentionBackwardTasks
// (b, kv head) pairs, each pair's queries are cut into chunks of about equal work, up to
// kAttentionMaxQueryChunks and at most one per query tile (tile: the kernel set's, e.g.
// attention_kernels().tile). The count depends on the shape and the tile only, never on the thread
// count, so the results do not either.
inline constexpr int kAttentionBackwardTasks = 8;
inline constexpr int kAttentionMaxQueryChunks = 8;

inline int attention_query_chunks(const AttentionShape& s, int tile) {
  const long pairs = long(s.B) * s.Hkv;
  if (pairs >= kAttentionBackwardTasks) return 1;
  const long tiles = (s.Tq + tile - 1) / tile;
  return int(std::min({(kAttentionBackwardTasks + pairs - 1) / pairs, tiles, long(kAttentionMaxQueryChunks)}));
}

// bounds[0..n]: query chunk c is [bounds[c], bounds[c+1]), whole query tiles (the last one may be
// short), each at least one tile, cut where the work Σ_i (pos_offset + i + 1) (keys seen, summed
// over the chunk's rows) first reaches c/n of the total. Integer arithmetic: the same cuts always.
inline void split_attention_queries(const AttentionShape& s, int n, int tile, int* bounds) {
  const long tiles = (s.Tq + tile - 1) / tile;
  auto work = [&](long rows) { return rows * s.pos_offset + rows * (rows + 1) / 2; };  // rows 0..rows−1
  const long total = work(s.Tq);
  bounds[0] = 0;
  long t = 0;
  for (int c = 1; c < n; ++c) {
    while (t < tiles && work(std::min(t * tile, long(s.Tq))) < total * c / n) ++t;
    t = std::clamp(t, long(bounds[c - 1] / tile + 1), tiles - (n - c));
    bounds[c] = int(t * tile);
  }
  bounds[n] = s.Tq;
}

}  // namespace attnlab::kernels
