// Depth attention (src/kernels/depth_attention.h, MECHANISMS.md §4.1): the fast kernels against the
// naive references in float, every gradient (keys, values, query) against central finite differences
// in double, and the primitive's invariants (zero query gives 1/N; keys invariant to positive scaling).
#include <vector>

#include "check.h"
#include "kernels/depth_attention.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {

// Nc candidates of (N,C) with per-row scales spread over two decades, as residual entries have.
template <class Real>
std::vector<std::vector<Real>> candidates(int Nc, int N, int C, uint64_t seed) {
  std::vector<std::vector<Real>> v;
  for (int r = 0; r < Nc; ++r) {
    auto x = test::random_vec<Real>((size_t)N * C, seed + r);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) x[(size_t)i * C + c] *= Real(0.1 + 0.5 * ((i + r) % 5));
    v.push_back(x);
  }
  return v;
}

template <class Real>
std::vector<const Real*> ptrs(const std::vector<std::vector<Real>>& v) {
  std::vector<const Real*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

template <class Real>
std::vector<Real*> mut_ptrs(std::vector<std::vector<Real>>& v) {
  std::vector<Real*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

template <class Real>
std::vector<std::vector<Real>> inv_rms_of(const std::vector<std::vector<Real>>& keys, int N, int C) {
  std::vector<std::vector<Real>> inv;
  for (auto& k : keys) {
    inv.emplace_back(N);
    depth_key_inv_rms(inv.back().data(), k.data(), N, C);
  }
  return inv;
}

}  // namespace

// Float kernels vs the double-accumulating references, keys ≠ values (DAR routing) and keys = values
// (AttnRes, the same buffer passed as both gradients). Sums of ≲ C = 70 fp32 products plus a softmax of
// O(1) logits: ~1e-6 relative; 2e-5 leaves margin, while a wrong index or a missing term gives O(1).
TEST(DepthAttention, MatchesNaiveFloat) {
  const int Nc = 5, N = 37, C = 70;
  auto keys = candidates<float>(Nc, N, C, 10), values = candidates<float>(Nc, N, C, 20);
  auto w = test::random_vec<float>(C, 3, 0.5);
  auto dout = test::random_vec<float>((size_t)N * C, 4);
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "keys = values" : "keys != values");
    const auto& vals = shared ? keys : values;
    auto inv = inv_rms_of(keys, N, C);
    std::vector<float> out((size_t)N * C, 7.0f), a((size_t)N * Nc, 7.0f), out_ref(out.size()), a_ref(a.size());
    depth_attention_forward(out.data(), a.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(vals).data(), w.data(), Nc,
                            N, C);
    depth_attention_forward_naive(out_ref.data(), a_ref.data(), ptrs(keys).data(), ptrs(vals).data(), w.data(), Nc, N,
                                  C);
    EXPECT_LT(test::max_rel_diff(out, out_ref), 2e-5);
    EXPECT_LT(test::max_rel_diff(a, a_ref), 2e-6);
    // Gradients accumulate onto non-zero buffers.
    auto dk = candidates<float>(Nc, N, C, 30), dv = candidates<float>(Nc, N, C, 40);
    auto dk_ref = dk, dv_ref = dv;
    auto dw = test::random_vec<float>(C, 5), dw_ref = dw;
    std::vector<float> scratch((size_t)N * 2 * Nc);
    auto dk_p = mut_ptrs(dk), dv_p = shared ? mut_ptrs(dk) : mut_ptrs(dv);
    auto dk_ref_p = mut_ptrs(dk_ref), dv_ref_p = shared ? mut_ptrs(dk_ref) : mut_ptrs(dv_ref);
    depth_attention_backward(dk_p.data(), dv_p.data(), dw.data(), scratch.data(), dout.data(), out.data(), a.data(),
                             ptrs(keys).data(), ptrs(inv).data(), ptrs(vals).data(), w.data(), Nc, N, C);
    depth_attention_backward_naive(dk_ref_p.data(), dv_ref_p.data(), dw_ref.data(), dout.data(), ptrs(keys).data(),
                                   ptrs(vals).data(), w.data(), Nc, N, C);
    for (int r = 0; r < Nc; ++r) {
      EXPECT_LT(test::max_rel_diff(dk[r], dk_ref[r]), 2e-5) << "dkey " << r;
      EXPECT_LT(test::max_rel_diff(dv[r], dv_ref[r]), 2e-5) << "dvalue " << r;
    }
    EXPECT_LT(test::max_rel_diff(dw, dw_ref), 2e-5);
  }
}

