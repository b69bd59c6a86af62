// Shared test helpers: random fills, max-difference comparisons and central finite differences with
// an error bound of their own.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
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

// The error of `a` against a reference as a share of a per-element error bound:
// max_i |a_i − ref_i| / (factor·bound_i + floor), and the element where it is largest. A NaN or an
// infinite difference counts as an infinite ratio. When the bound is derived from the computation
// (not a tolerance that passed on one machine), a ratio above 1 is a defect on any CPU.
struct BoundRatio {
  double ratio = 0;
  size_t at = 0;
};

template <class A, class R, class B>
BoundRatio max_bound_ratio(const A& a, const R& ref, const B& bound, double floor, double factor = 1) {
  EXPECT_EQ(a.size(), ref.size());
  EXPECT_EQ(a.size(), bound.size());
  BoundRatio worst;
  for (size_t i = 0; i < a.size() && i < ref.size() && i < bound.size(); ++i) {
    const double err = std::abs(double(a[i]) - double(ref[i]));
    const double ratio = std::isfinite(err) ? err / (factor * double(bound[i]) + floor) : INFINITY;
    if (ratio > worst.ratio) worst = {ratio, i};
  }
  return worst;
}

// EXPECTs every element of `a` within its bound of the reference; a failure names the worst element
// with both values, the error and the bound. Returns the worst ratio.
template <class A, class R, class B>
double expect_within_bound(const A& a, const R& ref, const B& bound, double floor, const std::string& what,
                           double factor = 1) {
  const BoundRatio w = max_bound_ratio(a, ref, bound, floor, factor);
  if (a.empty() || ref.size() != a.size() || bound.size() != a.size()) return w.ratio;
  EXPECT_LE(w.ratio, 1.0) << what << ": element " << w.at << " is " << double(a[w.at]) << ", reference "
                          << double(ref[w.at]) << ": error " << std::abs(double(a[w.at]) - double(ref[w.at]))
                          << " > bound " << factor * double(bound[w.at]) << " + floor " << floor << " (ratio "
                          << w.ratio << ")";
  return w.ratio;
}

// ---------------------------------------------------------------------------------------------
// Finite differences and their error bound.
//
// The central difference D(h) = (L(x+h) − L(x−h)) / 2h of a loss L computed in double differs from
// the true derivative g by two terms:
//
//   truncation  D(h) − g = h²/6 · L'''(ξ) + O(h⁴)        (Taylor; L is smooth in every test)
//   rounding    |r(h)| ≤ 2·δ_L / 2h = δ_L / h              (δ_L: the absolute error of one evaluation of L)
//
// Truncation is estimated, not guessed: D(2h) − D(h) = 3·h²/6·L''' + O(h⁴), so |D(2h) − D(h)| is
// three times the truncation error of D(h) (plus rounding of both, which only enlarges it). Each
// entry's spread |D(2h) − D(h)| is therefore a bound on its truncation error with a factor 3 to spare.
//
// Rounding: L is a sum over the outputs of a chain of double operations; each operation rounds with
// relative error at most u = 2^-53 ≈ 1.1e-16. Independent rounding errors of n operations grow like
// √n·u (the standard probabilistic bound; the worst case n·u is never approached by round-to-nearest
// sums of this size). The tests' losses take at most ~10^6 operations, so δ_L = kLossRounding·u·|L|
// with kLossRounding = √10^6 = 1024 (rounded up to a power of two), |L| floored at 1 because a random
// functional Σ w·out can cancel to below the size of its terms.
//
// An analytic gradient a passes when, for every entry,
//
//   |a_i − D_i(h)| ≤ spread_i + 2·δ_L/h + tol·scale,      scale = max(max_i |D_i|, floor)
//
// The first two terms are the finite difference's own error; tol·scale (1e-6 to 1e-8 of the largest
// entry) is the analytic side's rounding and any term the bound does not model. A wrong gradient
// (a missing factor, a sign, a dropped term) errs by a share of the entry itself, far above this.
// The bound depends only on the computed losses, so it holds whatever code the compiler generates
// (FMA contraction, vector width, summation order), on any CPU.
constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;
constexpr double kLossRounding = 1024;

struct FdGrad {
  std::vector<double> d;       // D(h), one per entry
  std::vector<double> spread;  // |D(2h) − D(h)|: 3× the truncation error of D(h)
  double h = 0;
  double loss_mag = 1;         // max(1, max |L| seen)
  size_t size() const { return d.size(); }
  double operator[](size_t i) const { return d[i]; }
  auto begin() const { return d.begin(); }
  auto end() const { return d.end(); }
  double rounding() const { return 2 * kLossRounding * kUnitRoundoff * loss_mag / h; }  // 2·δ_L/h
  double allowance(size_t i) const { return spread[i] + rounding(); }
};

// Central differences of a scalar loss with respect to every entry of `x` (perturbed in place and
// restored), at h and at 2h for the truncation estimate.
inline FdGrad numeric_grad(std::vector<double>& x, const std::function<double()>& loss, double h = 1e-6) {
  FdGrad g;
  g.h = h;
  g.d.resize(x.size());
  g.spread.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    double l[4];
    const double steps[4] = {h, -h, 2 * h, -2 * h};
    for (int k = 0; k < 4; ++k) {
      x[i] = keep + steps[k];
      l[k] = loss();
      g.loss_mag = std::max(g.loss_mag, std::abs(l[k]));
    }
    x[i] = keep;
    g.d[i] = (l[0] - l[1]) / (2 * h);
    g.spread[i] = std::abs((l[2] - l[3]) / (4 * h) - g.d[i]);
  }
  return g;
}

// The check above. `floor` is the smallest scale the relative term uses: a tensor whose gradient is
// tiny compared with the loss is compared at the floor. The same check holds a structurally zero
// gradient (every D_i is then rounding noise) to the finite difference's allowance.
inline void expect_grad_close(const std::vector<double>& analytic, const FdGrad& numeric, double tol, const std::string& what,
                              double floor = 1e-10) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = floor;
  for (size_t i = 0; i < numeric.size(); ++i) scale = std::max(scale, std::abs(numeric[i]));
  double worst = 0;  // the largest error as a share of its entry's allowance
  size_t at = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double ratio = std::abs(analytic[i] - numeric[i]) / (numeric.allowance(i) + tol * scale);
    if (ratio > worst) { worst = ratio; at = i; }
  }
  if (numeric.size() == 0) return;
  EXPECT_LE(worst, 1.0) << what << ": worst entry " << at << " analytic " << analytic[at] << " numeric " << numeric[at]
                        << " error " << std::abs(analytic[at] - numeric[at]) << " > allowed "
                        << numeric.allowance(at) + tol * scale << " (spread " << numeric.spread[at] << ", rounding "
                        << numeric.rounding() << ", tol·scale " << tol * scale << ")";
}

}  // namespace attnlab::test
