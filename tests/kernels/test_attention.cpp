// Tests of the fused causal attention kernel (src/kernels/attention.h) against docs/mechanisms.md §1.1
// (forward and Backward), §1.2 (ALiBi), §1.3 (learned sink) and the invariants of §1.5:
// - the fast kernel equals the naive reference (float: the AVX-512 path; double: the one-lane path
//   with 8-wide tiles), over head sizes 16..128 and odd ones, GQA groupings (G = 1, 2, 4, 8),
//   lengths that are not tile multiples, peaked softmax rows; the backward writes only q/k/v;
// - finite-difference gradients in double for q, k, v and the sink (also with ALiBi, and for a
//   KV-cache chunk with pos_offset);
// - KV cache: chunks with pos_offset equal one shot; causality (forward and backward); sink −1e4
//   = no sink; ALiBi with zero slopes = no ALiBi; the structural zero of a common key shift
//   without a sink; results independent of the thread count; the vector exp's accuracy;
// - XSA (§2: on and gated, fused epilogue, dy rows, direct own-value term; the §2.4 invariants) and
//   GOAT's row-dependent sink logit (§3.4), against the naive reference and finite differences.
// - the backward's split over query chunks (few (b, kv head) pairs, a scratch from the caller): the
//   chunk cuts, every mechanism above against the naive reference and finite differences (also
//   with pos_offset), and the same bits run to run and for one thread or two.
// - a decoding step (Tq = 1, the one-row kernel) with every extra against the naive reference.
// - kernel sets (the run-time choice of instruction set): every set this CPU runs against the naive
//   reference; unknown or unrunnable sets refused by name. CTest also runs this whole file once
//   per set with ATTNLAB_KERNELS=<set> (CMakeLists.txt); under a set this CPU lacks, it skips.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"

namespace {

using attnlab::kernels::AttentionExtras;
using attnlab::kernels::AttentionShape;
using attnlab::test::max_abs_diff;
using attnlab::test::max_rel_diff;
using attnlab::test::random_vec;

enum class Impl { Fast, Naive };

// Under ATTNLAB_KERNELS=<set> for a set this CPU cannot run, every test here is skipped (CTest
// registers the file once per set; the machine decides which of them can run).
class KernelSetEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    try {
      const auto& set = attnlab::kernels::attention_kernels();
      std::printf("attention kernel set: %s (%d float lanes)\n", set.name, set.lanes);
    } catch (const attnlab::Error& e) {
      // Only a set this CPU lacks is skipped (CTest's SKIP_REGULAR_EXPRESSION matches this
      // message); any other refusal, such as a name no set carries, fails every test.
      if (std::string(e.what()).find("this CPU cannot run the attention kernel set") != std::string::npos)
        GTEST_SKIP() << e.what();
      FAIL() << e.what();
    }
  }
};
testing::Environment* const kKernelSetEnvironment = testing::AddGlobalTestEnvironment(new KernelSetEnvironment);

// A sentinel the backward must never overwrite (padding columns of the packed buffer).
constexpr double kSentinel = 7777.0;

struct Problem {
  int B, T, H, Hkv, Dh;
  bool sink = false, alibi = false;
  int pad = 0;  // unused columns per token in the packed buffer (must stay untouched)
  uint64_t seed = 1;
  double q_scale = 1.0;  // larger values make peaked softmax rows
  enum Xsa { Off, On, Gated } xsa = Off;  // §2: γ = 1, or random γ in (−1, 1)
  bool sink_slope = false;                // GOAT's row-dependent sink logit (§3.4); needs sink
  bool split = false;  // give the fast backward its scratch: few (b, kv head) pairs split over query chunks
};

// Self-attention over a packed qkv buffer (B, T, (H+2Hkv)·Dh + pad).
template <class T>
struct Packed {
  Problem c;
  AttentionShape s;
  std::vector<T> qkv, sink, slopes, sink_slope, gamma;
  std::vector<T> xsa_c;  // [B, H, T], written by the forward
  explicit Packed(const Problem& problem) : c(problem) {
    s = attnlab::kernels::packed_attention_shape(c.B, c.T, c.H, c.Hkv, c.Dh);
    s.q_stride = s.kv_stride = (c.H + 2 * c.Hkv) * c.Dh + c.pad;
    s.q_batch_stride = s.kv_batch_stride = long(c.T) * s.q_stride;
    qkv = random_vec<T>(size_t(c.B) * c.T * s.q_stride, c.seed);
    for (size_t t = 0; t < size_t(c.B) * c.T; ++t)
      for (int d = 0; d < c.H * c.Dh; ++d) qkv[t * s.q_stride + d] *= T(c.q_scale);
    if (c.sink) sink = random_vec<T>(c.H, c.seed + 1);
    if (c.alibi)
      for (int h = 0; h < c.H; ++h) slopes.push_back(T(std::pow(2.0, -8.0 * (h + 1) / c.H)));  // §1.2
    if (c.sink_slope) {
      sink_slope = random_vec<T>(c.H, c.seed + 2);
      for (auto& x : sink_slope) x = T(0.05) * x;  // a logit drift of a few units over the sequence
    }
    if (c.xsa != Problem::Off) {
      gamma.assign(c.H, T(1));
      if (c.xsa == Problem::Gated) gamma = random_vec<T>(c.H, c.seed + 4);
      xsa_c.assign(size_t(c.B) * c.H * c.T, T(0));
    }
  }
  // The optional terms; `dgamma`, `dslope` (if given) receive the backward's += outputs.
  AttentionExtras<T> extras(T* dslope = nullptr, T* dgamma = nullptr) {
    AttentionExtras<T> x;
    x.alibi_slopes = slopes_ptr();
    x.sink_slope = sink_slope.empty() ? nullptr : sink_slope.data();
    x.xsa_gamma = gamma.empty() ? nullptr : gamma.data();
    x.xsa_c = xsa_c.empty() ? nullptr : xsa_c.data();
    if (x.sink_slope) x.dsink_slope = dslope;
    if (x.xsa_gamma) x.dxsa_gamma = dgamma;
    return x;
  }
  T* q() { return qkv.data(); }
  T* k() { return qkv.data() + c.H * c.Dh; }
  T* v() { return qkv.data() + (c.H + c.Hkv) * c.Dh; }
  const T* sink_ptr() const { return sink.empty() ? nullptr : sink.data(); }
  const T* slopes_ptr() const { return slopes.empty() ? nullptr : slopes.data(); }
  T scale() const { return T(1 / std::sqrt(double(c.Dh))); }
  size_t out_size() const { return size_t(c.B) * c.T * c.H * c.Dh; }
};

template <class T>
struct Result {
  std::vector<T> out, lse, dqkv, dsink, dslope, dgamma, xsa_c;
};

