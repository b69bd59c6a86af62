// The statistics of `attnlab compare` (src/experiment/stats.h) against known values.
//
// Reference values: Student-t quantiles t_{0.975, df} for df = 1, 2, 10 are the textbook table values
// (12.706, 4.303, 2.228), given here to more digits; every other reference number was computed once
// with mpmath 1.3.0 at 30 significant digits (betainc(a, b, 0, x, regularized=True) for I_x(a, b) and
// the t CDF, findroot for the quantile) and hard-coded; the Welch example is also worked by hand below.
// The primary-comparison statistics (docs/compare.md "Primary comparisons") are checked against
// published worked examples: Holm's adjustment against the Holm–Bonferroni example of Wikipedia
// (also what R's p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") prints), the sign-flip test against
// Fisher's randomisation of Darwin's Zea mays data (The Design of Experiments, 1935, §21: 835 of the
// 2^15 sign patterns exceed the observed sum 314 and 28 equal it) and a set enumerated by hand, the
// seeds needed against the examples of R's ?power.t.test and the one-sample case
// power.t.test(delta = 1, sd = 1, power = .8, type = "one.sample") → n = 9.937864; the noncentral t
// against quadrature of its defining integral, P(T' ≤ t) = ∫ Φ(t·sqrt(u/df) − ncp) f_{χ²_df}(u) du,
// in mpmath 1.3.0 at 30 digits (which also reproduces every R number quoted here to its printed digits).
// The proportions of the synthetic tasks against Newcombe's worked examples: the Wilson interval
// ("Two-sided confidence intervals for the single proportion: comparison of seven methods", 1998,
// method 3: 81/263, 15/148, 0/20, 1/29) and the hybrid score interval of a difference ("Interval
// estimation for the difference between independent proportions: comparison of eleven methods",
// 1998, method 10, its examples (a)-(h)), at the 4 decimals printed there; the full-precision
// values beside them were recomputed from the same formulas in Python with SciPy 1.10.1's
// norm.ppf(0.975) = 1.959963984540054.
#include <gtest/gtest.h>

#include <cmath>

#include "experiment/stats.h"

using namespace attnlab::stats;

TEST(Stats, MeanAndSampleSd) {
  // {2, 4, 4, 4, 5, 5, 7, 9}: mean 5, Σ(x − 5)² = 32, sd = sqrt(32/7).
  const std::vector<double> x{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(x), 5.0);
  EXPECT_NEAR(sample_sd(x), std::sqrt(32.0 / 7.0), 1e-15);
  EXPECT_TRUE(std::isnan(sample_sd({1.0})));
  EXPECT_TRUE(std::isnan(mean({})));
}

TEST(Stats, IncompleteBeta) {
  // I_0.4(2, 3) = Σ_{j=2}^{4} C(4, j) 0.4^j 0.6^{4−j} = 0.3456 + 0.1536 + 0.0256 = 0.5248 (binomial identity).
  EXPECT_NEAR(incomplete_beta(2, 3, 0.4), 0.5248, 1e-13);
  // I_0.1(1/2, 1/2) = (2/π) asin(sqrt(0.1)) = 0.204832764699133451649 (mpmath).
  EXPECT_NEAR(incomplete_beta(0.5, 0.5, 0.1), 0.204832764699133451649, 1e-13);
  EXPECT_NEAR(incomplete_beta(0.5, 0.5, 0.1), 2 / M_PI * std::asin(std::sqrt(0.1)), 1e-13);
  EXPECT_EQ(incomplete_beta(3, 4, 0), 0);
  EXPECT_EQ(incomplete_beta(3, 4, 1), 1);
}

TEST(Stats, StudentT) {
  EXPECT_NEAR(t_cdf(1, 1), 0.75, 1e-13);  // Cauchy: 1/2 + atan(1)/π
  EXPECT_NEAR(t_cdf(2, 5), 0.949030260585070821877, 1e-12);
  EXPECT_NEAR(t_cdf(-1.5, 7.3), 0.0877815464015430622226, 1e-12);
  EXPECT_DOUBLE_EQ(t_cdf(0, 3), 0.5);
  EXPECT_NEAR(t_quantile(0.975, 1), 12.7062047361747046460, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 2), 4.30265272974946385232, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 10), 2.22813885198627474840, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 3.5), 2.94008863798272979385, 1e-9);
  EXPECT_NEAR(t_quantile(0.025, 10), -2.22813885198627474840, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 1e6), 1.959966, 1e-5);  // → the normal quantile
}

