// RoPE (src/kernels/rope.h, docs/mechanisms.md §1.2, rotate-half convention): the table-driven kernel
// against the literal per-element formula, the relative-position invariant of §1.5, rope_backward as
// the transpose of rope_forward, finite differences, and the packed-qkv layout (v untouched).
#include <cmath>
#include <vector>

#include "check.h"
#include "core/error.h"
#include "kernels/rope.h"

using namespace attnlab;
using namespace attnlab::kernels;

namespace {
double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

// Float, on the packed qkv layout (H = 3 query heads, H_kv = 1, D_h = 16, row stride 5·16), at a large
// position offset. The reference recomputes every angle in double, so this also checks the table.
// Each output is a 2-term combination of fp32 values with cos/sin rounded to fp32: error ≲ 3 ulp of
// the input scale; tolerance 1e-6 relative to max(1, |x|max).
TEST(Rope, MatchesNaiveFloatPackedQkv) {
  const int B = 2, T = 19, H = 3, Hkv = 1, Dh = 16, stride = (H + 2 * Hkv) * Dh, off = 16000;
  const double base = 10000;
  auto tab = make_rope_table<float>(off + T, Dh, base);
  auto qkv = test::random_vec<float>((size_t)B * T * stride, 1);
  auto ref = qkv;
  const auto orig = qkv;
  rope_forward(qkv.data(), tab, B, T, H, Dh, stride, off);             // q
  rope_forward(qkv.data() + H * Dh, tab, B, T, Hkv, Dh, stride, off);  // k
  rope_forward_naive(ref.data(), base, B, T, H, Dh, stride, off);
  rope_forward_naive(ref.data() + H * Dh, base, B, T, Hkv, Dh, stride, off);
  EXPECT_LT(test::max_rel_diff(qkv, ref), 1e-6);
  // v is never rotated (§1.2).
  for (int r = 0; r < B * T; ++r)
    for (int c = (H + Hkv) * Dh; c < stride; ++c) ASSERT_EQ(qkv[(size_t)r * stride + c], orig[(size_t)r * stride + c]);
  // Position 0 is the identity (angle 0).
  auto x0 = test::random_vec<float>(Dh, 2), y0 = x0;
  rope_forward(y0.data(), tab, 1, 1, 1, Dh, Dh, 0);
  EXPECT_EQ(x0, y0);
}

// §1.2 convention check by hand: D_h = 4, base 100 → θ = (1, 0.1); pairs are (0,2) and (1,3).
TEST(Rope, RotateHalfByHand) {
  auto tab = make_rope_table<double>(4, 4, 100.0);
  std::vector<double> x = {1, 2, 3, 4};
  rope_forward(x.data(), tab, 1, 1, 1, 4, 4, 3);  // t = 3: angles 3 and 0.3
  EXPECT_NEAR(x[0], 1 * std::cos(3.0) - 3 * std::sin(3.0), 1e-15);
  EXPECT_NEAR(x[2], 3 * std::cos(3.0) + 1 * std::sin(3.0), 1e-15);
  EXPECT_NEAR(x[1], 2 * std::cos(0.3) - 4 * std::sin(0.3), 1e-15);
  EXPECT_NEAR(x[3], 4 * std::cos(0.3) + 2 * std::sin(0.3), 1e-15);
}

// §1.5: q̃(t+c)·k̃(s+c) = q̃(t)·k̃(s), per head, for several shifts c (including a KV-cache-like
// pos_offset). In double the two sides differ only by table rounding: 1e-12 relative.
TEST(Rope, RelativePositionInvariance) {
  const int Dh = 32, maxpos = 5000;
  auto tab = make_rope_table<double>(maxpos, Dh, 10000.0);
  auto q = test::random_vec<double>(Dh, 3), k = test::random_vec<double>(Dh, 4);
  auto score = [&](int t, int s) {
    std::vector<double> qt = q, ks = k;
    rope_forward(qt.data(), tab, 1, 1, 1, Dh, Dh, t);
    rope_forward(ks.data(), tab, 1, 1, 1, Dh, Dh, s);
    return dot(qt.data(), ks.data(), Dh);
  };
  const double s0 = score(7, 3);
  EXPECT_GT(std::abs(s0 - dot(q.data(), k.data(), Dh)), 1e-3);  // the rotation does change the score
  for (int c : {1, 10, 100, 1234, 4000}) EXPECT_NEAR(score(7 + c, 3 + c), s0, 1e-12 * std::max(1.0, std::abs(s0)));
}

// rope_backward is the transpose of rope_forward: <R x, y> = <x, Rᵀ y> for random x, y over a whole
// (B, T, heads) buffer with a row stride; and Rᵀ R = identity.
TEST(Rope, BackwardIsTranspose) {
  const int B = 2, T = 11, H = 2, Dh = 8, stride = 3 * Dh, off = 2;
  auto tab = make_rope_table<double>(off + T, Dh, 10000.0);
  const size_t n = (size_t)B * T * stride;
  auto x = test::random_vec<double>(n, 5), y = test::random_vec<double>(n, 6);
  auto Rx = x, RTy = y;
  rope_forward(Rx.data(), tab, B, T, H, Dh, stride, off);
  rope_backward(RTy.data(), tab, B, T, H, Dh, stride, off);
  EXPECT_NEAR(dot(Rx.data(), y.data(), (int)n), dot(x.data(), RTy.data(), (int)n), 1e-12);
  auto back = Rx;
  rope_backward(back.data(), tab, B, T, H, Dh, stride, off);
  EXPECT_LT(test::max_abs_diff(back, x), 1e-14);
}

// Finite differences in double of L = Σ w∘rope(x): the map is linear, so the central difference is
// exact up to rounding: tol 1e-8.
TEST(Rope, GradientFiniteDifferences) {
  const int B = 2, T = 3, H = 2, Dh = 6, stride = 2 * Dh, off = 4;
  auto tab = make_rope_table<double>(off + T, Dh, 10000.0);
  auto x = test::random_vec<double>((size_t)B * T * stride, 7);
  auto w = test::random_vec<double>(x.size(), 8);
  auto loss = [&] {
    auto y = x;
    rope_forward(y.data(), tab, B, T, H, Dh, stride, off);
    return dot(y.data(), w.data(), (int)y.size());
  };
  auto dx = w;
  rope_backward(dx.data(), tab, B, T, H, Dh, stride, off);
  test::expect_grad_close(dx, test::numeric_grad(x, loss), 1e-8, "rope dx");
}

// The table is accurate at long range because it is computed in double (§0 Precision).
TEST(Rope, TableAccurateAtLongPositions) {
  const int Dh = 64, maxpos = 16385;
  auto tab = make_rope_table<float>(maxpos, Dh, 10000.0);
  const int t = 16384, m = 0;  // θ_0 = 1: angle 16384 rad
  EXPECT_NEAR(tab.cos[(size_t)t * (Dh / 2) + m], std::cos(16384.0), 1e-7);
  EXPECT_NEAR(tab.sin[(size_t)t * (Dh / 2) + m], std::sin(16384.0), 1e-7);
}

TEST(Rope, ErrorsAreReported) {
  EXPECT_THROW(make_rope_table<float>(10, 7, 10000.0), Error);  // odd head dim
  EXPECT_THROW(make_rope_table<float>(10, 8, 0.0), Error);
  auto tab = make_rope_table<float>(10, 8, 10000.0);
  std::vector<float> x(8 * 4);
  EXPECT_THROW(rope_forward(x.data(), tab, 1, 4, 1, 8, 8, 7), Error);  // positions 7..10 > table
  EXPECT_THROW(rope_forward(x.data(), tab, 1, 4, 1, 16, 16, 0), Error);  // wrong head dim
  EXPECT_NO_THROW(rope_forward(x.data(), tab, 1, 4, 1, 8, 8, 6));      // positions 6..9
}
