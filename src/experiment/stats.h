// Small-sample statistics for `attnlab compare` (docs/compare.md): mean and sample standard
// deviation, Student's t distribution through the regularized incomplete beta function, and
// Welch's unequal-variance t-test with its Welch–Satterthwaite interval, and the paired t-test. No external library.
#pragma once
#include <vector>

namespace attnlab::stats {

double mean(const std::vector<double>& x);         // NaN when empty
double sample_sd(const std::vector<double>& x);    // n − 1 denominator; NaN when n < 2

// I_x(a, b), the regularized incomplete beta function (continued fraction, modified Lentz), a, b > 0,
// 0 ≤ x ≤ 1; relative accuracy about 1e-14.
double incomplete_beta(double a, double b, double x);
// P(T ≤ t) for Student's t with df > 0 degrees of freedom (df need not be an integer).
double t_cdf(double t, double df);
// The p-quantile of Student's t (0 < p < 1), by bisection on t_cdf to 1e-12.
double t_quantile(double p, double df);

struct Welch {
  double diff = 0;   // mean(a) − mean(b)
  double se = 0;     // sqrt(s_a²/n_a + s_b²/n_b)
  double t = 0, df = 0;
  double p = 0;      // two-sided p-value
  double lo = 0, hi = 0;  // the (1 − alpha) interval of the difference: diff ∓ t_{1−alpha/2, df}·se
  bool valid = false;  // false when either sample has fewer than 2 values or se = 0 (then only diff is set)
};
Welch welch(const std::vector<double>& a, const std::vector<double>& b, double alpha = 0.05);

// The paired t-test on d_i = a_i − b_i (a and b of one size, pair i the same seed: in `compare` a
// seed fixes the data order of every variant, so seed-to-seed variation that the variants share
// cancels in d). diff = mean(d), se = sd(d)/√n, df = n − 1, two-sided p and the (1 − alpha)
// interval diff ∓ t_{1−alpha/2, n−1}·se.
struct Paired {
  int n = 0;
  double diff = 0, sd = 0, se = 0, t = 0, df = 0, p = 0, lo = 0, hi = 0;
  bool valid = false;  // false when n < 2 or sd(d) = 0 (then only n and diff are set)
};
Paired paired(const std::vector<double>& a, const std::vector<double>& b, double alpha = 0.05);

}  // namespace attnlab::stats
