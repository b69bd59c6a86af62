// The fused, chunked LM head + cross-entropy (src/kernels/cross_entropy.h, docs/mechanisms.md §1.1)
// against the naive double reference, against central finite differences in double, and against
// closed-form cases (uniform logits give log V).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "check.h"
#include "core/error.h"
#include "kernels/cross_entropy.h"

using namespace attnlab;
using namespace attnlab::kernels;

namespace {

// Targets in [0,V), with every `ignore_every`-th one set to -1 (ignored).
std::vector<int32_t> make_targets(int N, int V, uint64_t seed, int ignore_every) {
  Rng rng(seed);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = ignore_every > 0 && i % ignore_every == 2 ? -1 : (int32_t)rng.below(V);
  return t;
}

struct Problem {
  int N, C, V;
  std::vector<int32_t> targets;
  int valid;
};

Problem make_problem(int N, int C, int V, uint64_t seed, int ignore_every = 5) {
  Problem p{N, C, V, make_targets(N, V, seed, ignore_every), 0};
  p.valid = lm_head_count_targets(p.targets.data(), N);
  return p;
}

}  // namespace

// Float fused vs double naive, N not a multiple of chunk_rows, with ignored targets, dwte pre-filled
// (it must accumulate). Logits are O(3) (x ~ N(0,1), wte ~ N(0,0.2), C = 48) so the softmax is far
// from uniform. Tolerance 5e-6 relative: float GEMMs over K <= 200 and the float exp (< 1 ulp) give
// at most 4e-7 here (measured); a wrong index, sign or missing term is O(1e-2) or more.
TEST(CrossEntropy, FusedMatchesNaiveFloat) {
  const auto pb = make_problem(37, 48, 200, 11);
  const int N = pb.N, C = pb.C, V = pb.V;
  auto x = test::random_vec<float>((size_t)N * C, 1);
  auto wte = test::random_vec<float>((size_t)V * C, 2, 0.2);
  const float scale = 1.0f / pb.valid;
  for (int chunk : {1, 8, 16, 37, 64}) {
    std::vector<float> dx((size_t)N * C, 7.0f), losses(N, 7.0f);
    auto dwte = test::random_vec<float>((size_t)V * C, 3);
    std::vector<float> dx_ref((size_t)N * C), losses_ref(N);
    auto dwte_ref = dwte;
    std::vector<float> scratch(lm_head_scratch_size(chunk, V));
    const double sum = lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(),
                                                   pb.targets.data(), N, C, V, scale, scratch.data(), chunk);
    const double sum_ref = lm_head_ce_naive(dx_ref.data(), dwte_ref.data(), losses_ref.data(), x.data(), wte.data(),
                                            pb.targets.data(), N, C, V, scale);
    EXPECT_NEAR(sum, sum_ref, 5e-6 * std::abs(sum_ref)) << "chunk " << chunk;
    EXPECT_LT(test::max_rel_diff(losses, losses_ref), 5e-6) << "chunk " << chunk;
    EXPECT_LT(test::max_rel_diff(dx, dx_ref), 5e-6) << "chunk " << chunk;
    EXPECT_LT(test::max_rel_diff(dwte, dwte_ref), 5e-6) << "chunk " << chunk;
    for (int i = 0; i < N; ++i)
      if (pb.targets[i] < 0) {
        EXPECT_EQ(losses[i], 0.0f);
        for (int c = 0; c < C; ++c) EXPECT_EQ(dx[(size_t)i * C + c], 0.0f);
      }
  }
}

