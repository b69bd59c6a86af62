// The depth-attention primitive (src/kernels/depth_attention.h, docs/mechanisms.md §4.1): the float kernel
// against the double naive reference, every gradient (keys, values, query) against central finite
// differences in double (separate key and value lists as DAR uses them, and one shared list as AttnRes
// does), and the invariants of §4.5: zero query → exact mean, keys invariant to positive scaling.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.h"
#include "kernels/depth_attention.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {

// R candidates of (N, C) with different scales (the residual stream grows with depth) and the
// pointer lists the kernel takes.
template <class Real>
struct Candidates {
  std::vector<std::vector<Real>> data, inv_rms;
  std::vector<const Real*> ptr, inv_ptr;
  Candidates(int N, int R, int C, uint64_t seed) : data(R), inv_rms(R) {
    for (int r = 0; r < R; ++r) {
      data[r] = test::random_vec<Real>((size_t)N * C, seed + r, 0.5 + r % 4);
      inv_rms[r].resize(N);
    }
    refresh(N, C);
  }
  void refresh(int N, int C) {
    ptr.clear();
    inv_ptr.clear();
    for (size_t r = 0; r < data.size(); ++r) {
      rms_inverse(inv_rms[r].data(), data[r].data(), N, C);
      ptr.push_back(data[r].data());
      inv_ptr.push_back(inv_rms[r].data());
    }
  }
};

}  // namespace

TEST(DepthAttention, MatchesNaiveFloat) {
  const int N = 37, R = 5, C = 48;
  Candidates<float> k(N, R, C, 10), v(N, R, C, 20);
  auto w = test::random_vec<float>(C, 3, 0.5);
  std::vector<float> out((size_t)N * C), a((size_t)N * R), out_ref(out.size()), a_ref(a.size());
  depth_attention_forward(out.data(), a.data(), k.ptr.data(), k.inv_ptr.data(), v.ptr.data(), w.data(), N, R, C);
  depth_attention_forward_naive(out_ref.data(), a_ref.data(), k.ptr.data(), v.ptr.data(), w.data(), N, R, C);
  // a few fp32 roundings in s (|s| ≲ 10) and exp: 1e-5 relative.
  EXPECT_LT(test::max_rel_diff(a, a_ref), 1e-5);
  EXPECT_LT(test::max_rel_diff(out, out_ref), 1e-5);
}

// The row form is the whole-matrix forward's own code: the same bits for the weights and 1/ρ, and the
// logits are the scores w·K_r/ρ_r (checked against the naive reference's weights through a softmax).
TEST(DepthAttention, RowFormIsTheForward) {
  const int N = 9, R = 6, C = 37;  // C not a multiple of the vector width: the remainder lanes too
  Candidates<float> k(N, R, C, 40), v(N, R, C, 50);
  auto w = test::random_vec<float>(C, 5, 0.5);
  std::vector<float> out((size_t)N * C), a((size_t)N * R);
  depth_attention_forward(out.data(), a.data(), k.ptr.data(), k.inv_ptr.data(), v.ptr.data(), w.data(), N, R, C);
  std::vector<float> out_ref(out.size()), a_ref(a.size());
  depth_attention_forward_naive(out_ref.data(), a_ref.data(), k.ptr.data(), v.ptr.data(), w.data(), N, R, C);
  for (int i = 0; i < N; ++i) {
    float row_a[R], logits[R];
    depth_softmax_row(row_a, logits, k.ptr.data(), k.inv_ptr.data(), w.data(), (size_t)i, R, C);
    double mx = -INFINITY, z = 0;
    for (int r = 0; r < R; ++r) {
      EXPECT_EQ(row_a[r], a[(size_t)i * R + r]) << "row " << i << " candidate " << r;  // bitwise
      mx = std::max(mx, double(logits[r]));
    }
    for (int r = 0; r < R; ++r) z += std::exp(logits[r] - mx);
    for (int r = 0; r < R; ++r) EXPECT_NEAR(std::exp(logits[r] - mx) / z, a_ref[(size_t)i * R + r], 1e-6);  // fp32 scores
    for (int r = 0; r < R; ++r) EXPECT_EQ(rms_inverse_row(k.data[r].data() + (size_t)i * C, C), k.inv_rms[r][i]);  // bitwise
  }
}