template <class T>
void forward(Impl impl, T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
             const AttentionShape& s, const AttentionExtras<T>& x) {
  if (impl == Impl::Fast)
    attnlab::kernels::attention_forward(out, lse, q, k, v, sink, scale, s, x);
  else
    attnlab::kernels::attention_forward_naive(out, lse, q, k, v, sink, scale, s, x);
}

template <class T>
void backward(Impl impl, T* dq, T* dk, T* dv, T* dsink, const T* dout, const T* out, const T* lse, const T* q,
              const T* k, const T* v, const T* sink, T scale, const AttentionShape& s, const AttentionExtras<T>& x,
              bool split = false) {
  if (impl == Impl::Fast) {
    std::vector<T> scratch(split ? attnlab::kernels::attention_backward_scratch_size<T>(s) : 0);
    attnlab::kernels::attention_backward(dq, dk, dv, dsink, dout, out, lse, q, k, v, sink, scale, s, x,
                                         split ? scratch.data() : nullptr, scratch.size());
  } else
    attnlab::kernels::attention_backward_naive(dq, dk, dv, dsink, dout, out, lse, q, k, v, sink, scale, s, x);
}

// Forward, then (given dout) backward, of one implementation on a packed problem.
template <class T>
Result<T> run(Impl impl, Packed<T>& p, const std::vector<T>* dout) {
  Result<T> r;
  r.out.assign(p.out_size(), T(0));
  r.lse.assign(size_t(p.c.B) * p.c.H * p.c.T, T(0));
  forward(impl, r.out.data(), r.lse.data(), p.q(), p.k(), p.v(), p.sink_ptr(), p.scale(), p.s, p.extras());
  r.xsa_c = p.xsa_c;
  if (dout) {
    r.dqkv.assign(p.qkv.size(), T(kSentinel));
    r.dsink.assign(p.c.H, T(0.5));  // += : the kernels must add to what is there
    r.dslope.assign(p.c.H, T(0.25));
    r.dgamma.assign(p.c.H, T(-0.5));
    T* dq = r.dqkv.data();
    backward(impl, dq, dq + p.c.H * p.c.Dh, dq + (p.c.H + p.c.Hkv) * p.c.Dh, p.sink.empty() ? nullptr : r.dsink.data(),
             dout->data(), r.out.data(), r.lse.data(), p.q(), p.k(), p.v(), p.sink_ptr(), p.scale(), p.s,
             p.extras(r.dslope.data(), r.dgamma.data()), p.c.split);
  }
  return r;
}

// The gradient buffer with its padding columns checked (still the sentinel: the backward writes
// only q, k and v) and then zeroed, so that comparisons see only real gradients.
template <class T>
std::vector<T> without_padding(std::vector<T> dqkv, const Packed<T>& p) {
  for (size_t t = 0; t < size_t(p.c.B) * p.c.T; ++t)
    for (int d = (p.c.H + 2 * p.c.Hkv) * p.c.Dh; d < p.s.q_stride; ++d) {
      EXPECT_EQ(dqkv[t * p.s.q_stride + d], T(kSentinel)) << "backward wrote outside q/k/v at token " << t;
      dqkv[t * p.s.q_stride + d] = T(0);
    }
  return dqkv;
}

// ----- the vector exp ---------------------------------------------------------------------------

TEST(Attention, VectorExpIsAccurateAndFlushesTinyResultsToZero) {
  // The softmax's exp of the active kernel set (a vector polynomial; std::exp on the one-lane
  // path): within 3 ulp of exp over the range scores take, exactly 1 at 0, and exactly 0 (never a
  // denormal) below e^−87.33, so masked (−inf) scores contribute nothing. 37 values per call: whole
  // vectors and a masked tail.
  const auto& set = attnlab::kernels::attention_kernels();
  constexpr int N = 37;
  float in[N], out[N];
  double worst = 0;
  for (int step = 0; step <= 200000; step += N) {
    for (int l = 0; l < N; ++l) in[l] = float(-87.3 + 96.0 * (step + l) / 200000.0);
    set.vector_exp(out, in, N);
    for (int l = 0; l < N; ++l) worst = std::max(worst, std::abs(out[l] / std::exp(double(in[l])) - 1));
  }
  EXPECT_LT(worst, 3 * 5.97e-8) << set.name;
  for (float x : {0.f, -INFINITY, -87.4f, -100.f, -1e30f}) {
    for (int l = 0; l < N; ++l) in[l] = x;
    set.vector_exp(out, in, N);
    for (int l = 0; l < N; ++l) EXPECT_EQ(out[l], x == 0.f ? 1.f : 0.f) << "exp(" << x << ") lane " << l << ", " << set.name;
  }
}

// ----- fast vs naive --------------------------------------------------------------------------

// Tolerances: the naive reference accumulates in double, so the float error is the fast kernel's
// own: dot products of Dh terms and sums over up to T keys in float, exp to ~2 ulp. Measured
// worst cases are a few 1e-7 relative; 5e-6 leaves an order of magnitude and still catches any
// wrong index, mask or missing rescale (those give errors of 1e-2 or more).
void expect_fast_matches_naive_float(const Problem& c, double tol = 5e-6) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " Dh=" << c.Dh
                                  << " sink=" << c.sink << " alibi=" << c.alibi << " pad=" << c.pad
                                  << " xsa=" << int(c.xsa) << " sink_slope=" << c.sink_slope << " split=" << c.split);
  Packed<float> p(c);
  const auto dout = random_vec<float>(p.out_size(), c.seed + 7);
  const auto fast = run(Impl::Fast, p, &dout);
  const auto naive = run(Impl::Naive, p, &dout);
  EXPECT_LT(max_rel_diff(fast.out, naive.out), tol) << "out";
  EXPECT_LT(max_rel_diff(fast.lse, naive.lse), tol) << "lse";
  EXPECT_LT(max_rel_diff(without_padding(fast.dqkv, p), without_padding(naive.dqkv, p)), tol) << "dqkv";
  if (c.sink) {
    EXPECT_LT(max_rel_diff(fast.dsink, naive.dsink), tol) << "dsink";
  }
  if (c.sink_slope) {
    EXPECT_LT(max_rel_diff(fast.dslope, naive.dslope), tol) << "dsink_slope";
  }
  if (c.xsa != Problem::Off) {
    EXPECT_LT(max_rel_diff(fast.xsa_c, naive.xsa_c), tol) << "xsa c";
    EXPECT_LT(max_rel_diff(fast.dgamma, naive.dgamma), tol) << "dgamma";
  }
}