// The dlogits-dependent part of dwte is small next to a random pre-fill, so check it on its own too:
// starting from zero, fused dwte must match the reference (the test above could hide a 1e-3 error).
TEST(CrossEntropy, ParameterGradientFromZero) {
  const auto pb = make_problem(29, 32, 150, 12);
  const int N = pb.N, C = pb.C, V = pb.V;
  auto x = test::random_vec<float>((size_t)N * C, 4);
  auto wte = test::random_vec<float>((size_t)V * C, 5, 0.3);
  std::vector<float> dx((size_t)N * C), dwte((size_t)V * C, 0.0f), dx_ref(dx.size()), dwte_ref(dwte.size(), 0.0f);
  std::vector<float> scratch(lm_head_scratch_size(8, V));
  lm_head_ce_forward_backward(dx.data(), dwte.data(), (float*)nullptr, x.data(), wte.data(), pb.targets.data(), N,
                              C, V, 1.0f, scratch.data(), 8);
  lm_head_ce_naive(dx_ref.data(), dwte_ref.data(), (float*)nullptr, x.data(), wte.data(), pb.targets.data(), N, C, V,
                   1.0f);
  EXPECT_LT(test::max_rel_diff(dwte, dwte_ref), 5e-6);
  EXPECT_LT(test::max_rel_diff(dx, dx_ref), 5e-6);
}

// Logits of magnitude ~300 overflow exp without the max subtraction; the fused float kernel must
// still agree with the double reference (relative to the loss scale, which is O(100) here).
TEST(CrossEntropy, LargeLogitsAreStable) {
  const auto pb = make_problem(13, 16, 97, 13);
  const int N = pb.N, C = pb.C, V = pb.V;
  auto x = test::random_vec<float>((size_t)N * C, 6, 10.0);
  auto wte = test::random_vec<float>((size_t)V * C, 7, 8.0);
  std::vector<float> dx((size_t)N * C), dwte((size_t)V * C, 0.0f), losses(N);
  std::vector<float> dx_ref(dx.size()), dwte_ref(dwte.size(), 0.0f), losses_ref(N);
  std::vector<float> scratch(lm_head_scratch_size(4, V));
  const double sum = lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(),
                                                 pb.targets.data(), N, C, V, 0.1f, scratch.data(), 4);
  const double sum_ref = lm_head_ce_naive(dx_ref.data(), dwte_ref.data(), losses_ref.data(), x.data(), wte.data(),
                                          pb.targets.data(), N, C, V, 0.1f);
  ASSERT_TRUE(std::isfinite(sum));
  EXPECT_GT(sum_ref, 100.0);  // the case really has huge logits
  EXPECT_NEAR(sum, sum_ref, 5e-6 * sum_ref);
  EXPECT_LT(test::max_rel_diff(losses, losses_ref), 5e-6);
  EXPECT_LT(test::max_rel_diff(dx, dx_ref), 5e-6);
  EXPECT_LT(test::max_rel_diff(dwte, dwte_ref), 5e-6);
  // the evaluation path subtracts the max too
  std::vector<float> losses_fwd(N);
  const double sum_fwd =
      lm_head_ce_forward(losses_fwd.data(), x.data(), wte.data(), pb.targets.data(), N, C, V, scratch.data(), 4);
  EXPECT_NEAR(sum_fwd, sum_ref, 5e-6 * sum_ref);
  EXPECT_LT(test::max_rel_diff(losses_fwd, losses_ref), 5e-6);
}

