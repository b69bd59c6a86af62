#include "experiment/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace attnlab::stats {

double mean(const std::vector<double>& x) {
  if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (double v : x) s += v;
  return s / double(x.size());
}

double sample_sd(const std::vector<double>& x) {
  if (x.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  const double m = mean(x);
  double s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return std::sqrt(s / double(x.size() - 1));
}

namespace {
// The continued fraction of I_x(a, b) (Numerical Recipes §6.4, modified Lentz), valid for
// x < (a + 1)/(a + b + 2); the caller uses the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) otherwise.
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-16;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < eps) break;
  }
  return h;
}
}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double lbt = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  const double bt = std::exp(lbt);
  if (x < (a + 1) / (a + b + 2)) return bt * beta_cf(a, b, x) / a;
  return 1 - bt * beta_cf(b, a, 1 - x) / b;
}

double t_cdf(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  // P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2).
  const double tail = incomplete_beta(df / 2, 0.5, df / (df + t * t));
  return t > 0 ? 1 - tail / 2 : tail / 2;
}

double t_quantile(double p, double df) {
  if (!(p > 0 && p < 1) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0.5) return 0;
  if (p < 0.5) return -t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (t_cdf(hi, df) < p && hi < 1e300) hi *= 2;
  for (int i = 0; i < 400 && hi - lo > 1e-12 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

namespace {
// The common end of both t-tests, given diff, se > 0 and df: t, the two-sided p and the interval.
template <class R>
void finish_t_test(R& r, double alpha) {
  r.t = r.diff / r.se;
  r.p = incomplete_beta(r.df / 2, 0.5, r.df / (r.df + r.t * r.t));
  const double q = t_quantile(1 - alpha / 2, r.df);
  r.lo = r.diff - q * r.se;
  r.hi = r.diff + q * r.se;
  r.valid = true;
}
}  // namespace

Welch welch(const std::vector<double>& a, const std::vector<double>& b, double alpha) {
  Welch w;
  w.diff = mean(a) - mean(b);
  if (a.size() < 2 || b.size() < 2) return w;
  const double va = sample_sd(a) * sample_sd(a) / double(a.size());
  const double vb = sample_sd(b) * sample_sd(b) / double(b.size());
  w.se = std::sqrt(va + vb);
  if (!(w.se > 0)) return w;
  w.df = (va + vb) * (va + vb) / (va * va / double(a.size() - 1) + vb * vb / double(b.size() - 1));
  finish_t_test(w, alpha);
  return w;
}

Paired paired(const std::vector<double>& a, const std::vector<double>& b, double alpha) {
  Paired r;
  if (a.size() != b.size()) return r;
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  r.n = (int)d.size();
  r.diff = mean(d);
  if (r.n < 2) return r;
  r.sd = sample_sd(d);
  r.se = r.sd / std::sqrt(double(r.n));
  if (!(r.se > 0)) return r;
  r.df = r.n - 1;
  finish_t_test(r, alpha);
  return r;
}

double t_p_value(double t, double df, Alternative alt) {
  if (std::isnan(t) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  switch (alt) {
    case Alternative::less: return t_cdf(t, df);
    case Alternative::greater: return t_cdf(-t, df);  // P(T ≥ t) = P(T ≤ −t): no 1 − x cancellation
    case Alternative::two_sided: break;
  }
  return std::isinf(t) ? 0.0 : incomplete_beta(df / 2, 0.5, df / (df + t * t));
}

double min_sign_flip_p(int n, Alternative alt) {
  return (alt == Alternative::two_sided ? 2.0 : 1.0) / std::ldexp(1.0, n);
}

SignFlip sign_flip(const std::vector<double>& d, Alternative alt) {
  SignFlip r;
  r.n = (int)d.size();
  r.p_min = min_sign_flip_p(r.n, alt);
  r.p = std::numeric_limits<double>::quiet_NaN();
  if (r.n == 0 || r.n > 24) return r;
  double observed = 0, scale = 0;
  for (double x : d) { observed += x; scale += std::fabs(x); }
  const double tie = 1e-12 * scale;  // sums of the same terms in another order may differ in the last bits
  const uint64_t patterns = uint64_t(1) << r.n;
  uint64_t extreme = 0;
  for (uint64_t mask = 0; mask < patterns; ++mask) {  // bit i set: d_i with the other sign
    double sum = 0;
    for (int i = 0; i < r.n; ++i) sum += ((mask >> i) & 1) ? -d[i] : d[i];
    const bool as_extreme = alt == Alternative::greater ? sum >= observed - tie
                            : alt == Alternative::less  ? sum <= observed + tie
                                                        : std::fabs(sum) >= std::fabs(observed) - tie;
    extreme += as_extreme;
  }
  r.p = double(extreme) / double(patterns);
  r.valid = true;
  return r;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<double> adjusted(p.size(), std::numeric_limits<double>::quiet_NaN());
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i)
    if (!std::isnan(p[i])) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  const size_t m = order.size();
  double running = 0;  // the max over j ≤ i keeps the adjusted values in the order of the raw ones
  for (size_t i = 0; i < m; ++i) {
    running = std::max(running, double(m - i) * p[order[i]]);
    adjusted[order[i]] = std::min(1.0, running);
  }
  return adjusted;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) return std::numeric_limits<double>::quiet_NaN();
  if (p == 0.5) return 0;
  if (p < 0.5) return -normal_quantile(1 - p);
  double lo = 0, hi = 1;
  while (normal_cdf(hi) < p && hi < 40) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * std::max(1.0, hi); ++i) {
    const double mid = 0.5 * (lo + hi);
    (normal_cdf(mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Proportion wilson(long long k, long long n, double alpha) {
  Proportion r;
  r.successes = k;
  r.n = n;
  if (n <= 0 || k < 0 || k > n || !(alpha > 0 && alpha < 1)) {
    r.p = r.lo = r.hi = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  const double z = normal_quantile(1 - alpha / 2), z2 = z * z, kd = double(k), nd = double(n);
  r.p = kd / nd;
  const double centre = (2 * kd + z2) / (2 * (nd + z2));
  const double half = z * std::sqrt(z2 + 4 * kd * (1 - r.p)) / (2 * (nd + z2));
  // At k = 0 (k = n) the bound is 0 (1) exactly; the formula can round to ±1e-17 beside it.
  r.lo = k == 0 ? 0.0 : std::max(0.0, centre - half);
  r.hi = k == n ? 1.0 : std::min(1.0, centre + half);
  r.valid = true;
  return r;
}

ProportionDifference newcombe_difference(const Proportion& a, const Proportion& b, double alpha) {
  ProportionDifference d;
  // The intervals at this alpha (a and b may carry intervals of another level).
  const Proportion wa = wilson(a.successes, a.n, alpha), wb = wilson(b.successes, b.n, alpha);
  if (!wa.valid || !wb.valid) {
    d.diff = d.lo = d.hi = std::numeric_limits<double>::quiet_NaN();
    return d;
  }
  d.diff = wa.p - wb.p;
  d.lo = d.diff - std::sqrt((wa.p - wa.lo) * (wa.p - wa.lo) + (wb.hi - wb.p) * (wb.hi - wb.p));
  d.hi = d.diff + std::sqrt((wa.hi - wa.p) * (wa.hi - wa.p) + (wb.p - wb.lo) * (wb.p - wb.lo));
  d.valid = true;
  return d;
}

double noncentral_t_cdf(double t, double df, double ncp) {
  if (std::isnan(t) || std::isnan(ncp) || !(df > 0)) return std::numeric_limits<double>::quiet_NaN();
  if (ncp == 0) return t_cdf(t, df);
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  if (t < 0) return 1 - noncentral_t_cdf(-t, df, -ncp);
  const double x = t * t / (t * t + df);
  const double lambda = ncp * ncp / 2;
  const double sign = ncp > 0 ? 1 : -1;
  const int last = int(lambda + 12 * std::sqrt(lambda) + 60);  // the Poisson(λ) weights beyond are < 1e-20
  double sum = 0;
  for (int j = 0; j <= last; ++j) {
    // The weights in logs: e^{−λ} alone underflows for |ncp| > 38.
    const double log_power = -lambda + j * std::log(lambda);
    const double p_j = std::exp(log_power - std::lgamma(j + 1.0));
    const double q_j = sign * std::exp(log_power + std::log(std::fabs(ncp)) - 0.5 * std::log(2.0) - std::lgamma(j + 1.5));
    sum += p_j * incomplete_beta(j + 0.5, df / 2, x) + q_j * incomplete_beta(j + 1.0, df / 2, x);
  }
  return normal_cdf(-ncp) + 0.5 * sum;
}

double t_test_power(double df, double ncp, double alpha, Tails tails) {
  const double q = t_quantile(1 - (tails == Tails::two ? alpha / 2 : alpha), df);
  double power = 1 - noncentral_t_cdf(q, df, ncp);
  if (tails == Tails::two) power += noncentral_t_cdf(-q, df, ncp);
  return power;
}

double paired_t_power(double n, double effect, double sd, double alpha, Tails tails) {
  return t_test_power(n - 1, effect * std::sqrt(n) / sd, alpha, tails);
}

SeedPlan paired_seeds_needed(double effect, double sd, double alpha, double power, Tails tails, int max_n) {
  SeedPlan plan;
  if (!(effect > 0) || !(sd > 0) || !(power > 0 && power < 1) || max_n < 2) return plan;  // n = 0: no plan
  auto power_at = [&](int n) { return paired_t_power(n, effect, sd, alpha, tails); };
  int lo = 1, hi = 2;  // power_at(lo) < power (n = 1 has no test), power_at(hi) to be found ≥ power
  while (power_at(hi) < power) {
    if (hi == max_n) {
      plan.n = max_n;
      plan.power = power_at(max_n);
      return plan;
    }
    lo = hi;
    hi = (int)std::min<int64_t>(int64_t(hi) * 2, max_n);
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (power_at(mid) >= power ? hi : lo) = mid;
  }
  plan.n = hi;
  plan.power = power_at(hi);
  plan.reached = true;
  return plan;
}

LineFit least_squares_line(const std::vector<double>& x, const std::vector<double>& y) {
  LineFit f;
  const size_t n = x.size();
  if (n < 2 || y.size() != n) return f;
  const double mx = mean(x), my = mean(y);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (!(sxx > 0)) return f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss_residual = 0;
  for (size_t i = 0; i < n; ++i) {
    f.residuals.push_back(y[i] - (f.intercept + f.slope * x[i]));
    ss_residual += f.residuals.back() * f.residuals.back();
  }
  f.r2 = syy > 0 ? 1 - ss_residual / syy : std::numeric_limits<double>::quiet_NaN();
  f.valid = true;
  return f;
}

Ratio ratio_of_means(const std::vector<double>& u, const std::vector<double>& v, double alpha) {
  Ratio r;
  if (u.size() != v.size() || u.empty()) return r;
  r.n = (int)u.size();
  const double mu = mean(u), mv = mean(v);
  r.ratio = mu / mv;
  if (r.n < 2 || mv == 0) return r;
  double suu = 0, svv = 0, suv = 0;
  for (int i = 0; i < r.n; ++i) {
    suu += (u[i] - mu) * (u[i] - mu);
    svv += (v[i] - mv) * (v[i] - mv);
    suv += (u[i] - mu) * (v[i] - mv);
  }
  suu /= r.n - 1;
  svv /= r.n - 1;
  suv /= r.n - 1;
  const double var = (suu - 2 * r.ratio * suv + r.ratio * r.ratio * svv) / (r.n * mv * mv);
  r.se = std::sqrt(std::max(0.0, var));
  if (!(r.se > 0)) return r;
  const double q = t_quantile(1 - alpha / 2, r.n - 1);
  r.lo = r.ratio - q * r.se;
  r.hi = r.ratio + q * r.se;
  r.valid = true;
  return r;
}

}  // namespace attnlab::stats