TEST(Attention, FastMatchesNaiveFloatOneTile) { expect_fast_matches_naive_float({2, 64, 4, 4, 64}); }
TEST(Attention, FastMatchesNaiveFloatPartialTilesGqa2Sink) {
  expect_fast_matches_naive_float({2, 100, 4, 2, 32, true});
}
TEST(Attention, FastMatchesNaiveFloatGqa1Dh16SinkAlibi) {
  expect_fast_matches_naive_float({1, 77, 4, 1, 16, true, true});
}
TEST(Attention, FastMatchesNaiveFloatDh128) { expect_fast_matches_naive_float({1, 130, 2, 2, 128}); }
TEST(Attention, FastMatchesNaiveFloatManyTilesGqa2) { expect_fast_matches_naive_float({1, 300, 4, 2, 64, true}); }
TEST(Attention, FastMatchesNaiveFloatOddHeadSizeAndPadding) {
  // Dh = 24 and 40 leave partial vectors (masked loads and stores); pad columns must survive.
  expect_fast_matches_naive_float({2, 50, 4, 4, 24, false, true, 3});
  expect_fast_matches_naive_float({1, 33, 3, 1, 40, true, false, 5});
}
TEST(Attention, FastMatchesNaiveFloatShortSequences) {
  for (int T : {1, 2, 15, 17}) expect_fast_matches_naive_float({2, T, 2, 1, 32, true});
}
TEST(Attention, FastMatchesNaiveFloatLongGqa8) {
  // G·T = 8·1100 rows of D_i exceed the backward's D cache: the per-tile recomputation path.
  expect_fast_matches_naive_float({1, 1100, 8, 1, 16, true});
}
Problem with(Problem c, Problem::Xsa xsa, bool sink_slope = false) {
  c.xsa = xsa;
  c.sink_slope = sink_slope;
  return c;
}
Problem split(Problem c) {
  c.split = true;
  return c;
}

TEST(Attention, FastMatchesNaiveFloatXsa) {
  // XSA's epilogue, its dy rows and its direct dV term (§2), over tile edges, GQA and head sizes;
  // the G·T > D-cache case takes the per-tile recomputation path of D and of XSA's coefficient.
  expect_fast_matches_naive_float(with({2, 100, 4, 2, 32, true}, Problem::On));
  expect_fast_matches_naive_float(with({1, 77, 4, 1, 16, true, true}, Problem::Gated));
  expect_fast_matches_naive_float(with({2, 50, 4, 4, 24, false, true, 3}, Problem::Gated));
  expect_fast_matches_naive_float(with({1, 130, 2, 2, 128}, Problem::On));
  for (int T : {1, 17}) expect_fast_matches_naive_float(with({2, T, 2, 1, 32, true}, Problem::Gated));
  expect_fast_matches_naive_float(with({1, 1100, 8, 1, 16, true}, Problem::Gated));
}

TEST(Attention, FastMatchesNaiveFloatSinkSlope) {
  // GOAT's key form moves the sink logit by slope·t_i (§3.4).
  expect_fast_matches_naive_float(with({2, 100, 4, 2, 32, true}, Problem::Off, true));
  expect_fast_matches_naive_float(with({1, 70, 4, 1, 40, true, false, 2}, Problem::Gated, true));
}

TEST(Attention, FastMatchesNaiveFloatPeakedRows) {
  // Logits of several hundred: the online softmax rescales by factors that underflow to zero.
  Problem c{1, 150, 2, 2, 64, true, false};
  c.q_scale = 30;
  expect_fast_matches_naive_float(c, 2e-5);
}

// ----- the backward split over query chunks (few (b, kv head) pairs) ---------------------------

TEST(Attention, QueryChunksCoverTheQueriesWithEqualWork) {
  // Chunks are whole query tiles, in order, none empty, and the work Σ (pos + 1) of each is within
  // one tile's work of the total / n (a chunk ends at the first tile edge past its share).
  const int TILE = attnlab::kernels::attention_kernels().tile;
  auto backward_query_chunks = [&](const AttentionShape& s) { return attnlab::kernels::attention_query_chunks(s, TILE); };
  EXPECT_EQ(backward_query_chunks(attnlab::kernels::packed_attention_shape(8, 4096, 4, 1, 64)), 1);
  EXPECT_EQ(backward_query_chunks(attnlab::kernels::packed_attention_shape(2, 4096, 8, 4, 64)), 1);
  EXPECT_EQ(backward_query_chunks(attnlab::kernels::packed_attention_shape(1, 4096, 4, 1, 64)), 8);
  EXPECT_EQ(backward_query_chunks(attnlab::kernels::packed_attention_shape(1, 4096, 4, 2, 64)), 4);
  EXPECT_EQ(backward_query_chunks(attnlab::kernels::packed_attention_shape(1, 3 * TILE, 4, 1, 64)), 3);
  EXPECT_EQ(attnlab::kernels::attention_backward_scratch_size<float>(attnlab::kernels::packed_attention_shape(4, 256, 4, 2, 64)),
            0u);
  for (int T : {1, TILE, 3 * TILE - 1, 1000, 8192})
    for (int off : {0, 37}) {
      AttentionShape s = attnlab::kernels::packed_attention_shape(1, T, 1, 1, 16);
      s.Tk = T + off, s.pos_offset = off;
      const int n = backward_query_chunks(s);
      int bounds[attnlab::kernels::kAttentionMaxQueryChunks + 1];
      attnlab::kernels::split_attention_queries(s, n, TILE, bounds);
      auto work = [&](long i) { return i * off + i * (i + 1) / 2; };
      EXPECT_EQ(bounds[0], 0);
      EXPECT_EQ(bounds[n], T);
      for (int c = 0; c < n; ++c) {
        EXPECT_LT(bounds[c], bounds[c + 1]) << "T=" << T << " chunk " << c;
        EXPECT_EQ(bounds[c] % TILE, 0);
        const double share = double(work(T)) / n, tile_work = double(TILE) * (off + T);
        EXPECT_LE(std::abs(double(work(bounds[c + 1]) - work(bounds[c])) - share), tile_work + 1) << "T=" << T;
      }
    }
}

TEST(Attention, FastMatchesNaiveFloatSplitBackward) {
  // B = 1 and one KV head (or few) with several query tiles: the backward runs query chunks and
  // adds their partial dK, dV; with every mechanism the kernel has.
  const int TILE = attnlab::kernels::attention_kernels().tile;
  const int T = 9 * TILE + 5;  // 8 chunks over 10 tiles, the last one short
  expect_fast_matches_naive_float(split({1, T, 1, 1, 64}));
  expect_fast_matches_naive_float(split({1, T, 4, 1, 32, true, true}));                  // GQA 4, sink, ALiBi
  expect_fast_matches_naive_float(split({1, T, 4, 2, 24, true, false, 3}));              // 2 pairs: 4 chunks
  expect_fast_matches_naive_float(split({2, T, 2, 1, 16, false, true}));                 // 2 batches
  expect_fast_matches_naive_float(split(with({1, T, 2, 1, 32, true}, Problem::On)));     // XSA
  expect_fast_matches_naive_float(split(with({1, T, 4, 2, 40, true, true, 2}, Problem::Gated, true)));  // + GOAT slope
  expect_fast_matches_naive_float(split({1, 2 * TILE + 3, 2, 1, 16, true}));             // 3 tiles: 3 chunks
  expect_fast_matches_naive_float(split(with({1, 1100, 8, 1, 16, true}, Problem::Gated)));  // D cache per chunk
}