// Double: the fused kernel equals the naive reference to rounding, and both equal central finite
// differences of (Σ loss)·grad_scale for x and wte. FD with h = 1e-6 in double has error ~1e-9
// relative (measured 1.7e-9), so 1e-7 is tight; a missing 1/s or a wrong sign is O(1).
TEST(CrossEntropy, FiniteDifferencesDouble) {
  const auto pb = make_problem(7, 5, 11, 14, 3);  // rows 2 and 5 ignored
  const int N = pb.N, C = pb.C, V = pb.V;
  auto x = test::random_vec<double>((size_t)N * C, 8);
  auto wte = test::random_vec<double>((size_t)V * C, 9, 0.7);
  const double scale = 1.0 / pb.valid;
  const int chunk = 3;
  std::vector<double> scratch(lm_head_scratch_size(chunk, V));
  std::vector<double> dx((size_t)N * C), dwte((size_t)V * C, 0.0);
  std::vector<double> dx_ref(dx.size()), dwte_ref(dwte.size(), 0.0);
  const double sum = lm_head_ce_forward_backward(dx.data(), dwte.data(), (double*)nullptr, x.data(), wte.data(),
                                                 pb.targets.data(), N, C, V, scale, scratch.data(), chunk);
  const double sum_ref = lm_head_ce_naive(dx_ref.data(), dwte_ref.data(), (double*)nullptr, x.data(), wte.data(),
                                          pb.targets.data(), N, C, V, scale);
  EXPECT_NEAR(sum, sum_ref, 1e-12 * sum_ref);
  EXPECT_LT(test::max_rel_diff(dx, dx_ref), 1e-12);
  EXPECT_LT(test::max_rel_diff(dwte, dwte_ref), 1e-12);

  // The FD loss is the naive one (equal to the fused loss to 1e-12, checked above): it has no OpenMP
  // regions, so the 180 evaluations stay fast when the 2 cores are busy with other work.
  auto mean_loss = [&] {
    return scale * lm_head_ce_naive((double*)nullptr, (double*)nullptr, (double*)nullptr, x.data(), wte.data(),
                                    pb.targets.data(), N, C, V, 1.0);
  };
  test::expect_grad_close(dx, test::numeric_grad(x, mean_loss), 1e-7, "dx");
  test::expect_grad_close(dwte, test::numeric_grad(wte, mean_loss), 1e-7, "dwte");
}

// Evaluation path: forward-only returns the same sum and per-row losses as the fused training path
// (same GEMM, same max; the exp sums differ only in double summation order, ~1e-13).
TEST(CrossEntropy, ForwardOnlyEqualsFusedLoss) {
  const auto pb = make_problem(50, 24, 300, 15);
  const int N = pb.N, C = pb.C, V = pb.V;
  auto x = test::random_vec<float>((size_t)N * C, 10);
  auto wte = test::random_vec<float>((size_t)V * C, 11, 0.5);
  const int chunk = 16;
  std::vector<float> scratch(lm_head_scratch_size(chunk, V));
  std::vector<float> dx((size_t)N * C), dwte((size_t)V * C), losses(N), losses_fwd(N, 9.0f);
  const double sum = lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(),
                                                 pb.targets.data(), N, C, V, 0.02f, scratch.data(), chunk);
  const double sum_fwd =
      lm_head_ce_forward(losses_fwd.data(), x.data(), wte.data(), pb.targets.data(), N, C, V, scratch.data(), chunk);
  EXPECT_NEAR(sum_fwd, sum, 1e-6 * sum);
  EXPECT_LT(test::max_abs_diff(losses_fwd, losses), 1e-6);
  // and both match the reference
  std::vector<float> losses_ref(N);
  const double sum_ref = lm_head_ce_naive((float*)nullptr, (float*)nullptr, losses_ref.data(), x.data(), wte.data(),
                                          pb.targets.data(), N, C, V, 1.0f);
  EXPECT_NEAR(sum_fwd, sum_ref, 5e-6 * sum_ref);
  EXPECT_LT(test::max_rel_diff(losses_fwd, losses_ref), 5e-6);
}

// wte = 0 makes every logit 0: each valid row's loss is exactly log V, dx = 0, and
// dwte[v] = grad_scale·Σ_i (1/V − [v = t_i]) x_i.
TEST(CrossEntropy, UniformLogitsGiveLogV) {
  for (int V : {1, 7, 1000, 8192}) {
    const auto pb = make_problem(9, 8, V, 16);
    const int N = pb.N, C = pb.C;
    auto x = test::random_vec<float>((size_t)N * C, 12);
    std::vector<float> wte((size_t)V * C, 0.0f), dx((size_t)N * C, 5.0f), dwte((size_t)V * C, 0.0f), losses(N);
    std::vector<float> scratch(lm_head_scratch_size(4, V));
    const double sum = lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(),
                                                   pb.targets.data(), N, C, V, 1.0f, scratch.data(), 4);
    EXPECT_NEAR(sum, pb.valid * std::log((double)V), 1e-5 * std::max(1.0, sum)) << "V " << V;
    for (int i = 0; i < N; ++i) EXPECT_NEAR(losses[i], pb.targets[i] < 0 ? 0.0 : std::log((double)V), 1e-6);
    for (float d : dx) EXPECT_EQ(d, 0.0f);
    for (int v = 0; v < std::min(V, 20); ++v)
      for (int c = 0; c < C; ++c) {
        double expect = 0;
        for (int i = 0; i < N; ++i)
          if (pb.targets[i] >= 0) expect += (1.0 / V - (pb.targets[i] == v ? 1.0 : 0.0)) * x[(size_t)i * C + c];
        EXPECT_NEAR(dwte[(size_t)v * C + c], expect, 1e-5);
      }
  }
}

