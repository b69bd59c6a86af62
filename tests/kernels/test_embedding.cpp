// Embedding forward/backward (src/kernels/embedding.h, docs/mechanisms.md §1.1): against the serial
// reference in float, against central finite differences in double, and by hand on repeated tokens.
#include <cstdint>
#include <vector>

#include "check.h"
#include "kernels/embedding.h"

using namespace attnlab;
using namespace attnlab::kernels;
using attnlab::test::dot;

namespace {

std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tok(n);
  for (auto& t : tok) t = int32_t(rng.below(V));
  return tok;
}


}  // namespace

// Fast vs naive in float. Both do the same additions in the same order (one add per element for the
// forward; rows in order for each column in the backward), so they must agree exactly. C = 100 is not a
// multiple of 16 and V = 7 makes almost every token repeat.
TEST(Embedding, MatchesNaiveFloat) {
  const int B = 3, T = 37, C = 100, V = 7, Tmax = 50, off = 5;
  auto tok = random_tokens((size_t)B * T, V, 1);
  auto wte = test::random_vec<float>((size_t)V * C, 2);
  auto wpe = test::random_vec<float>((size_t)Tmax * C, 3);
  auto dout = test::random_vec<float>((size_t)B * T * C, 4);
  for (bool with_pos : {false, true}) {
    std::vector<float> out((size_t)B * T * C), ref(out.size());
    embedding_forward(out.data(), tok.data(), wte.data(), with_pos ? wpe.data() : nullptr, B, T, C, off);
    embedding_forward_naive(ref.data(), tok.data(), wte.data(), with_pos ? wpe.data() : nullptr, B, T, C, off);
    EXPECT_EQ(test::max_abs_diff(out, ref), 0.0) << "with_pos=" << with_pos;

    // Backward accumulates into non-zero buffers.
    auto dwte = test::random_vec<float>((size_t)V * C, 5), dwte_ref = dwte;
    auto dwpe = test::random_vec<float>((size_t)Tmax * C, 6), dwpe_ref = dwpe;
    embedding_backward(dwte.data(), with_pos ? dwpe.data() : nullptr, dout.data(), tok.data(), B, T, C, off);
    embedding_backward_naive(dwte_ref.data(), with_pos ? dwpe_ref.data() : nullptr, dout.data(), tok.data(), B, T, C,
                             off);
    EXPECT_EQ(test::max_abs_diff(dwte, dwte_ref), 0.0) << "with_pos=" << with_pos;
    EXPECT_EQ(test::max_abs_diff(dwpe, dwpe_ref), 0.0) << "with_pos=" << with_pos;
  }
}

// Hand-checked: tokens {2,2,0 | 2,1,2}, C = 3. dwte[2] collects four rows, dwte[1] one, dwte[3] none;
// dwpe[off+t] collects the rows at position t of both sequences.
TEST(Embedding, BackwardRepeatedTokensByHand) {
  const int B = 2, T = 3, C = 3, V = 4, off = 1;
  const std::vector<int32_t> tok = {2, 2, 0, 2, 1, 2};
  std::vector<double> dout(B * T * C);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = double(i + 1);  // row r holds 3r+1, 3r+2, 3r+3
  std::vector<double> dwte(V * C, 0.5), dwpe(5 * C, 0.0);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C, off);
  // rows of token 2: 0, 1, 3, 5 -> sums 1+4+10+16 = 31, 2+5+11+17 = 35, 3+6+12+18 = 39 (plus the 0.5 already there)
  const std::vector<double> want_wte = {7.5, 8.5, 9.5,  13.5, 14.5, 15.5,  31.5, 35.5, 39.5,  0.5, 0.5, 0.5};
  EXPECT_EQ(dwte, want_wte);
  // position off+t collects rows t and 3+t: (1+10, 2+11, 3+12), (4+13, ...), (7+16, ...)
  const std::vector<double> want_wpe = {0, 0, 0,  11, 13, 15,  17, 19, 21,  23, 25, 27,  0, 0, 0};
  EXPECT_EQ(dwpe, want_wpe);
}

// Many threads' worth of columns, every token the same: all B·T rows collide on one dwte row.
TEST(Embedding, BackwardAllSameTokenWide) {
  const int B = 4, T = 64, C = 1000, V = 3;
  std::vector<int32_t> tok((size_t)B * T, 1);
  auto dout = test::random_vec<float>((size_t)B * T * C, 7);
  std::vector<float> dwte((size_t)V * C, 0.0f), dwte_ref = dwte;
  embedding_backward(dwte.data(), (float*)nullptr, dout.data(), tok.data(), B, T, C, 0);
  embedding_backward_naive(dwte_ref.data(), (float*)nullptr, dout.data(), tok.data(), B, T, C, 0);
  EXPECT_EQ(test::max_abs_diff(dwte, dwte_ref), 0.0);
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[c], 0.0f);
    EXPECT_EQ(dwte[2 * C + c], 0.0f);
  }
}

// Finite differences in double of L = Σ w∘out with respect to wte and wpe. L is linear in both, so the
// central difference is exact up to rounding (~1e-10 relative): tolerance 1e-8.
TEST(Embedding, GradientFiniteDifferences) {
  const int B = 2, T = 5, C = 6, V = 4, Tmax = 9, off = 3;
  auto tok = random_tokens((size_t)B * T, V, 8);
  auto wte = test::random_vec<double>((size_t)V * C, 9);
  auto wpe = test::random_vec<double>((size_t)Tmax * C, 10);
  auto w = test::random_vec<double>((size_t)B * T * C, 11);
  std::vector<double> out((size_t)B * T * C);
  auto loss = [&] {
    embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, off);
    return dot(out, w);
  };
  std::vector<double> dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tok.data(), B, T, C, off);
  test::expect_grad_close(dwte, test::numeric_grad(wte, loss), 1e-8, "dwte");
  test::expect_grad_close(dwpe, test::numeric_grad(wpe, loss), 1e-8, "dwpe");
}