TEST(Attention, SplitBackwardIsDeterministicAndCloseToUnsplit) {
  // The split changes the summation order of dK, dV only (dQ's is unchanged): bits equal run to
  // run and for one thread or two, and within float rounding of the unsplit kernel.
  for (const Problem& c : {Problem{1, 700, 4, 1, 64, true, true}, with({1, 300, 2, 2, 32, true}, Problem::Gated, true)}) {
    Packed<float> p(split(c));
    Packed<float> whole(c);
    const auto dout = random_vec<float>(p.out_size(), 5);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = run(Impl::Fast, p, &dout);
    omp_set_num_threads(std::max(2, threads));
    const auto two = run(Impl::Fast, p, &dout);
    const auto again = run(Impl::Fast, p, &dout);
    const auto unsplit = run(Impl::Fast, whole, &dout);
    omp_set_num_threads(threads);
    EXPECT_EQ(max_abs_diff(one.dqkv, two.dqkv), 0.0);
    EXPECT_EQ(max_abs_diff(two.dqkv, again.dqkv), 0.0);
    EXPECT_EQ(max_abs_diff(one.dsink, two.dsink), 0.0);
    EXPECT_EQ(max_abs_diff(one.dslope, two.dslope), 0.0);
    EXPECT_EQ(max_abs_diff(one.dgamma, two.dgamma), 0.0);
    EXPECT_LT(max_rel_diff(two.dqkv, unsplit.dqkv), 5e-6);
    // dQ keeps its order over key tiles: the same bits as the unsplit kernel.
    for (int t = 0; t < c.T; ++t)
      for (int d = 0; d < c.H * c.Dh; ++d)
        ASSERT_EQ(two.dqkv[size_t(t) * p.s.q_stride + d], unsplit.dqkv[size_t(t) * p.s.q_stride + d]) << t;
  }
}

TEST(Attention, FastMatchesNaiveDouble) {
  // The one-lane path with 8-wide tiles: agreement to rounding.
  for (const Problem& c : {Problem{2, 21, 4, 2, 5, true, true}, Problem{1, 8, 2, 1, 8}, Problem{2, 17, 3, 3, 13, false, false, 2},
                           with({2, 19, 4, 2, 6, true}, Problem::Gated, true)}) {
    Packed<double> p(c);
    const auto dout = random_vec<double>(p.out_size(), 99);
    const auto fast = run(Impl::Fast, p, &dout);
    const auto naive = run(Impl::Naive, p, &dout);
    EXPECT_LT(max_rel_diff(fast.out, naive.out), 1e-13);
    EXPECT_LT(max_abs_diff(fast.lse, naive.lse), 1e-13);
    EXPECT_LT(max_rel_diff(without_padding(fast.dqkv, p), without_padding(naive.dqkv, p)), 1e-13);
    EXPECT_LT(max_rel_diff(fast.dsink, naive.dsink), 1e-13);
    EXPECT_LT(max_rel_diff(fast.dslope, naive.dslope), 1e-13);
    EXPECT_LT(max_rel_diff(fast.dgamma, naive.dgamma), 1e-13);
  }
}

// ----- finite differences ---------------------------------------------------------------------

