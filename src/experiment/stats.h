// Small-sample statistics for `attnlab compare` (docs/compare.md "Statistics"): mean and sample
// standard deviation, Student's t distribution through the regularized incomplete beta function,
// Welch's unequal-variance t-test with its Welch–Satterthwaite interval, the paired t-test; for the
// primary comparisons the exact sign-flip permutation test, Holm's adjustment, the noncentral t
// and the power (seeds needed) of the paired t-test; for the gains in compute a least-squares line
// and the delta-method interval of a ratio of means; for the synthetic tasks' accuracies the Wilson
// score interval of a proportion and Newcombe's interval of a difference of two. Naive code, one function each with its
// reference; no external library.
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

// The alternative hypothesis of a test on a mean difference d (variant − other): two-sided (d ≠ 0),
// less (d < 0: in `compare`, "A < B", A has the lower loss) or greater (d > 0).
enum class Alternative { two_sided, less, greater };

// The p-value of a t statistic on df degrees of freedom under `alt`: two-sided P(|T| ≥ |t|),
// less P(T ≤ t), greater P(T ≥ t).
double t_p_value(double t, double df, Alternative alt);

// The exact sign-flip permutation test of the paired differences d (Fisher 1935, The Design of
// Experiments §21, on Darwin's Zea mays data): under the null each d_i is as likely to have had the
// other sign, so the 2^n sign patterns s are equally likely; with S(s) = Σ s_i·d_i and S_obs = Σ d_i,
// p = #{s : S(s) ≥ S_obs} / 2^n (greater), #{S(s) ≤ S_obs} / 2^n (less), #{|S(s)| ≥ |S_obs|} / 2^n
// (two-sided), all patterns enumerated; ties within 1e-12 of Σ|d_i| count as equal. p_min is the
// smallest p that n pairs allow (min_sign_flip_p). Invalid (p NaN) for n = 0 or n > 24 (2^24
// patterns).
struct SignFlip {
  int n = 0;
  double p = 0, p_min = 0;
  bool valid = false;
};
SignFlip sign_flip(const std::vector<double>& d, Alternative alt);
// 1/2^n one-sided, 2/2^n two-sided: only the observed pattern (and, two-sided, its mirror) at least
// as extreme.
double min_sign_flip_p(int n, Alternative alt);

// Holm's step-down adjustment (Holm 1979, "A simple sequentially rejective multiple test
// procedure"): with the m p-values sorted p_(1) ≤ … ≤ p_(m), the adjusted p_(i) =
// min(1, max_{j ≤ i} (m − j + 1)·p_(j)), returned in the input's order (R's p.adjust(p, "holm")).
// Rejecting where the adjusted p ≤ α controls the family-wise error rate at α. NaN entries are left
// out of the family (m counts the others) and stay NaN.
std::vector<double> holm_adjust(const std::vector<double>& p);

// Φ(z), the standard normal CDF.
double normal_cdf(double z);

// The p-quantile z of the standard normal, Φ(z) = p (0 < p < 1), by bisection on
// normal_cdf to 1e-15.
double normal_quantile(double p);

// A binomial proportion k/n with its Wilson score interval (Wilson 1927, "Probable inference, the law
// of succession, and statistical inference"; Newcombe 1998, "Two-sided confidence intervals for the
// single proportion", method 3): the p0 with |k/n − p0| ≤ z·sqrt(p0(1 − p0)/n), z = z_{1−alpha/2}:
//   (2k + z² ∓ z·sqrt(z² + 4k(1 − k/n))) / (2(n + z²)).
// Unlike k/n ∓ z·sqrt(p̂(1 − p̂)/n) it stays inside [0, 1] and is not empty at k = 0 or k = n
// (0/10: [0, 0.2775]). valid = false (p, lo, hi NaN) when n = 0 or k is not in [0, n].
struct Proportion {
  long long successes = 0, n = 0;
  double p = 0, lo = 0, hi = 0;
  bool valid = false;
};
Proportion wilson(long long successes, long long n, double alpha = 0.05);