TEST(Stats, WelchTextbookExample) {
  // a = {5.1, 5.3, 5.2, 5.4}: mean 5.25, s² = (0.0225 + 0.0025 + 0.0025 + 0.0225)/3 = 0.05/3.
  // b = {5.0, 4.9, 5.05}:     mean 4.98333…, s² = (0.000278 + 0.006944 + 0.004444)/2 = 0.0175/3.
  // s²_a/n_a = 0.0041667, s²_b/n_b = 0.0019444; se = sqrt(0.0061111) = 0.0781736;
  // df = 0.0061111² / (0.0041667²/3 + 0.0019444²/2) = 4.8643; t = 0.266667/0.0781736 = 3.41121.
  const std::vector<double> a{5.1, 5.3, 5.2, 5.4}, b{5.0, 4.9, 5.05};
  const Welch w = welch(a, b);
  ASSERT_TRUE(w.valid);
  EXPECT_NEAR(w.diff, 0.266666666666666666667, 1e-12);
  EXPECT_NEAR(w.se, 0.0781735959970571592428, 1e-12);
  EXPECT_NEAR(w.df, 4.86432160804020100503, 1e-10);
  EXPECT_NEAR(w.t, 3.41121146168976694878, 1e-10);
  EXPECT_NEAR(w.p, 0.0198584808148363502420, 1e-10);
  EXPECT_NEAR(w.lo, 0.0640174074584948481955, 1e-9);
  EXPECT_NEAR(w.hi, 0.469315925874838485138, 1e-9);
  // Swapping the samples flips the sign, keeps p.
  const Welch r = welch(b, a);
  EXPECT_NEAR(r.diff, -w.diff, 1e-15);
  EXPECT_NEAR(r.p, w.p, 1e-14);
  EXPECT_NEAR(r.lo, -w.hi, 1e-9);
}

TEST(Stats, WelchDegenerate) {
  EXPECT_FALSE(welch({1.0}, {2.0, 3.0}).valid);          // one value: no variance
  EXPECT_FALSE(welch({1.0, 1.0}, {2.0, 2.0}).valid);     // zero variance: se = 0
  EXPECT_DOUBLE_EQ(welch({1.0, 1.0}, {2.0, 2.0}).diff, -1.0);
}

TEST(Stats, PairedStudentSleepData) {
  // Student's (1908) sleep data, the textbook paired example: extra hours of sleep of ten patients
  // under two drugs. d = a − b = {−1.2, −2.4, −1.3, −1.3, 0, −1.0, −1.8, −0.8, −4.6, −1.4}: mean −1.58,
  // Σ(d − mean)² = 13.616, sd = sqrt(13.616/9) = 1.22999548, se = sd/√10 = 0.38895873,
  // t = −4.06212768 on 9 degrees of freedom, two-sided p = 0.0028328 (R's t.test(..., paired = TRUE)
  // prints t = −4.0621, p-value = 0.002833, interval −2.4598858 to −0.7001142).
  const std::vector<double> a{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
  const std::vector<double> b{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};
  const Paired r = paired(a, b);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.n, 10);
  EXPECT_NEAR(r.diff, -1.58, 1e-12);
  EXPECT_NEAR(r.sd, std::sqrt(13.616 / 9), 1e-12);
  EXPECT_NEAR(r.t, -1.58 / (std::sqrt(13.616 / 9) / std::sqrt(10.0)), 1e-10);
  EXPECT_DOUBLE_EQ(r.df, 9);
  EXPECT_NEAR(r.p, 0.002833, 5e-7);
  EXPECT_NEAR(r.lo, -2.4598858, 1e-6);
  EXPECT_NEAR(r.hi, -0.7001142, 1e-6);
  // The same numbers through Welch ignore the pairing: a far weaker test on these data.
  EXPECT_GT(welch(a, b).p, 0.05);
}

TEST(Stats, PairedDegenerate) {
  EXPECT_FALSE(paired({1.0}, {2.0}).valid);                 // one pair
  EXPECT_FALSE(paired({1.0, 2.0}, {1.0}).valid);            // sizes differ
  EXPECT_EQ(paired({1.0, 2.0}, {1.0}).n, 0);
  const Paired c = paired({1.0, 2.0}, {2.0, 3.0});          // constant difference: sd = 0
  EXPECT_FALSE(c.valid);
  EXPECT_DOUBLE_EQ(c.diff, -1.0);
}