// loss = Σ w∘out for a fixed random w, so dout = w. Central differences with h = 1e-6 in double
// have error ~1e-9 relative to the gradient scale; 1e-6 is the bar of docs/mechanisms.md §0.
void expect_gradients_match_finite_differences(Impl impl, Problem c) {
  SCOPED_TRACE(testing::Message() << (impl == Impl::Fast ? "fast" : "naive") << " T=" << c.T << " H=" << c.H
                                  << " Hkv=" << c.Hkv << " Dh=" << c.Dh << " sink=" << c.sink << " alibi=" << c.alibi);
  Packed<double> p(c);
  const auto w = random_vec<double>(p.out_size(), c.seed + 3);
  const auto analytic = run(impl, p, &w);
  std::vector<double> out(p.out_size()), lse(size_t(c.B) * c.H * c.T);
  auto loss = [&] {
    forward(impl, out.data(), lse.data(), p.q(), p.k(), p.v(), p.sink_ptr(), p.scale(), p.s, p.extras());
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  auto numeric = attnlab::test::numeric_grad(p.qkv, loss);
  attnlab::test::expect_grad_close(without_padding(analytic.dqkv, p), numeric, 1e-6, "dqkv");
  if (c.sink) {
    auto dsink = analytic.dsink;
    for (auto& x : dsink) x -= 0.5;  // the initial value the kernel added to
    attnlab::test::expect_grad_close(dsink, attnlab::test::numeric_grad(p.sink, loss), 1e-6, "dsink");
  }
  if (c.sink_slope) {
    auto dslope = analytic.dslope;
    for (auto& x : dslope) x -= 0.25;
    attnlab::test::expect_grad_close(dslope, attnlab::test::numeric_grad(p.sink_slope, loss), 1e-6, "dsink_slope");
  }
  if (c.xsa != Problem::Off) {
    auto dgamma = analytic.dgamma;
    for (auto& x : dgamma) x += 0.5;
    attnlab::test::expect_grad_close(dgamma, attnlab::test::numeric_grad(p.gamma, loss), 1e-6, "dgamma");
  }
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  for (Impl impl : {Impl::Fast, Impl::Naive}) {
    expect_gradients_match_finite_differences(impl, {2, 11, 4, 2, 5, true, false, 1});
    expect_gradients_match_finite_differences(impl, {1, 19, 2, 1, 4, false, true});
    expect_gradients_match_finite_differences(impl, {1, 9, 2, 2, 3, true, true});
    // XSA (D_i = g_i·z_i and the own-value term, §2.2) and GOAT's sink slope (§3.4).
    expect_gradients_match_finite_differences(impl, with({2, 11, 4, 2, 5, true, false, 1}, Problem::On));
    expect_gradients_match_finite_differences(impl, with({1, 13, 4, 1, 6, true, true}, Problem::Gated, true));
    expect_gradients_match_finite_differences(impl, with({1, 10, 2, 2, 4}, Problem::Gated));
  }
  // The split backward (8-row tiles in double: 3 and 4 query chunks).
  expect_gradients_match_finite_differences(Impl::Fast, split({1, 19, 2, 1, 5, true, true}));
  expect_gradients_match_finite_differences(Impl::Fast, split(with({1, 27, 4, 2, 4, true, false, 1}, Problem::Gated, true)));
  expect_gradients_match_finite_differences(Impl::Fast, split(with({1, 21, 2, 1, 6, false, true}, Problem::On)));
}

TEST(Attention, GradientsMatchFiniteDifferencesWithKvCacheOffset) {
  // Tq < Tk: 5 queries at positions 7..11 over a cache of 14 keys (the last two unseen: zero grad).
  const int B = 2, Tq = 5, Tk = 14, H = 2, Hkv = 1, Dh = 6, off = 7;
  const int kv_stride = 2 * Hkv * Dh;
  AttentionShape s{B, Tq, Tk, H, Hkv, Dh, H * Dh, long(Tq) * H * Dh, kv_stride, long(Tk + 3) * kv_stride, H * Dh, off};
  auto q = random_vec<double>(size_t(B) * Tq * H * Dh, 5);
  auto cache = random_vec<double>(size_t(B) * (Tk + 3) * kv_stride, 6);
  auto sink = random_vec<double>(H, 7);
  const auto w = random_vec<double>(size_t(B) * Tq * H * Dh, 8);
  const double scale = 1 / std::sqrt(double(Dh));
  std::vector<double> out(w.size()), lse(size_t(B) * H * Tq);
  auto loss = [&] {
    attnlab::kernels::attention_forward(out.data(), lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh,
                                        sink.data(), scale, s);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  loss();
  std::vector<double> dq(q.size()), dcache(cache.size(), 0.0), dsink(H, 0.0);
  attnlab::kernels::attention_backward(dq.data(), dcache.data(), dcache.data() + Hkv * Dh, dsink.data(), w.data(),
                                       out.data(), lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh,
                                       sink.data(), scale, s);
  attnlab::test::expect_grad_close(dq, attnlab::test::numeric_grad(q, loss), 1e-6, "dq");
  attnlab::test::expect_grad_close(dcache, attnlab::test::numeric_grad(cache, loss), 1e-6, "dk/dv");
  attnlab::test::expect_grad_close(dsink, attnlab::test::numeric_grad(sink, loss), 1e-6, "dsink");
}

// ----- KV cache: chunks equal one shot ----------------------------------------------------------

TEST(Attention, KvCacheChunksEqualOneShot) {
  // One shot over the packed buffer, then the same sequence in chunks of 20, 1, 60 and 49 tokens,
  // each attending to a cache (B, capacity, 2·Hkv·Dh) with pos_offset = tokens already cached.
  const int B = 2, T = 130, H = 4, Hkv = 2, Dh = 32, capacity = 160;
  Packed<float> p(Problem{B, T, H, Hkv, Dh, true, true});
  const auto one_shot = run<float>(Impl::Fast, p, nullptr);
  const int kv_stride = 2 * Hkv * Dh;
  std::vector<float> cache(size_t(B) * capacity * kv_stride, std::nanf(""));  // unfilled slots are NaN
  std::vector<float> q_chunk, out_chunk, lse_chunk, out(p.out_size()), lse(size_t(B) * H * T);
  int done = 0;
  for (int n : {20, 1, 60, 49}) {
    q_chunk.assign(size_t(B) * n * H * Dh, 0.f);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i) {
        const float* tok = p.qkv.data() + (size_t(b) * T + done + i) * p.s.q_stride;
        std::memcpy(&q_chunk[(size_t(b) * n + i) * H * Dh], tok, sizeof(float) * H * Dh);
        std::memcpy(&cache[(size_t(b) * capacity + done + i) * kv_stride], tok + H * Dh, sizeof(float) * kv_stride);
      }
    AttentionShape s{B, n, done + n, H, Hkv, Dh, H * Dh, long(n) * H * Dh, kv_stride, long(capacity) * kv_stride, H * Dh, done};
    out_chunk.assign(size_t(B) * n * H * Dh, 0.f);
    lse_chunk.assign(size_t(B) * H * n, 0.f);
    attnlab::kernels::attention_forward(out_chunk.data(), lse_chunk.data(), q_chunk.data(), cache.data(),
                                        cache.data() + Hkv * Dh, p.sink_ptr(), p.scale(), s, p.extras());
    for (int b = 0; b < B; ++b) {
      std::memcpy(&out[(size_t(b) * T + done) * H * Dh], &out_chunk[size_t(b) * n * H * Dh], sizeof(float) * n * H * Dh);
      for (int h = 0; h < H; ++h)
        std::memcpy(&lse[(size_t(b) * H + h) * T + done], &lse_chunk[(size_t(b) * H + h) * n], sizeof(float) * n);
    }
    done += n;
  }
  EXPECT_LT(max_rel_diff(out, one_shot.out), 1e-5);  // §1.5: fp32 relative 1e-5
  EXPECT_LT(max_abs_diff(lse, one_shot.lse), 1e-5);
}

void expect_kv_chunk_matches_naive(int Tq, int Tk, int off, bool split = false) {
  // Forward and backward of a chunk (Tq < Tk, pos_offset > 0, batch stride = cache capacity) in float.
  SCOPED_TRACE(testing::Message() << "Tq=" << Tq << " Tk=" << Tk << " pos_offset=" << off << " split=" << split);
  const int B = 2, H = 4, Hkv = 1, Dh = 64, capacity = 200;
  const int kv_stride = 2 * Hkv * Dh;
  AttentionShape s{B, Tq, Tk, H, Hkv, Dh, H * Dh, long(Tq) * H * Dh, kv_stride, long(capacity) * kv_stride, H * Dh, off};
  const auto q = random_vec<float>(size_t(B) * Tq * H * Dh, 11);
  const auto cache = random_vec<float>(size_t(B) * capacity * kv_stride, 12);
  const auto sink = random_vec<float>(H, 13);
  const auto dout = random_vec<float>(size_t(B) * Tq * H * Dh, 14);
  const float scale = 0.125f;
  Result<float> r[2];
  for (int i = 0; i < 2; ++i) {
    const Impl impl = i == 0 ? Impl::Fast : Impl::Naive;
    r[i].out.assign(dout.size(), 0.f);
    r[i].lse.assign(size_t(B) * H * Tq, 0.f);
    r[i].dqkv.assign(q.size() + cache.size(), float(kSentinel));  // dq, then the cache's dk/dv
    r[i].dsink.assign(H, 0.f);
    forward(impl, r[i].out.data(), r[i].lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh, sink.data(), scale,
            s, {});
    float* dcache = r[i].dqkv.data() + q.size();
    backward(impl, r[i].dqkv.data(), dcache, dcache + Hkv * Dh, r[i].dsink.data(), dout.data(), r[i].out.data(),
             r[i].lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh, sink.data(), scale, s,
             {}, split);
  }
  EXPECT_LT(max_rel_diff(r[0].out, r[1].out), 5e-6);
  EXPECT_LT(max_rel_diff(r[0].dsink, r[1].dsink), 5e-6);
  // dq, then dk/dv of the cache slots < Tk; the slots >= Tk must keep the sentinel.
  std::vector<float> grads[2];
  for (int i = 0; i < 2; ++i) {
    grads[i].assign(r[i].dqkv.begin(), r[i].dqkv.begin() + q.size());
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < capacity; ++j)
        for (int d = 0; d < kv_stride; ++d) {
          const float g = r[i].dqkv[q.size() + (size_t(b) * capacity + j) * kv_stride + d];
          if (j < Tk)
            grads[i].push_back(g);
          else
            ASSERT_EQ(g, float(kSentinel)) << "backward wrote cache slot " << j << " >= Tk";
        }
  }
  EXPECT_LT(max_rel_diff(grads[0], grads[1]), 5e-6);
}

