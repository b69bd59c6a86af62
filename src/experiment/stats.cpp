#include "experiment/stats.h"

#include <cmath>
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

}  // namespace attnlab::stats