// Every target ignored: zero loss, zero dx, dwte untouched.
TEST(CrossEntropy, AllIgnored) {
  const int N = 6, C = 4, V = 9;
  std::vector<int32_t> targets(N, -1);
  auto x = test::random_vec<float>((size_t)N * C, 13);
  auto wte = test::random_vec<float>((size_t)V * C, 14);
  std::vector<float> dx((size_t)N * C, 3.0f), dwte((size_t)V * C, 2.0f), scratch(lm_head_scratch_size(4, V));
  EXPECT_EQ(lm_head_ce_forward_backward(dx.data(), dwte.data(), (float*)nullptr, x.data(), wte.data(), targets.data(),
                                        N, C, V, 1.0f, scratch.data(), 4),
            0.0);
  for (float d : dx) EXPECT_EQ(d, 0.0f);
  for (float d : dwte) EXPECT_EQ(d, 2.0f);
  EXPECT_EQ(lm_head_count_targets(targets.data(), N), 0);
}

// The sampling path: logits for a few rows equal the naive product.
TEST(CrossEntropy, LogitsMatchNaive) {
  const int N = 3, C = 40, V = 123;
  auto x = test::random_vec<float>((size_t)N * C, 15);
  auto wte = test::random_vec<float>((size_t)V * C, 16);
  std::vector<float> logits((size_t)N * V), ref((size_t)N * V);
  lm_head_logits(logits.data(), x.data(), wte.data(), N, C, V);
  gemm_naive<float>(false, true, N, V, C, 1.0f, x.data(), C, wte.data(), C, 0.0f, ref.data(), V);
  EXPECT_LT(test::max_rel_diff(logits, ref), 5e-6);  // measured 2e-7 (K = 40)
}

// The few-rows logits (N <= 4, eight vocabulary rows at a time) and the GEMM (N = 5), every element
// within the float summation bound γ_C·Σ|x_c·w_c| (γ_n = nε/(1 − nε), ε = 2⁻²⁴) of the exact dot
// product; V covers whole groups of eight, tails alone and after groups, parts V/8 + 1 rows apart
// (V >= 128) with the most rows left over (V mod 8 = 0: 56) and the fewest (V mod 8 = 7: 7), and
// V·C >= 65536 the threaded split.
TEST(CrossEntropy, FewRowLogitsWithinTheSummationBound) {
  for (bool half : {false, true})  // wte as float, or bf16 (decoding with bf16 weights: up to 4 rows)
    for (int N : {1, 2, 3, 4, 5})
      for (auto [C, V] : {std::pair{40, 1}, {40, 3}, {33, 7}, {40, 8}, {40, 17}, {40, 135}, {40, 160}, {256, 301},
                          {256, 520}}) {
        auto x = test::random_vec<float>((size_t)N * C, 50 + N);
        auto wte = test::random_vec<float>((size_t)V * C, 60 + V);
        std::vector<bf16> wte_h(wte.size());
        to_bf16(wte_h.data(), wte.data(), wte.size());
        std::vector<float> logits((size_t)N * V, 7.0f);
        if (half && N > 4) {
          EXPECT_THROW(lm_head_logits(logits.data(), x.data(), wte_h.data(), N, C, V), Error);
          continue;
        }
        if (half) {
          lm_head_logits(logits.data(), x.data(), wte_h.data(), N, C, V);
          to_float(wte.data(), wte_h.data(), wte.size());  // the exact sum below is of the widened weights
        } else {
          lm_head_logits(logits.data(), x.data(), wte.data(), N, C, V);
        }
        const double eps = 0x1p-24, gamma = C * eps / (1 - C * eps);
        double worst = 0;
        for (int i = 0; i < N; ++i)
          for (int v = 0; v < V; ++v) {
            double exact = 0, mag = 0;
            for (int c = 0; c < C; ++c) {
              const double t = double(x[(size_t)i * C + c]) * wte[(size_t)v * C + c];
              exact += t;
              mag += std::abs(t);
            }
            worst = std::max(worst, std::abs(logits[(size_t)i * V + v] - exact) / (gamma * mag));
          }
        EXPECT_LE(worst, 1.0) << "N=" << N << " C=" << C << " V=" << V << " bf16=" << half;
      }
}