TEST(Stats, TPValueBySide) {
  // t = 2 on 5 degrees of freedom: P(T ≤ 2) = 0.949030260585070821877 (mpmath, as in StudentT).
  const double upper = 1 - 0.949030260585070821877;
  EXPECT_NEAR(t_p_value(2, 5, Alternative::greater), upper, 1e-12);
  EXPECT_NEAR(t_p_value(2, 5, Alternative::less), 1 - upper, 1e-12);
  EXPECT_NEAR(t_p_value(2, 5, Alternative::two_sided), 2 * upper, 1e-12);
  EXPECT_NEAR(t_p_value(-2, 5, Alternative::less), upper, 1e-12);
  // The paired sleep data's one-sided p is half the two-sided 0.0028328.
  EXPECT_NEAR(t_p_value(-4.062127683, 9, Alternative::less), 0.0028328 / 2, 5e-7);
}

TEST(Stats, SignFlipByHand) {
  // d = {1, 2, 3}: the 8 sign patterns sum to 6, 4, 2, 0, 0, −2, −4, −6. S_obs = 6: one pattern is
  // ≥ 6 (p = 1/8 greater), every pattern ≤ 6 (p = 1 less), two have |S| ≥ 6 (p = 2/8 two-sided).
  const std::vector<double> d{1, 2, 3};
  EXPECT_DOUBLE_EQ(sign_flip(d, Alternative::greater).p, 1.0 / 8);
  EXPECT_DOUBLE_EQ(sign_flip(d, Alternative::less).p, 1.0);
  EXPECT_DOUBLE_EQ(sign_flip(d, Alternative::two_sided).p, 2.0 / 8);
  // d = {−0.5, 1, −2, −3}: S_obs = −4.5. The 16 sums are ±0.5 ± 1 ± 2 ± 3 = ±6.5, ±5.5, ±4.5, ±3.5,
  // ±2.5, ±1.5, ±0.5 (twice); three are ≤ −4.5 (−6.5, −5.5 and the observed), six have |S| ≥ 4.5.
  const std::vector<double> e{-0.5, 1, -2, -3};
  EXPECT_DOUBLE_EQ(sign_flip(e, Alternative::less).p, 3.0 / 16);
  EXPECT_DOUBLE_EQ(sign_flip(e, Alternative::two_sided).p, 6.0 / 16);
  // The smallest p n pairs allow: every difference of one sign.
  EXPECT_DOUBLE_EQ(sign_flip({-1, -2, -3}, Alternative::less).p, 1.0 / 8);
  EXPECT_DOUBLE_EQ(sign_flip({-1, -2, -3}, Alternative::less).p_min, 1.0 / 8);
  EXPECT_DOUBLE_EQ(min_sign_flip_p(3, Alternative::two_sided), 2.0 / 8);
  EXPECT_DOUBLE_EQ(min_sign_flip_p(5, Alternative::greater), 1.0 / 32);
  EXPECT_FALSE(sign_flip({}, Alternative::less).valid);
  EXPECT_FALSE(sign_flip(std::vector<double>(25, 1.0), Alternative::less).valid);
}

TEST(Stats, SignFlipFisherDarwinZeaMays) {
  // Darwin's 15 pairs of cross- and self-fertilised Zea mays, height differences in eighths of an
  // inch, as Fisher (1935, §21) lists them; Σ d = 314. Fisher: 835 patterns give a larger sum and 28
  // the same, so P(S ≥ 314) = 863/32768 = 2.634%, and two-sided (the mirror patterns) 5.267%.
  const std::vector<double> d{49, -67, 8, 16, 6, 23, 28, 41, 14, 29, 56, 24, 75, 60, -48};
  const SignFlip g = sign_flip(d, Alternative::greater);
  ASSERT_TRUE(g.valid);
  EXPECT_EQ(g.n, 15);
  EXPECT_DOUBLE_EQ(g.p, 863.0 / 32768);
  EXPECT_DOUBLE_EQ(sign_flip(d, Alternative::two_sided).p, 1726.0 / 32768);
  // The same data scaled to inches (not exact in binary): the ties still count.
  std::vector<double> inches;
  for (double x : d) inches.push_back(x / 8 * 0.1);
  EXPECT_DOUBLE_EQ(sign_flip(inches, Alternative::greater).p, 863.0 / 32768);
}