TEST(Attention, KvCacheChunkMatchesNaive) {
  expect_kv_chunk_matches_naive(70, 150, 75);  // keys 145..149 are seen by no query: zero dk, dv
  expect_kv_chunk_matches_naive(1, 130, 129);  // one decoding step
  expect_kv_chunk_matches_naive(17, 100, 83);
  // The backward's query chunks with pos_offset > 0 (B·Hkv = 2 pairs: up to 4 chunks).
  expect_kv_chunk_matches_naive(70, 150, 75, true);
  expect_kv_chunk_matches_naive(150, 190, 33, true);
}

// A decoding step (Tq = 1: attention_decode_task) against the naive reference with every extra the
// model can pass: GQA, a sink with GOAT's slope, ALiBi, XSA (gated: γ ≠ 1), an odd head size (vector
// tails), and positions on both sides of the kernel's 128-key blocks. Same tolerance argument as
// expect_fast_matches_naive_float (dot products of Dh terms, sums over the keys, exp within 2 ulp).
TEST(Attention, DecodeStepMatchesNaive) {
  const int B = 2, H = 4, Hkv = 2, capacity = 400;
  for (int Dh : {40, 64})
    for (int off : {0, 1, 127, 128, 129, 300})
      for (int extras = 0; extras < 5; ++extras) {
        SCOPED_TRACE(testing::Message() << "Dh=" << Dh << " pos_offset=" << off << " extras=" << extras);
        const int kv_stride = 2 * Hkv * Dh;
        AttentionShape s{B, 1, off + 1, H, Hkv, Dh, H * Dh, long(H) * Dh, kv_stride, long(capacity) * kv_stride, H * Dh, off};
        const auto q = random_vec<float>(size_t(B) * H * Dh, 21 + off);
        const auto cache = random_vec<float>(size_t(B) * capacity * kv_stride, 22 + Dh);
        const auto sink = random_vec<float>(H, 23);
        const std::vector<float> alibi = {0.5f, 0.25f, 0.125f, 0.0625f}, slope = {0.01f, -0.02f, 0.003f, 0.f},
                                 gamma = {1.f, 0.5f, -0.3f, 0.9f};
        const bool with_sink = extras == 1 || extras == 4, with_alibi = extras == 2 || extras == 4,
                   with_xsa = extras == 3 || extras == 4;
        Result<float> r[2];
        std::vector<float> xsa_c[2];
        for (int i = 0; i < 2; ++i) {
          AttentionExtras<float> x;
          if (with_alibi) x.alibi_slopes = alibi.data();
          if (with_sink) x.sink_slope = slope.data();
          xsa_c[i].assign(size_t(B) * H, 0.f);
          if (with_xsa) x.xsa_gamma = gamma.data(), x.xsa_c = xsa_c[i].data();
          r[i].out.assign(size_t(B) * H * Dh, 0.f);
          r[i].lse.assign(size_t(B) * H, 0.f);
          forward(i == 0 ? Impl::Fast : Impl::Naive, r[i].out.data(), r[i].lse.data(), q.data(), cache.data(),
                  cache.data() + Hkv * Dh, with_sink ? sink.data() : nullptr, 0.125f, s, x);
        }
        EXPECT_LT(max_rel_diff(r[0].out, r[1].out), 5e-6);
        EXPECT_LT(max_rel_diff(r[0].lse, r[1].lse), 5e-6);
        EXPECT_LT(max_rel_diff(xsa_c[0], xsa_c[1]), 5e-6);
      }
}

// ----- invariants (§1.5) ----------------------------------------------------------------------

TEST(Attention, Causality) {
  // Perturbing token t' (its q, k and v) changes no output row t < t' — exactly, since masked
  // scores become exact zeros — and does change row t'.
  Problem c{2, 150, 4, 2, 32, true, true};
  Packed<float> p(c);
  const auto base = run<float>(Impl::Fast, p, nullptr);
  for (int tp : {0, 63, 64, 100, 149}) {
    Packed<float> perturbed(c);
    for (int b = 0; b < c.B; ++b)
      for (int d = 0; d < (c.H + 2 * c.Hkv) * c.Dh; ++d) perturbed.qkv[(size_t(b) * c.T + tp) * p.s.q_stride + d] += 3.f;
    const auto r = run<float>(Impl::Fast, perturbed, nullptr);
    const size_t row = size_t(c.H) * c.Dh;
    for (int b = 0; b < c.B; ++b) {
      for (int t = 0; t < tp; ++t)
        for (size_t d = 0; d < row; ++d)
          ASSERT_EQ(r.out[(size_t(b) * c.T + t) * row + d], base.out[(size_t(b) * c.T + t) * row + d])
              << "row " << t << " saw token " << tp;
      double change = 0;
      for (size_t d = 0; d < row; ++d)
        change += std::abs(r.out[(size_t(b) * c.T + tp) * row + d] - base.out[(size_t(b) * c.T + tp) * row + d]);
      EXPECT_GT(change, 1e-3) << "row " << tp << " ignored its own token";
    }
  }
}

TEST(Attention, BackwardCausality) {
  // A loss on row i alone: keys after i get exactly zero dk and dv, and other rows zero dq.
  Problem c{1, 140, 2, 1, 32, true, false};
  Packed<float> p(c);
  const int i = 70;
  std::vector<float> dout(p.out_size(), 0.f);
  for (int d = 0; d < c.H * c.Dh; ++d) dout[size_t(i) * c.H * c.Dh + d] = 1.f + 0.01f * d;
  const auto r = run(Impl::Fast, p, &dout);
  for (int t = 0; t < c.T; ++t)
    for (int d = 0; d < (c.H + 2 * c.Hkv) * c.Dh; ++d) {
      const float g = r.dqkv[size_t(t) * p.s.q_stride + d];
      const bool is_q = d < c.H * c.Dh;
      if ((is_q && t != i) || (!is_q && t > i)) {
        ASSERT_EQ(g, 0.f) << "token " << t << " column " << d;
      }
    }
  double at_i = 0;
  for (int d = 0; d < c.H * c.Dh; ++d) at_i += std::abs(r.dqkv[size_t(i) * p.s.q_stride + d]);
  EXPECT_GT(at_i, 1e-4);
}