// The difference of two independent proportions a − b with Newcombe's hybrid score interval
// (Newcombe 1998, "Interval estimation for the difference between independent proportions:
// comparison of eleven methods", method 10): with the Wilson intervals [l_a, u_a] and [l_b, u_b],
//   lo = d − sqrt((p_a − l_a)² + (u_b − p_b)²),  hi = d + sqrt((u_a − p_a)² + (p_b − l_b)²).
// valid = false (all NaN) when either proportion is invalid.
struct ProportionDifference {
  double diff = 0, lo = 0, hi = 0;
  bool valid = false;
};
ProportionDifference newcombe_difference(const Proportion& a, const Proportion& b, double alpha = 0.05);

// P(T' ≤ t) for the noncentral t with df > 0 degrees of freedom and noncentrality ncp, T' = (Z + ncp)/sqrt(V/df):
// Lenth's series (1989, Applied Statistics algorithm AS 243) for t ≥ 0,
//   F(t) = Φ(−ncp) + ½ Σ_j [p_j·I_x(j + ½, df/2) + q_j·I_x(j + 1, df/2)],  x = t²/(t² + df),
//   p_j = e^{−ncp²/2} (ncp²/2)^j / j!,  q_j = ncp·e^{−ncp²/2} (ncp²/2)^j / (√2·Γ(j + 3/2)),
// and F(t; df, ncp) = 1 − F(−t; df, −ncp) for t < 0. Summed naively to j = ncp²/2 + 12·(ncp/√2) + 60;
// absolute accuracy about 1e-12 for |ncp| ≤ 30 (checked against quadrature of the defining integral).
double noncentral_t_cdf(double t, double df, double ncp);

enum class Tails { one, two };
// The power of a t-test of level alpha on df degrees of freedom whose statistic is noncentral t with
// noncentrality ncp ≥ 0 under the alternative (the effect in the test's direction):
//   one tail: P(T' > t_{1−α, df}),  two tails: P(T' > t_{1−α/2, df}) + P(T' < −t_{1−α/2, df})
// (both tails: R's power.t.test(strict = TRUE); its default leaves out the second, about 1e-6 at
// 80% power).
double t_test_power(double df, double ncp, double alpha, Tails tails);
// The power of the paired (one-sample) t-test with n pairs (n ≥ 2; n need not be an integer, as in
// power.t.test) for a true mean difference `effect` (its magnitude, in the test's direction) when the
// differences have standard deviation sd: t_test_power(n − 1, effect·√n / sd, alpha, tails).
double paired_t_power(double n, double effect, double sd, double alpha, Tails tails);
// The smallest n ≥ 2 with paired_t_power(n, …) ≥ power: n doubled until it suffices, then bisected
// over the integers (power grows with n). reached = false (n = max_n) when even max_n is not enough.
struct SeedPlan {
  int n = 0;
  double power = 0;  // the power at n
  bool reached = false;
};
SeedPlan paired_seeds_needed(double effect, double sd, double alpha, double power, Tails tails, int max_n = 1000000);

// The least-squares line y = intercept + slope·x (n ≥ 2 points, x not all equal), its coefficient of
// determination r2 = 1 − Σ residual² / Σ (y − ȳ)² (NaN when y is constant) and the residuals y − fit.
struct LineFit {
  double intercept = 0, slope = 0, r2 = 0;
  std::vector<double> residuals;
  bool valid = false;
};
LineFit least_squares_line(const std::vector<double>& x, const std::vector<double>& y);

// The ratio of means R = ū/v̄ over n pairs (u_i, v_i) and its delta-method interval: to first order
// var(R) ≈ (s_u² − 2R·s_uv + R²·s_v²) / (n·v̄²) with the sample (co)variances (n − 1 denominators),
// and the (1 − alpha) interval R ∓ t_{1−alpha/2, n−1}·se. valid = false (only R set) when n < 2,
// v̄ = 0 or se = 0.
struct Ratio {
  int n = 0;
  double ratio = 0, se = 0, lo = 0, hi = 0;
  bool valid = false;
};
Ratio ratio_of_means(const std::vector<double>& u, const std::vector<double>& v, double alpha = 0.05);

}  // namespace attnlab::stats