// Central differences in double of L = Σ g∘out with respect to every key, value and query entry.
// The loss is smooth and O(1); h = 1e-6 gives truncation ~1e-12 and rounding ~1e-10: tol 1e-7.
TEST(DepthAttention, GradientFiniteDifferences) {
  const int Nc = 4, N = 3, C = 6;
  auto keys = candidates<double>(Nc, N, C, 50), values = candidates<double>(Nc, N, C, 60);
  auto w = test::random_vec<double>(C, 7);
  auto g = test::random_vec<double>((size_t)N * C, 8);
  auto loss = [&]() {
    auto inv = inv_rms_of(keys, N, C);
    std::vector<double> out((size_t)N * C), a((size_t)N * Nc);
    depth_attention_forward(out.data(), a.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(values).data(), w.data(),
                            Nc, N, C);
    return dot(out, g);
  };
  auto inv = inv_rms_of(keys, N, C);
  std::vector<double> out((size_t)N * C), a((size_t)N * Nc), scratch((size_t)N * 2 * Nc), dw(C, 0.0);
  depth_attention_forward(out.data(), a.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(values).data(), w.data(), Nc,
                          N, C);
  std::vector<std::vector<double>> dk(Nc, std::vector<double>((size_t)N * C)), dv = dk;
  depth_attention_backward(mut_ptrs(dk).data(), mut_ptrs(dv).data(), dw.data(), scratch.data(), g.data(), out.data(),
                           a.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(values).data(), w.data(), Nc, N, C);
  for (int r = 0; r < Nc; ++r) {
    test::expect_grad_close(dk[r], test::numeric_grad(keys[r], loss), 1e-7, "dkey");
    test::expect_grad_close(dv[r], test::numeric_grad(values[r], loss), 1e-7, "dvalue");
  }
  test::expect_grad_close(dw, test::numeric_grad(w, loss), 1e-7, "dw");
}

// §4.5 / §6.7 invariant 7: w = 0 gives weights of exactly 1/N (every logit is 0, every exp is 1).
TEST(DepthAttention, ZeroQueryGivesUniformWeights) {
  const int N = 5, C = 16;
  for (int Nc : {1, 3, 7}) {
    auto keys = candidates<float>(Nc, N, C, 70);
    auto inv = inv_rms_of(keys, N, C);
    std::vector<float> w(C, 0.0f), out((size_t)N * C), a((size_t)N * Nc);
    depth_attention_forward(out.data(), a.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(keys).data(), w.data(), Nc,
                            N, C);
    for (float x : a) EXPECT_EQ(x, 1.0f / float(Nc));
  }
}

// §4.5 / §6.7 invariant 8: scaling the key sources by c > 0 leaves the weights unchanged up to ε = 1e-6
// inside ρ. With the keys scaled to mean(K²) ≥ 1, ρ moves by ≤ ε/2 = 5e-7 relative, the logits
// (|s| ≲ 3·sqrt(C) ≈ 17) by ≤ 1e-5 and each weight by at most half the logit spread: tol 5e-6.
TEST(DepthAttention, KeysAreScaleInvariant) {
  const int Nc = 4, N = 6, C = 32;
  auto keys = candidates<double>(Nc, N, C, 80), values = candidates<double>(Nc, N, C, 90);
  for (auto& k : keys)
    for (auto& x : k) x *= 10.0;  // row scales 1..21: mean(K²) ≳ 1
  auto w = test::random_vec<double>(C, 9);
  std::vector<double> out((size_t)N * C), a((size_t)N * Nc), a_scaled = a;
  auto run = [&](std::vector<double>& weights) {
    auto inv = inv_rms_of(keys, N, C);
    depth_attention_forward(out.data(), weights.data(), ptrs(keys).data(), ptrs(inv).data(), ptrs(values).data(),
                            w.data(), Nc, N, C);
  };
  run(a);
  for (int r = 0; r < Nc; ++r)
    for (auto& x : keys[r]) x *= 3.0 + r;  // a different positive scale per candidate
  run(a_scaled);
  EXPECT_LT(test::max_abs_diff(a_scaled, a), 5e-6);
  EXPECT_GT(test::max_abs_diff(a_scaled, a), 0.0);  // only up to ε: the test sees the ε term
}