TEST(Attention, SinkAtMinus1e4EqualsNoSink) {
  // exp(−1e4 − m) is exactly 0 in float, so the two runs agree to the bit; dsink is 0 (p_sink = 0).
  Problem c{2, 100, 4, 2, 64, true, false};
  Packed<float> with_sink(c);
  std::fill(with_sink.sink.begin(), with_sink.sink.end(), -1e4f);
  c.sink = false;
  Packed<float> without(c);
  const auto dout = random_vec<float>(without.out_size(), 3);
  const auto a = run(Impl::Fast, with_sink, &dout);
  const auto b = run(Impl::Fast, without, &dout);
  EXPECT_EQ(max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.lse, b.lse), 0.0);
  EXPECT_EQ(max_abs_diff(a.dqkv, b.dqkv), 0.0);
  for (float ds : a.dsink) EXPECT_EQ(ds, 0.5f);  // += 0 onto the initial 0.5
}

TEST(Attention, AlibiWithZeroSlopesEqualsNoAlibi) {
  Problem c{1, 90, 4, 4, 32, true, true};
  Packed<float> zero(c);
  std::fill(zero.slopes.begin(), zero.slopes.end(), 0.f);
  c.alibi = false;
  Packed<float> none(c);
  const auto dout = random_vec<float>(none.out_size(), 4);
  const auto a = run(Impl::Fast, zero, &dout);
  const auto b = run(Impl::Fast, none, &dout);
  EXPECT_EQ(max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.dqkv, b.dqkv), 0.0);
}

TEST(Attention, CommonKeyShiftHasZeroGradientWithoutSink) {
  // Shifting every key of a (b, kv head) by one vector adds q_i·c to a whole softmax row, which
  // softmax ignores (§1.5, structural zero of b_k): Σ_j dk_j = 0. With a sink the row constant no
  // longer cancels (the sink logit does not move), so the sum must be clearly non-zero.
  for (bool sink : {false, true}) {
    Problem c{2, 40, 4, 2, 8, sink, false};
    Packed<double> p(c);
    const auto dout = random_vec<double>(p.out_size(), 21);
    const auto r = run(Impl::Fast, p, &dout);
    double worst = 0, scale = 0;
    for (int b = 0; b < c.B; ++b)
      for (int d = 0; d < c.Hkv * c.Dh; ++d) {
        double sum = 0;
        for (int j = 0; j < c.T; ++j) {
          const double g = r.dqkv[(size_t(b) * c.T + j) * p.s.q_stride + c.H * c.Dh + d];
          sum += g;
          scale = std::max(scale, std::abs(g));
        }
        worst = std::max(worst, std::abs(sum));
      }
    if (sink)
      EXPECT_GT(worst / scale, 1e-3);
    else
      EXPECT_LT(worst / scale, 1e-12);
  }
}

TEST(Attention, ResultsDoNotDependOnThreadCount) {
  // Every output element is computed by one task in a fixed order (no shared accumulators), so
  // one thread and two give the same bits: training runs are reproducible.
  Problem c{2, 200, 4, 2, 64, true, false};
  Packed<float> p(c);
  const auto dout = random_vec<float>(p.out_size(), 5);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run(Impl::Fast, p, &dout);
  omp_set_num_threads(std::max(2, threads));
  const auto two = run(Impl::Fast, p, &dout);
  omp_set_num_threads(threads);
  EXPECT_EQ(max_abs_diff(one.out, two.out), 0.0);
  EXPECT_EQ(max_abs_diff(one.lse, two.lse), 0.0);
  EXPECT_EQ(max_abs_diff(one.dqkv, two.dqkv), 0.0);
  EXPECT_EQ(max_abs_diff(one.dsink, two.dsink), 0.0);
}

// ----- XSA invariants (§2.4) --------------------------------------------------------------------

TEST(Attention, XsaOutputIsOrthogonalToOwnValueAndZeroAtTokenZero) {
  // Mode "on": cos(z_i, v_i) = 0 (fp32 < 1e-5) for i >= 1, and z_0 = 0 because y_0 is a multiple
  // of v_0 (with a sink y_0 = a_00·v_0), under ALiBi too and in every KV head of a GQA group.
  for (bool sink : {false, true}) {
    Problem c = with({2, 90, 4, 2, 32, sink, true}, Problem::On);
    Packed<float> p(c);
    const auto r = run<float>(Impl::Fast, p, nullptr);
    double worst_cos = 0, worst_z0 = 0;
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int i = 0; i < c.T; ++i) {
          const float* z = &r.out[(size_t(b) * c.T + i) * c.H * c.Dh + h * c.Dh];
          const float* v = p.v() + (size_t(b) * c.T + i) * p.s.kv_stride + (h / 2) * c.Dh;
          double zv = 0, zz = 0, vv = 0, y2 = 0;
          for (int d = 0; d < c.Dh; ++d) zv += double(z[d]) * v[d], zz += double(z[d]) * z[d], vv += double(v[d]) * v[d];
          if (i == 0) {
            for (int d = 0; d < c.Dh; ++d) y2 = std::max(y2, std::abs(double(z[d])));
            worst_z0 = std::max(worst_z0, y2);
          } else {
            worst_cos = std::max(worst_cos, std::abs(zv) / std::sqrt(zz * vv));
          }
        }
    EXPECT_LT(worst_cos, 1e-5) << "sink=" << sink;
    EXPECT_LT(worst_z0, 1e-6) << "sink=" << sink;  // |v| ~ 1: rounding of y − (y·v̂)v̂
  }
}

TEST(Attention, XsaGatedWithZeroGateEqualsOffBitForBit) {
  // γ = tanh(0) = 0: output, lse and every gradient equal mode "off" exactly, yet dL/dγ != 0.
  Problem c = with({2, 100, 4, 2, 32, true, false}, Problem::Gated);
  Packed<float> gated(c);
  std::fill(gated.gamma.begin(), gated.gamma.end(), 0.f);
  c.xsa = Problem::Off;
  Packed<float> off(c);
  const auto dout = random_vec<float>(off.out_size(), 8);
  const auto a = run(Impl::Fast, gated, &dout);
  const auto b = run(Impl::Fast, off, &dout);
  EXPECT_EQ(max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.lse, b.lse), 0.0);
  EXPECT_EQ(max_abs_diff(a.dqkv, b.dqkv), 0.0);
  EXPECT_EQ(max_abs_diff(a.dsink, b.dsink), 0.0);
  for (float g : a.dgamma) EXPECT_GT(std::abs(g + 0.5f), 1e-3f);
}