TEST(Stats, HolmWikipediaExample) {
  // Wikipedia, "Holm–Bonferroni method", Example: four hypotheses with p = 0.01, 0.04, 0.03, 0.005
  // at α = 0.05. Sorted 0.005, 0.01, 0.03, 0.04: 0.005 < 0.05/4 and 0.01 < 0.05/3 are rejected,
  // 0.03 > 0.05/2 stops. Adjusted: 4·0.005 = 0.02, max(0.02, 3·0.01) = 0.03, max(0.03, 2·0.03) =
  // 0.06, max(0.06, 1·0.04) = 0.06; in the input order 0.03, 0.06, 0.06, 0.02 (R's p.adjust).
  const std::vector<double> adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_NEAR(adj[0], 0.03, 1e-15);
  EXPECT_NEAR(adj[1], 0.06, 1e-15);
  EXPECT_NEAR(adj[2], 0.06, 1e-15);
  EXPECT_NEAR(adj[3], 0.02, 1e-15);
  // Capped at 1; a NaN is left out of the family (m = 2 here) and stays NaN.
  const std::vector<double> b = holm_adjust({0.6, NAN, 0.01});
  EXPECT_DOUBLE_EQ(b[0], 0.6);
  EXPECT_TRUE(std::isnan(b[1]));
  EXPECT_DOUBLE_EQ(b[2], 0.02);
  EXPECT_DOUBLE_EQ(holm_adjust({0.7, 0.8})[0], 1.0);
}

TEST(Stats, NoncentralT) {
  // Quadrature of the defining integral in mpmath (30 digits).
  EXPECT_NEAR(noncentral_t_cdf(2, 5, 1), 0.77807466261621487147, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(-1, 8, 0.5), 0.076723093111300250826, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(1.5, 10, 2.5), 0.1624379037638654671, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(3, 4, -1), 0.99781991451625353368, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(2.306, 8, 3), 0.25198326643474576512, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(-2, 3, -1.5), 0.4003237316291071446, 1e-12);
  EXPECT_NEAR(noncentral_t_cdf(36, 20, 35), 0.52795142581795959329, 1e-10);  // e^{−ncp²/2} underflows alone
  EXPECT_DOUBLE_EQ(noncentral_t_cdf(1.5, 7.3, 0), t_cdf(1.5, 7.3));  // ncp = 0: Student's t
}

TEST(Stats, PowerAgainstRPowerTTest) {
  // R's ?power.t.test examples (two-sample: df = 2(n − 1), ncp = δ·sqrt(n/2)/sd). R's default
  // strict = FALSE leaves out the lower tail of the two-sided test, which this function counts:
  // 2.3e-7 more power at n = 20 (mpmath: 0.868952801692 without it, 0.868953027724 with it).
  EXPECT_NEAR(t_test_power(38, std::sqrt(10.0), 0.05, Tails::two), 0.8689528, 1e-6);  // power.t.test(n = 20, delta = 1)
  EXPECT_NEAR(t_test_power(38, std::sqrt(10.0), 0.05, Tails::two), 0.868953027724, 1e-9);
  // power.t.test(power = .90, delta = 1) → n = 22.02110; with alternative = "one.sided" → 17.84713.
  EXPECT_NEAR(t_test_power(2 * (22.02110 - 1), std::sqrt(22.02110 / 2), 0.05, Tails::two), 0.90, 1e-6);
  EXPECT_NEAR(t_test_power(2 * (17.84713 - 1), std::sqrt(17.84713 / 2), 0.05, Tails::one), 0.90, 1e-6);
  // One-sample / paired: power.t.test(delta = 1, sd = 1, power = .8, type = "one.sample") → n = 9.937864.
  EXPECT_NEAR(paired_t_power(9.937864, 1, 1, 0.05, Tails::two), 0.80, 2e-6);
}