// A target outside the vocabulary is a data/config mismatch: an attnlab::Error, not a crash.
TEST(CrossEntropy, TargetOutOfVocabularyFails) {
  const int N = 4, C = 4, V = 10;
  std::vector<int32_t> targets = {1, 2, 10, 3};
  auto x = test::random_vec<float>((size_t)N * C, 17);
  auto wte = test::random_vec<float>((size_t)V * C, 18);
  std::vector<float> dx((size_t)N * C), dwte((size_t)V * C), scratch(lm_head_scratch_size(2, V));
  EXPECT_THROW(lm_head_ce_forward_backward(dx.data(), dwte.data(), (float*)nullptr, x.data(), wte.data(),
                                           targets.data(), N, C, V, 1.0f, scratch.data(), 2),
               Error);
  EXPECT_THROW(lm_head_ce_forward((float*)nullptr, x.data(), wte.data(), targets.data(), N, C, V, scratch.data(), 2),
               Error);
  EXPECT_THROW(lm_head_ce_forward((float*)nullptr, x.data(), wte.data(), targets.data(), N, C, V, scratch.data(), 0),
               Error);
}

// The vectorizable float exp used by the softmax, over its whole domain (x <= 0), against double exp.
TEST(CrossEntropy, ExpNonPositive) {
  double worst = 0;
  for (int k = 0; k <= 2000000; ++k) {
    const float x = -87.0f * (float)k / 2000000.0f;
    const double ref = std::exp((double)x);
    worst = std::max(worst, std::abs((double)kernels::exp_nonpositive(x) - ref) / ref);
  }
  EXPECT_LT(worst, 1.2e-7);  // measured 7.9e-8: within one float ulp (2^-23 = 1.19e-7 relative)
  EXPECT_EQ(kernels::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(kernels::exp_nonpositive(-1000.0f), 0.0f);
  EXPECT_EQ(kernels::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_GT(kernels::exp_nonpositive(-87.0f), 0.0f);
  EXPECT_TRUE(std::isnan(kernels::exp_nonpositive(std::nanf(""))));
}

// A diverged run (NaN in the hidden state) must show up as a NaN loss, not be masked by the max
// subtraction or the underflow mask of the float exp.
TEST(CrossEntropy, NanPropagatesToLoss) {
  const int N = 3, C = 8, V = 50;
  std::vector<int32_t> targets = {4, 7, 9};
  auto x = test::random_vec<float>((size_t)N * C, 19);
  auto wte = test::random_vec<float>((size_t)V * C, 20);
  x[C + 3] = std::numeric_limits<float>::quiet_NaN();  // row 1
  std::vector<float> dx((size_t)N * C), dwte((size_t)V * C), losses(N), scratch(lm_head_scratch_size(2, V));
  EXPECT_TRUE(std::isnan(lm_head_ce_forward_backward(dx.data(), dwte.data(), losses.data(), x.data(), wte.data(),
                                                     targets.data(), N, C, V, 1.0f, scratch.data(), 2)));
  EXPECT_TRUE(std::isfinite(losses[0]) && std::isnan(losses[1]) && std::isfinite(losses[2]));
  EXPECT_TRUE(std::isnan(lm_head_ce_forward((float*)nullptr, x.data(), wte.data(), targets.data(), N, C, V,
                                            scratch.data(), 2)));
}
