// sample_token (eval/sampling.h).
#include "experiment/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace attnlab {

int sample_token(const std::vector<float>& logits, int V, std::vector<int>& order, double temperature, int top_k, Rng& rng) {
  if (temperature == 0) return int(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
  std::iota(order.begin(), order.begin() + V, 0);
  int k = top_k > 0 ? std::min(top_k, V) : V;
  if (k < V)
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + V, [&](int x, int y) { return logits[x] > logits[y]; });
  double mx = -INFINITY;
  for (int i = 0; i < k; ++i) mx = std::max(mx, (double)logits[order[i]]);
  double z = 0;
  for (int i = 0; i < k; ++i) z += std::exp((logits[order[i]] - mx) / temperature);
  double u = rng.uniform() * z;
  for (int i = 0; i < k; ++i) {
    u -= std::exp((logits[order[i]] - mx) / temperature);
    if (u <= 0) return order[i];
  }
  return order[k - 1];
}

}  // namespace attnlab