TEST(Stats, SeedsNeeded) {
  // Whole seeds: the power at n = 9 and 10 of the example above is 0.748017 and 0.803097 (mpmath),
  // so 10 seeds; one-sided (n = 7.7276 continuous; 0.754396 at 7, 0.815019 at 8) 8 seeds.
  const SeedPlan two = paired_seeds_needed(1, 1, 0.05, 0.8, Tails::two);
  ASSERT_TRUE(two.reached);
  EXPECT_EQ(two.n, 10);
  EXPECT_NEAR(two.power, 0.803096856633, 1e-9);
  EXPECT_NEAR(paired_t_power(9, 1, 1, 0.05, Tails::two), 0.748017092229, 1e-9);
  const SeedPlan one = paired_seeds_needed(1, 1, 0.05, 0.8, Tails::one);
  EXPECT_EQ(one.n, 8);
  EXPECT_NEAR(one.power, 0.815019441557, 1e-9);
  // Only the standardized effect counts: a loss gap of 0.01 at sd 0.02 is power.t.test(delta = .5,
  // power = .8, type = "one.sample") → 33.37, so 34 seeds (0.795366 at 33, 0.807778 at 34).
  EXPECT_EQ(paired_seeds_needed(0.01, 0.02, 0.05, 0.8, Tails::two).n, 34);
  EXPECT_EQ(paired_seeds_needed(0.5, 1, 0.05, 0.8, Tails::two).n, 34);
  // Two seeds give one degree of freedom (t_0.975 = 12.7): effect/sd = 30 has power 0.99913 there,
  // 10 only 0.73282 (mpmath), so 3 seeds. No effect or no spread gives no plan; a cap is reported.
  EXPECT_EQ(paired_seeds_needed(30, 1, 0.05, 0.8, Tails::two).n, 2);
  EXPECT_NEAR(paired_t_power(2, 10, 1, 0.05, Tails::two), 0.732819589805712, 1e-9);
  EXPECT_EQ(paired_seeds_needed(10, 1, 0.05, 0.8, Tails::two).n, 3);
  EXPECT_EQ(paired_seeds_needed(0, 1, 0.05, 0.8, Tails::two).n, 0);
  EXPECT_EQ(paired_seeds_needed(1, 0, 0.05, 0.8, Tails::two).n, 0);
  const SeedPlan capped = paired_seeds_needed(0.001, 1, 0.05, 0.8, Tails::two, 1000);
  EXPECT_FALSE(capped.reached);
  EXPECT_EQ(capped.n, 1000);
}

TEST(Stats, LeastSquaresLineByHand) {
  // x = {0, 1, 2}, y = {1, 3, 4}: x̄ = 1, ȳ = 8/3, Sxx = 2, Sxy = 3, slope 3/2, intercept 7/6;
  // residuals −1/6, 1/3, −1/6; Syy = 42/9, r² = 1 − (1/6)/(42/9) = 27/28.
  const LineFit f = least_squares_line({0, 1, 2}, {1, 3, 4});
  ASSERT_TRUE(f.valid);
  EXPECT_NEAR(f.slope, 1.5, 1e-15);
  EXPECT_NEAR(f.intercept, 7.0 / 6, 1e-15);
  EXPECT_NEAR(f.r2, 27.0 / 28, 1e-15);
  ASSERT_EQ(f.residuals.size(), 3u);
  EXPECT_NEAR(f.residuals[1], 1.0 / 3, 1e-15);
  EXPECT_FALSE(least_squares_line({1, 1}, {2, 3}).valid);
}

TEST(Stats, RatioOfMeansDeltaMethodByHand) {
  // u = {1, 2, 3}, v = {2, 2, 4}: ū = 2, v̄ = 8/3, R = 3/4; s_u² = 1, s_v² = 4/3, s_uv = 1;
  // var = (1 − 2·(3/4)·1 + (9/16)·(4/3)) / (3·64/9) = (1/4)/(64/3) = 3/256; t_{0.975, 2} = 4.30265272974946385232.
  const Ratio r = ratio_of_means({1, 2, 3}, {2, 2, 4});
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.n, 3);
  EXPECT_NEAR(r.ratio, 0.75, 1e-15);
  EXPECT_NEAR(r.se, std::sqrt(3.0 / 256), 1e-15);
  EXPECT_NEAR(r.lo, 0.75 - 4.30265272974946385232 * std::sqrt(3.0 / 256), 1e-9);
  EXPECT_NEAR(r.hi, 0.75 + 4.30265272974946385232 * std::sqrt(3.0 / 256), 1e-9);
  EXPECT_FALSE(ratio_of_means({1}, {2}).valid);
  EXPECT_DOUBLE_EQ(ratio_of_means({1}, {2}).ratio, 0.5);
}

TEST(Stats, NormalQuantile) {
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-14);  // SciPy norm.ppf
  EXPECT_NEAR(normal_quantile(0.995), 2.5758293035489004, 1e-14);
  EXPECT_NEAR(normal_quantile(0.1), -1.2815515655446004, 1e-14);
  EXPECT_DOUBLE_EQ(normal_quantile(0.5), 0);
  EXPECT_TRUE(std::isnan(normal_quantile(0)));
  EXPECT_TRUE(std::isnan(normal_quantile(1)));
}