// Loss = <G, out>; FD of every key, value and query entry. shared = AttnRes (keys are the values).
// fused: dw through per-thread partials (3 slots, more than the threads used) instead of the column pass.
void check_gradients(bool shared, bool fused = false, int R = 3) {
  // Thousands of tiny calls: one thread (CTest runs two tests on two cores), except for the fused
  // reduction, whose per-thread partials are the point.
  const int saved_threads = omp_get_max_threads();
  if (!fused) omp_set_num_threads(1);
  struct Restore { int n; ~Restore() { omp_set_num_threads(n); } } restore{saved_threads};
  const int N = 4, C = 8;
  Candidates<double> k(N, R, C, 1), v(N, R, C, 30);
  Candidates<double>& vals = shared ? k : v;
  auto w = test::random_vec<double>(C, 2, 0.7);
  const auto G = test::random_vec<double>((size_t)N * C, 3);
  auto loss = [&]() {
    k.refresh(N, C);
    vals.refresh(N, C);
    std::vector<double> out((size_t)N * C), a((size_t)N * R);
    depth_attention_forward(out.data(), a.data(), k.ptr.data(), k.inv_ptr.data(), vals.ptr.data(), w.data(), N, R, C);
    return dot(out, G);
  };
  loss();
  std::vector<double> out((size_t)N * C), a((size_t)N * R), scratch((size_t)N * R), dw(C, 0.25);
  depth_attention_forward(out.data(), a.data(), k.ptr.data(), k.inv_ptr.data(), vals.ptr.data(), w.data(), N, R, C);
  std::vector<std::vector<double>> dk(R, std::vector<double>((size_t)N * C, 0.5)), dv(R, std::vector<double>((size_t)N * C, -1.0));
  std::vector<double*> dk_ptr, dv_ptr;
  for (int r = 0; r < R; ++r) {
    dk_ptr.push_back(dk[r].data());
    dv_ptr.push_back(shared ? dk[r].data() : dv[r].data());
  }
  std::vector<double> partials(3 * C);
  depth_attention_backward(dk_ptr.data(), dv_ptr.data(), dw.data(), scratch.data(), G.data(), a.data(), k.ptr.data(),
                           k.inv_ptr.data(), vals.ptr.data(), w.data(), N, R, C, fused ? partials.data() : nullptr, 3);
  // With many candidates each one's gradient is small against |L|: a larger step keeps the rounding
  // noise of the differences (~1e-16·|L|/h) below the tolerance.
  const double h = R > 8 ? 1e-4 : 1e-6;
  for (int r = 0; r < R; ++r) {
    // accumulation: subtract the initial 0.5 (keys) and −1 (values, separate lists only)
    std::vector<double> gk = dk[r], gv = dv[r];
    for (auto& x : gk) x -= 0.5;
    for (auto& x : gv) x += 1.0;
    test::expect_grad_close(gk, test::numeric_grad(k.data[r], loss, h), 1e-7, shared ? "shared candidate" : "key");
    if (!shared) test::expect_grad_close(gv, test::numeric_grad(v.data[r], loss, h), 1e-7, "value");
  }
  for (auto& x : dw) x -= 0.25;
  test::expect_grad_close(dw, test::numeric_grad(w, loss, h), 1e-7, "query");
}

TEST(DepthAttention, GradientsSeparateKeysAndValues) { check_gradients(false); }
TEST(DepthAttention, GradientsSharedCandidates) { check_gradients(true); }
// More than 64 candidates (the backward then computes w·K_r inside its loop rather than up front),
// and candidate counts that are not multiples of the four-at-a-time dot products.
TEST(DepthAttention, GradientsManyCandidates) {
  check_gradients(true, false, 66);
  check_gradients(false, true, 7);
}
TEST(DepthAttention, GradientsFusedQueryReduction) {
  check_gradients(false, true);
  check_gradients(true, true);
}

TEST(DepthAttention, ZeroQueryIsExactMean) {
  // §4.5: w = 0 makes every weight exactly 1/R (all scores 0, exp(0) = 1).
  const int N = 5, R = 3, C = 16;
  Candidates<float> c(N, R, C, 4);
  std::vector<float> w(C, 0.0f), out((size_t)N * C), a((size_t)N * R);
  depth_attention_forward(out.data(), a.data(), c.ptr.data(), c.inv_ptr.data(), c.ptr.data(), w.data(), N, R, C);
  for (float x : a) EXPECT_EQ(x, 1.0f / 3.0f);
  for (size_t i = 0; i < out.size(); ++i) {
    const float mean = (c.data[0][i] + c.data[1][i] + c.data[2][i]) / 3.0f;
    EXPECT_NEAR(out[i], mean, 1e-6f * (1 + std::abs(mean)));
  }
}

TEST(DepthAttention, KeysInvariantToPositiveScaling) {
  // §4.5: scaling a key candidate by c > 0 leaves the weights unchanged up to ε: ε = 1e-6 moves the
  // key by ~ε/(2·mean(x²)) ≈ 8e-8 relative for this candidate (scale 2.5), so |Δs|, |Δa| ≲ 1e-6.
  const int N = 6, R = 4, C = 12;
  Candidates<double> k(N, R, C, 5), v(N, R, C, 6);
  auto w = test::random_vec<double>(C, 7);
  std::vector<double> out((size_t)N * C), a((size_t)N * R), a2(a.size());
  depth_attention_forward(out.data(), a.data(), k.ptr.data(), k.inv_ptr.data(), v.ptr.data(), w.data(), N, R, C);
  for (auto& x : k.data[2]) x *= 7.0;
  k.refresh(N, C);
  depth_attention_forward(out.data(), a2.data(), k.ptr.data(), k.inv_ptr.data(), v.ptr.data(), w.data(), N, R, C);
  EXPECT_LT(test::max_abs_diff(a2, a), 1e-6);
  EXPECT_GT(test::max_abs_diff(a2, a), 0.0);  // but not bitwise: ε does act
}
