// The statistics of `attnlab compare` (src/experiment/stats.h) against known values.
//
// Reference values: Student-t quantiles t_{0.975, df} for df = 1, 2, 10 are the textbook table values
// (12.706, 4.303, 2.228), given here to more digits; every other reference number was computed once
// with mpmath 1.3.0 at 30 significant digits (betainc(a, b, 0, x, regularized=True) for I_x(a, b) and
// the t CDF, findroot for the quantile) and hard-coded; the Welch example is also worked by hand below.
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
