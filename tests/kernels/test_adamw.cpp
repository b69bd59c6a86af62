// AdamW and the gradient-clipping helpers (src/kernels/adamw.h): a two-step example worked by hand,
// the kernel against its double reference on random data, and the norm/scale helpers.
#include <cmath>
#include <vector>

#include "check.h"
#include "kernels/adamw.h"

using namespace attnlab;
using namespace attnlab::kernels;

// lr = 0.1, β1 = 0.9, β2 = 0.999, ε = 1e-8, three parameters, by hand with exact decimals:
//  p0 = 1, wd = 0.1, grads 0.5 then −0.25:
//    t=1: m = 0.05, v = 0.00025; m̂ = 0.05/0.1 = 0.5, v̂ = 0.00025/0.001 = 0.25;
//         p = 1 − 0.1·(0.5/(0.5+1e-8) + 0.1·1) = 0.890000002
//    t=2: m = 0.045 − 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225;
//         m̂ = 0.02/0.19 = 0.105263158, v̂ = 0.00031225/0.001999 = 0.156203102, sqrt = 0.395225381;
//         p = 0.890000002 − 0.1·(0.266330… + 0.0890000002) = 0.854466299
//  p1 = 2, wd = 0.1, zero gradients: m = v = 0, so only the decay acts: 2·0.99 = 1.98, then 1.9602.
//  p2 = −3, wd = 0 (as for biases and gains, §0), grads 2, 2: m̂ = 2, v̂ = 4 both steps:
//         p = −3 − 0.1·2/(2+1e-8) = −3.0999999995, then −3.199999999
// The hyper-parameters reach the kernel as float (0.9f = 0.89999997615…, 1 − 0.999f = 0.00099998713…),
// so the constants below are these same formulas evaluated in float64 with the float-rounded
// hyper-parameters; they differ from the decimals above by at most 1.3e-5 relative (v) and 2e-9 (p).
// The decay uses p before the update (p ← p − lr·(… + wd·p_old)). Decaying the already-updated value
// instead would give 0.900000002·0.99 = 0.891000002 at t=1 for p0, 1e-3 away, so the test pins the order.
template <class Real>
void two_step_example(double tol) {
  // weight_decay is one float per call, so the example is two calls: p0, p1 with wd 0.1, p2 with wd 0.
  std::vector<Real> p = {1, 2}, m(2, 0), v(2, 0), q = {-3}, mq(1, 0), vq(1, 0);
  const std::vector<Real> g1 = {0.5, 0}, g2 = {-0.25, 0}, gq = {2};
  adamw_update(p.data(), g1.data(), m.data(), v.data(), 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
  adamw_update(q.data(), gq.data(), mq.data(), vq.data(), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  EXPECT_NEAR(p[0], 0.8900000002118607, tol);
  EXPECT_NEAR(p[1], 1.9799999994039537, tol);
  EXPECT_NEAR(q[0], -3.100000000990116, tol);
  EXPECT_NEAR(m[0], 0.050000011920928955, 0.05 * tol);
  EXPECT_NEAR(v[0], 0.00024999678134918213, 0.00025 * tol);
  EXPECT_EQ(m[1], Real(0));
  EXPECT_EQ(v[1], Real(0));
  adamw_update(p.data(), g2.data(), m.data(), v.data(), 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 2);
  adamw_update(q.data(), gq.data(), mq.data(), vq.data(), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 2);
  EXPECT_NEAR(p[0], 0.8544662975602597, tol);
  EXPECT_NEAR(p[1], 1.9601999988198282, tol);
  EXPECT_NEAR(q[0], -3.200000001980232, tol);
  EXPECT_NEAR(m[0], 0.020000003576278402, 0.02 * tol);
  EXPECT_NEAR(v[0], 0.00031224598312373786, 0.00031225 * tol);
}

// In double the kernel evaluates the same expressions as the constants: 1e-12. In float, a handful of
// roundings of values ~1 (ε = 6e-8 each): 5e-7.
TEST(AdamW, TwoStepsByHandDouble) { two_step_example<double>(1e-12); }
TEST(AdamW, TwoStepsByHandFloat) { two_step_example<float>(5e-7); }

// The fast float kernel against the double reference over 3 random steps (n not a multiple of 16,
// large enough to take the threaded path). fp32 relative error of each update is a few ε: 1e-6 of
// the parameter scale.
TEST(AdamW, MatchesNaiveFloat) {
  const size_t n = 20011;
  auto p = test::random_vec<float>(n, 1), p_ref = p;
  std::vector<float> m(n, 0), v(n, 0), m_ref(n, 0), v_ref(n, 0);
  for (int t = 1; t <= 3; ++t) {
    auto g = test::random_vec<float>(n, 10 + t, 0.01);
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    adamw_update_naive(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  EXPECT_LT(test::max_rel_diff(p, p_ref), 1e-6);
  EXPECT_LT(test::max_rel_diff(m, m_ref), 1e-6);
  EXPECT_LT(test::max_rel_diff(v, v_ref), 1e-6);
}

TEST(AdamW, StepZeroIsAnError) {
  float p = 1, g = 1, m = 0, v = 0;
  EXPECT_THROW(adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), Error);
}

// Σx² accumulated in double: 1e6 values of 0.1f sum to n·0.1f² within the double bound n·ε = 1.1e-10
// (relative), whereas a float accumulator would be off by ~1e-2 here.
TEST(GradClip, NormAndScale) {
  const size_t n = 1000000;
  std::vector<float> x(n, 0.1f);
  const double want = double(n) * double(0.1f) * double(0.1f);
  EXPECT_NEAR(l2_norm_squared(x.data(), n), want, want * 1.1e-10);
  auto y = test::random_vec<double>(1001, 2);
  double s = 0;
  for (double e : y) s += e * e;
  EXPECT_NEAR(l2_norm_squared(y.data(), y.size()), s, s * 1e-14);
  scale_inplace(x.data(), n, 0.5f);
  for (size_t i = 0; i < n; i += 9973) ASSERT_EQ(x[i], 0.05f);
  EXPECT_EQ(l2_norm_squared(x.data(), 0), 0.0);
}
