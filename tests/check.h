// Shared test helpers: random fills, max-difference comparisons and central finite differences.
// Gradient tests run kernels instantiated with double, so FD errors are ~1e-8 and tolerances can be
// tight (ggml's test-backend-ops does the same per op).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.h"

namespace attnlab::test {

template <class T>
std::vector<T> random_vec(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = T(rng.normal() * scale);
  return v;
}

// Σ a_i·b_i: the scalar loss <w, out> of a random linear functional w, used by gradient tests.
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |a-b| / max(1, max|b|): relative to the reference's scale.
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / std::max(1.0, scale);
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
  return diff;
}

// Central finite differences of a scalar loss with respect to every entry of `x` (perturbed in
// place and restored). Returns the numerical gradient.
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// Compares an analytic gradient with finite differences: the error relative to the largest
// gradient entry must be below tol. Prints the worst entry on failure. A tensor whose largest
// entry is below 1e-10 is a structural zero (e.g. GOAT's b2 without a sink, §3.5): its analytic
// gradient must then be below tol·1e-10 in absolute value (rounding of sums that cancel).
inline void expect_grad_close(const std::vector<double>& analytic, const std::vector<double>& numeric, double tol,
                              const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = 1e-10, worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < numeric.size(); ++i) scale = std::max(scale, std::abs(numeric[i]));
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double e = std::abs(analytic[i] - numeric[i]);
    if (e > worst) { worst = e; at = i; }
  }
  EXPECT_LT(worst / scale, tol) << what << ": worst entry " << at << " analytic " << analytic[at] << " numeric "
                                << numeric[at] << " (scale " << scale << ")";
}

}  // namespace attnlab::test