TEST(Attention, XsaIsIdempotentAndKeepsOrthogonalRows) {
  // Applying the projection to z again changes nothing (P² = P), checked through the naive
  // reference's row projection; and a row already orthogonal to v passes unchanged.
  const int Dh = 16;
  auto v = random_vec<double>(Dh, 31), y = random_vec<double>(Dh, 32);
  std::vector<double> z(Dh), zz(Dh);
  attnlab::kernels::xsa_project_naive(z.data(), y.data(), v.data(), 1.0, Dh);
  const double c2 = attnlab::kernels::xsa_project_naive(zz.data(), z.data(), v.data(), 1.0, Dh);
  EXPECT_LT(std::abs(c2), 1e-15);
  EXPECT_LT(max_abs_diff(z, zz), 1e-15);
  std::vector<double> out(Dh);
  attnlab::kernels::xsa_project_naive(out.data(), z.data(), v.data(), 0.7, Dh);  // z ⟂ v
  EXPECT_LT(max_abs_diff(out, z), 1e-15);
}

TEST(Attention, SinkSlopeZeroEqualsNoSlope) {
  Problem c = with({1, 90, 4, 4, 32, true}, Problem::Off, true);
  Packed<float> zero(c);
  std::fill(zero.sink_slope.begin(), zero.sink_slope.end(), 0.f);
  c.sink_slope = false;
  Packed<float> none(c);
  const auto dout = random_vec<float>(none.out_size(), 4);
  const auto a = run(Impl::Fast, zero, &dout);
  const auto b = run(Impl::Fast, none, &dout);
  EXPECT_EQ(max_abs_diff(a.out, b.out), 0.0);
  EXPECT_EQ(max_abs_diff(a.dqkv, b.dqkv), 0.0);
  EXPECT_EQ(max_abs_diff(a.dsink, b.dsink), 0.0);
}

TEST(Attention, RejectsBadShapes) {
  std::vector<float> buf(4096);
  float* x = buf.data();
  auto s = attnlab::kernels::packed_attention_shape(1, 4, 4, 3, 8);  // 4 heads over 3 kv heads
  EXPECT_THROW(attnlab::kernels::attention_forward(x, x, x, x, x, (const float*)nullptr, 1.f, s), attnlab::Error);
  s = attnlab::kernels::packed_attention_shape(1, 4, 4, 2, 8);
  s.pos_offset = 1;  // Tk = 4 < pos_offset + Tq
  EXPECT_THROW(attnlab::kernels::attention_forward(x, x, x, x, x, (const float*)nullptr, 1.f, s), attnlab::Error);
  s = attnlab::kernels::packed_attention_shape(1, 2, 1, 1, 512);  // head size above the maximum
  EXPECT_THROW(attnlab::kernels::attention_forward(x, x, x, x, x, (const float*)nullptr, 1.f, s), attnlab::Error);
  s = attnlab::kernels::packed_attention_shape(1, 4, 4, 2, 8);
  float sink_grad = 0;
  EXPECT_THROW(attnlab::kernels::attention_backward(x, x, x, &sink_grad, x, x, x, x, x, x, (const float*)nullptr, 1.f, s),
               attnlab::Error);
}

// ----- kernel sets ------------------------------------------------------------------------------

// Makes a set active for one scope and restores the previous one.
struct ScopedKernelSet {
  std::string previous = attnlab::kernels::attention_kernels().name;
  explicit ScopedKernelSet(const std::string& name) { attnlab::kernels::use_attention_kernels(name); }
  ~ScopedKernelSet() { attnlab::kernels::use_attention_kernels(previous); }
};

TEST(KernelSets, EverySetThisCpuRunsMatchesTheNaiveReference) {
  // The same problems as above, under each set the CPU runs: one tile, partial tiles with GQA and a
  // sink, ALiBi, XSA with GOAT's slope, the split backward, a decoding step.
  const auto sets = attnlab::kernels::attention_kernel_sets();
  ASSERT_FALSE(sets.empty());
  EXPECT_EQ(sets.back(), "baseline");  // runs wherever the binary does
  for (const std::string& name : sets) {
    SCOPED_TRACE(name);
    ScopedKernelSet use(name);
    const auto& set = attnlab::kernels::attention_kernels();
    EXPECT_EQ(set.name, name);
    if (name == "avx512") {
      EXPECT_EQ(set.lanes, 16);
    }
    if (name == "avx2") {
      EXPECT_EQ(set.lanes, 8);
    }
#if defined(__aarch64__)
    EXPECT_EQ(set.lanes, 4);  // baseline is NEON there (scripts/test_aarch64.sh)
#endif
    expect_fast_matches_naive_float({2, 64, 4, 4, 64});
    expect_fast_matches_naive_float({2, 100, 4, 2, 32, true});
    expect_fast_matches_naive_float({1, 77, 4, 1, 16, true, true});
    expect_fast_matches_naive_float(with({1, 70, 4, 1, 40, true, false, 2}, Problem::Gated, true));
    expect_fast_matches_naive_float(split(with({1, 9 * set.tile + 5, 4, 2, 40, true, true, 2}, Problem::Gated, true)));
    expect_fast_matches_naive_float({2, 1, 2, 1, 32, true});
  }
}

TEST(KernelSets, UnknownOrUnrunnableSetsAreRefusedByName) {
  const auto sets = attnlab::kernels::attention_kernel_sets();
  const std::string active = attnlab::kernels::attention_kernels().name;
  try {
    attnlab::kernels::use_attention_kernels("sse9");
    ADD_FAILURE() << "an unknown set was accepted";
  } catch (const attnlab::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attention kernel set 'sse9'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("baseline"), std::string::npos) << e.what();
  }
#if defined(__x86_64__)
  // Every x86-64 build carries both sets under these names: each is either runnable here (and then
  // listed) or refused as one this CPU cannot run, never as unknown.
  __builtin_cpu_init();
  const bool runs[2] = {__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                            __builtin_cpu_supports("fma"),
                        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")};
  const char* names[2] = {"avx512", "avx2"};
  for (int i = 0; i < 2; ++i) {
    const bool listed = std::find(sets.begin(), sets.end(), names[i]) != sets.end();
    EXPECT_EQ(listed, runs[i]) << names[i];
    if (listed) continue;
    try {
      attnlab::kernels::use_attention_kernels(names[i]);
      ADD_FAILURE() << "a set this CPU cannot run was accepted: " << names[i];
    } catch (const attnlab::Error& e) {
      EXPECT_NE(std::string(e.what()).find("this CPU cannot run the attention kernel set"), std::string::npos)
          << e.what();
    }
  }
#endif
  EXPECT_EQ(attnlab::kernels::attention_kernels().name, active);  // a refused set changes nothing
}

}  // namespace