TEST(Stats, WilsonNewcombeSingleProportionExamples) {
  struct Case {
    long long k, n;
    double lo, hi;  // Newcombe (1998a), method 3, 4 decimals
  };
  for (const Case& c : {Case{81, 263, 0.2553, 0.3662}, Case{15, 148, 0.0624, 0.1605}, Case{0, 20, 0.0, 0.1611}, Case{1, 29, 0.0061, 0.1718},
                        Case{0, 10, 0.0, 0.2775}}) {
    SCOPED_TRACE(std::to_string(c.k) + "/" + std::to_string(c.n));
    const Proportion w = wilson(c.k, c.n);
    ASSERT_TRUE(w.valid);
    EXPECT_DOUBLE_EQ(w.p, double(c.k) / double(c.n));
    EXPECT_NEAR(w.lo, c.lo, 5e-5);
    EXPECT_NEAR(w.hi, c.hi, 5e-5);
  }
  // Full precision (the formula in Python): 81/263 and 15/148.
  EXPECT_NEAR(wilson(81, 263).lo, 0.2552885198782742, 1e-13);
  EXPECT_NEAR(wilson(81, 263).hi, 0.36620957698280004, 1e-13);
  EXPECT_NEAR(wilson(15, 148).lo, 0.06238639953073629, 1e-13);
  EXPECT_NEAR(wilson(15, 148).hi, 0.16048724172330803, 1e-13);
  // At k = 0 and k = n the bound is exact; the other is the mirror image: 10/10 = [1 − 0.2775, 1].
  EXPECT_EQ(wilson(0, 10).lo, 0.0);
  EXPECT_EQ(wilson(10, 10).hi, 1.0);
  EXPECT_NEAR(wilson(10, 10).lo, 1 - wilson(0, 10).hi, 1e-15);
  // 99%: z = 2.5758…, 0/10 → z²/(n + z²).
  const double z = 2.5758293035489004;
  EXPECT_NEAR(wilson(0, 10, 0.01).hi, z * z / (10 + z * z), 1e-13);
  EXPECT_FALSE(wilson(0, 0).valid);
  EXPECT_FALSE(wilson(3, 2).valid);
  EXPECT_FALSE(wilson(-1, 2).valid);
  EXPECT_TRUE(std::isnan(wilson(0, 0).lo));
}

TEST(Stats, NewcombeHybridScoreDifferenceExamples) {
  struct Case {
    long long ka, na, kb, nb;
    double diff, lo, hi;  // Newcombe (1998b), Table II, method 10
  };
  const Case cases[] = {{56, 70, 48, 80, 0.2, 0.0524, 0.3339},     {9, 10, 3, 10, 0.6, 0.1705, 0.8090},
                        {6, 7, 2, 7, 4.0 / 7, 0.0582, 0.8062},     {5, 56, 0, 29, 5.0 / 56, -0.0381, 0.1926},
                        {0, 10, 0, 20, 0.0, -0.1611, 0.2775},      {0, 10, 0, 10, 0.0, -0.2775, 0.2775},
                        {10, 10, 0, 20, 1.0, 0.6791, 1.0},         {10, 10, 0, 10, 1.0, 0.6075, 1.0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.ka) + "/" + std::to_string(c.na) + " - " + std::to_string(c.kb) + "/" + std::to_string(c.nb));
    const ProportionDifference d = newcombe_difference(wilson(c.ka, c.na), wilson(c.kb, c.nb));
    ASSERT_TRUE(d.valid);
    EXPECT_NEAR(d.diff, c.diff, 1e-15);
    EXPECT_NEAR(d.lo, c.lo, 5e-5);
    EXPECT_NEAR(d.hi, c.hi, 5e-5);
  }
  // Example (a) in full precision, and the interval of b − a is the mirror of a − b's.
  const ProportionDifference a = newcombe_difference(wilson(56, 70), wilson(48, 80));
  EXPECT_NEAR(a.lo, 0.052431472402364815, 1e-13);
  EXPECT_NEAR(a.hi, 0.3338726540369059, 1e-13);
  const ProportionDifference m = newcombe_difference(wilson(48, 80), wilson(56, 70));
  EXPECT_NEAR(m.lo, -a.hi, 1e-15);
  EXPECT_NEAR(m.hi, -a.lo, 1e-15);
  EXPECT_FALSE(newcombe_difference(wilson(1, 0), wilson(1, 2)).valid);
}
