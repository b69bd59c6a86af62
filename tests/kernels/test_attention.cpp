// Tests of the fused causal attention kernel (src/kernels/attention.h) against docs/mechanisms.md §1.1
// (forward and Backward), §1.2 (ALiBi), §1.3 (learned sink) and the invariants of §1.5:
// - the fast kernel equals the naive reference (float: every kernel set, each output within an
//   error bound derived from the computation, against the reference run in double on the same
//   values; double: the one-lane path with 8-wide tiles, to rounding), over head sizes 16..128 and
//   odd ones, GQA groupings (G = 1, 2, 4, 8), lengths that are not tile multiples, peaked softmax
//   rows; the backward writes only q/k/v;
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
#include <limits>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
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
  void TearDown() override;
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

// The same problem in double, with the float problem's values: the naive reference then computes
// the exact result of the float inputs (to double rounding), which the float kernels are held to.
Packed<double> as_double(const Packed<float>& f) {
  Packed<double> d(f.c);
  d.qkv.assign(f.qkv.begin(), f.qkv.end());
  d.sink.assign(f.sink.begin(), f.sink.end());
  d.slopes.assign(f.slopes.begin(), f.slopes.end());
  d.sink_slope.assign(f.sink_slope.begin(), f.sink_slope.end());
  d.gamma.assign(f.gamma.begin(), f.gamma.end());
  return d;
}

std::vector<double> as_double(const std::vector<float>& f) { return std::vector<double>(f.begin(), f.end()); }

// The q (part 0), k (1) or v (2) columns of a packed (B, T, stride) buffer, token after token: the
// padding columns are left out and each gradient is checked under its own name.
template <class T>
std::vector<T> qkv_part(const std::vector<T>& buf, const Problem& c, const AttentionShape& s, int part) {
  const int first = part == 0 ? 0 : part == 1 ? c.H * c.Dh : (c.H + c.Hkv) * c.Dh;
  const int cols = part == 0 ? c.H * c.Dh : c.Hkv * c.Dh;
  std::vector<T> r;
  for (size_t t = 0; t < size_t(c.B) * c.T; ++t)
    r.insert(r.end(), buf.begin() + t * s.q_stride + first, buf.begin() + t * s.q_stride + first + cols);
  return r;
}

// ----- the vector exp ---------------------------------------------------------------------------

// The relative error of the softmax's exp that the test below guarantees for every kernel set (the
// error bounds of the fast kernels build on it).
constexpr double kExpError = 3 * 5.97e-8;

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
  EXPECT_LT(worst, kExpError) << set.name;
  for (float x : {0.f, -INFINITY, -87.4f, -100.f, -1e30f}) {
    for (int l = 0; l < N; ++l) in[l] = x;
    set.vector_exp(out, in, N);
    for (int l = 0; l < N; ++l) EXPECT_EQ(out[l], x == 0.f ? 1.f : 0.f) << "exp(" << x << ") lane " << l << ", " << set.name;
  }
}

// ----- error bounds of the float kernels ------------------------------------------------------
//
// The float kernels are held to the naive reference run in double on the same float inputs (the
// exact result, to double rounding), element by element, within a bound on their rounding error
// that follows from the computation. A tolerance that passed on one CPU is no bound: machines
// differ in vector width, FMA contraction, tile size and summation order, and the bound below
// holds for all of them.
//
// Model. A float operation (+, −, ×, /, sqrt, fma) returns its exact result on its float operands
// times (1 + ε), |ε| <= u = 2^-24; the softmax's exp is within kExpError of exp of its float argument
// (VectorExpIsAccurateAndFlushesTinyResultsToZero); std::log within 1 ulp (2u). A sum of n
// products, in any order and any grouping (vector lanes, tiles, query chunks, with or without FMA),
// takes each term through at most n roundings (its product, unless fused, and at most n − 1
// additions: no path through a binary tree of n leaves is longer), and a product of at most n
// factors (1 + ε) is within γ_n of 1, so
//
//   |fl(Σ_k t_k) − Σ_k t_k| <= γ_n·Σ_k |t_k|,   γ_n = n·u / (1 − n·u),
//
// where Σ|t_k| is the magnitude: the same formula with every term replaced by its absolute value.
// When term k's factors already carry a relative error ρ_k (inputs computed earlier) or an absolute
// error δ_k of one factor f_k, the error adds Σ_k |t_k|·ρ_k + Σ_k δ_k·|t_k / f_k|. Relative errors
// of successive stages add (first order; see "Higher order" below).
//
// Forward, query row i of head h: n = t_i + 1 keys, R = ceil(n / tile) key tiles (a rescale each;
// decoding blocks of 128 keys are never smaller than a tile), p_j, p_s the exact probabilities of
// the keys and of the sink, m the row's largest logit, L the exact log-sum-exp.
//  - Logit ℓ_j = scale·q·k_j − m_h(t_i − t_j): scale·q, Dh products, the bias: at most Dh + 3
//    roundings of terms whose magnitude is S_j = scale·Σ_d |q_d k_jd| + |bias|, so
//    |δℓ_j| <= λ_j = γ_{Dh+3}·S_j. Sink logit s + slope·t_i: λ_s = γ_2·(|s| + |slope·t_i|).
//  - Weight of key j: exp(ℓ_j − m') times the later rescales exp(m_old − m_new). The running maxima
//    cancel between the output and its normaliser (and in lse = m + log l), but the subtractions
//    round: their errors telescope to at most u·(m − ℓ_j); each exp adds kExpError. Relative error
//    of the weight: η_j = λ_j + u·(m − ℓ_j) + (1 + R)·kExpError; the sink (opened as e^0 = 1):
//    η_s = λ_s + u·(m − s) + R·kExpError. H = Σ_j p_j·η_j + p_s·η_s bounds the normaliser's share.
//  - y = Σ_j w_j v_j / Σ_j w_j: both sums have n + 1 terms and R rescale products (N = n + 1 + R
//    roundings), then a reciprocal and a product:
//      |δy_d| <= Σ_j p_j |v_jd| η_j + (H + 2γ_{N+1})·M_d,    M_d = Σ_j p_j |v_jd|.
//  - lse = m + log l: |δL| <= H + γ_N + 2u·(L − m) + u·|L|.
//  - XSA: ‖v‖ from Dh squares and a sqrt, relative ν = γ_Dh/2 + u; c = y·v / ‖v‖:
//      |δc| <= (Σ_d |δy_d||v_d| + (γ_Dh + ν + u)·Σ_d |y_d v_d|) / ‖v‖;
//    coef = γ_h·c/‖v‖: |δcoef| <= |γ_h|·(|δc| + |c|·(ν + 2u)) / ‖v‖;
//    z_d = y_d − coef·v_d: |δz_d| <= |δy_d| + |v_d||δcoef| + u·(|coef·v_d| + |z_d|).
// Backward, the same row. The kernel reads the forward's float out and lse: their errors enter.
//  - D = g·z from Dh products with the float z: |δD| <= γ_Dh·Σ_d |g_d z_d| + Σ_d |g_d||δz_d|.
//  - XSA's dy = g − coef'·v, coef' = γ_h (g·v)/‖v‖²:
//    |δcoef'| <= |γ_h|·(γ_Dh·Σ_d |g_d v_d| + |g·v|·(2ν + 3u)) / ‖v‖²;
//    |δdy_d| <= |v_d||δcoef'| + u·(|coef'·v_d| + |dy_d|). Without XSA dy = g, exactly.
//  - Recomputed probability exp(ℓ_j − L̂): relative error π_j = λ_j + |δL| + u·|ℓ_j − L| + kExpError.
//  - dP_j = dy·v_j: |δdP_j| <= γ_Dh·Σ_d |dy_d v_jd| + Σ_d |δdy_d||v_jd|;
//    dS_j = scale·P_j·(dP_j − D), a subtraction and two products:
//      |δdS_j| <= scale·p_j·(|dP_j − D|·(π_j + 2u) + |δdP_j| + |δD| + u·|dP_j − D|).
//  - dq_i = Σ_j dS_j k_j (n terms); dk_j = Σ dS q_i and dv_j = Σ P dy_i over the G heads and the
//    queries that see key j (n_j terms; XSA adds one own-value term per head to dv of the row's own
//    key, with its own inputs' errors): each |δ| <= Σ (input errors) + γ_{n+1}·(magnitude).
//  - dsink = Σ −p_s·D, dsink_slope = Σ −p_s·D·t_i, dγ = Σ −c·(g·v)/‖v‖ over the rows: the kernel
//    sums them in double (γ_{n+4} in double units) from float D, L̂, c (their bounds above) and,
//    for dγ, a float g·v (γ_Dh) and ‖v‖ (γ_Dh/2), then rounds to float and adds to the float
//    already there: 2u·(magnitude + |initial value|).
// Higher order. The terms above are first order: they drop products of two or more relative
// errors. Each relative factor (η_j, H, |δL|, π_j, the γ of a sum) stays below kMaxRelative
// (checked; the peaked rows come closest, about 2e-3), and at most eight of them (and a few u)
// compound from the inputs to any output, forward and backward. Since Π(1 + r) − 1 <= Σr·Π(1 + r),
// the exact error is at most the first-order one times e^{8·kMaxRelative} = e^{0.04} < 1.05: the
// bounds are multiplied by kHigherOrder.
// Floor. Two errors are absolute, not relative: weights below e^−87.33 ≈ 1.2e-38 of the row's
// largest are flushed to zero (the vector exp, by design; so are rescale factors, whose weights are
// then as small), and results below 2^-126 round with an absolute error of up to 2^-150. They move
// an output by at most (terms < 10^4) × 1.2e-38 × (the largest product of the other factors, < 10^5
// here), about 1e-29. kBoundFloor = 1e-24 covers that with room and stays far below the bound of
// any output that is not exactly zero (a masked key's dk, dv: zero on both sides).
constexpr double kUnitRoundoffFloat = 0x1p-24;
constexpr double kMaxRelative = 5e-3;
constexpr double kHigherOrder = 1.05;
constexpr double kBoundFloor = 1e-24;

double gamma_float(double n) { return n * kUnitRoundoffFloat / (1 - n * kUnitRoundoffFloat); }
double gamma_double(double n) {
  return n * attnlab::test::kUnitRoundoff / (1 - n * attnlab::test::kUnitRoundoff);
}

// Worst |fast − reference| / bound of each quantity over the whole run, printed at the end: how
// much room the bounds leave on this machine.
std::map<std::string, double>& worst_ratios() {
  static std::map<std::string, double> worst;
  return worst;
}
double worst_relative_factor = 0;  // the largest relative error factor met (see kMaxRelative)

void check_relative_factor(double worst) {
  EXPECT_LT(worst, kMaxRelative) << "a relative error factor too large for the first-order error bounds";
  worst_relative_factor = std::max(worst_relative_factor, worst);
}

void KernelSetEnvironment::TearDown() {
  if (worst_ratios().empty()) return;
  std::printf("worst |fast − reference| / error bound:");
  for (const auto& [what, ratio] : worst_ratios()) std::printf(" %s %.3g;", what.c_str(), ratio);
  std::printf(" largest relative error factor %.3g (limit %.3g)\n", worst_relative_factor, kMaxRelative);
}

// Where the bounds go, in the layouts of the kernels' outputs (out: out_stride; lse and xsa_c:
// [B, H, Tq]; dq, dk, dv: the layouts and strides of q, k, v; dsink, dslope, dgamma: [H]). A null
// pointer skips that output; the gradients need dout.
struct BoundTargets {
  double *out = nullptr, *lse = nullptr, *xsa_c = nullptr;
  double *dq = nullptr, *dk = nullptr, *dv = nullptr;
  double *dsink = nullptr, *dslope = nullptr, *dgamma = nullptr;
  double added_to = 0;  // largest |initial value| of dsink, dslope, dgamma (the kernel adds to them)
};

// Fills the bounds of the derivation above for one forward (and, given dout, backward) of the fast
// float kernels of a set with this tile. Returns the largest relative error factor met, which the
// higher-order argument needs below kMaxRelative. Recomputes everything in double from the inputs,
// row by row like the naive reference, carrying each quantity's magnitude and error bound along.
double attention_error_bounds(const BoundTargets& o, const float* dout, const float* q, const float* k,
                              const float* v, const float* sink, float scale_f, const AttentionShape& s,
                              const AttentionExtras<float>& x, int tile) {
  const int G = s.H / s.Hkv, Dh = s.Dh;
  const double u = kUnitRoundoffFloat, E = kExpError, K = kHigherOrder, scale = scale_f, gdh = gamma_float(Dh);
  double worst = 0;
  std::vector<double> logit(s.Tk), lambda(s.Tk), eta(s.Tk), p(s.Tk);
  std::vector<double> y(Dh), by(Dh), z(Dh), bz(Dh), g(Dh), dy(Dh), bdy(Dh), dq_err(Dh), dq_mag(Dh);
  std::vector<double> dk_err(size_t(s.Tk) * Dh), dk_mag(dk_err.size()), dv_err(dk_err.size()), dv_mag(dk_err.size());
  std::vector<int> terms(s.Tk);
  std::vector<double> sink_err(s.H), sink_mag(s.H), slope_err(s.H), slope_mag(s.H), gamma_err(s.H), gamma_mag(s.H);
  for (int b = 0; b < s.B; ++b)
    for (int kappa = 0; kappa < s.Hkv; ++kappa) {
      std::fill(dk_err.begin(), dk_err.end(), 0.0), std::fill(dk_mag.begin(), dk_mag.end(), 0.0);
      std::fill(dv_err.begin(), dv_err.end(), 0.0), std::fill(dv_mag.begin(), dv_mag.end(), 0.0);
      std::fill(terms.begin(), terms.end(), 0);
      const float* kb = k + b * s.kv_batch_stride + kappa * Dh;
      const float* vb = v + b * s.kv_batch_stride + kappa * Dh;
      for (int h = kappa * G; h < (kappa + 1) * G; ++h)
        for (int i = 0; i < s.Tq; ++i) {
          const float* qi = q + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
          const float* vi = vb + long(s.pos_offset + i) * s.kv_stride;  // the row's own value (XSA)
          const int pos = s.pos_offset + i, n = pos + 1, R = (n + tile - 1) / tile;
          const long row = (long(b) * s.H + h) * s.Tq + i, out_row = (long(b) * s.Tq + i) * s.out_stride + h * Dh;
          // Logits, their bounds λ, the probabilities.
          const double slope_t = x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0;
          const double s_logit = sink ? double(sink[h]) + slope_t : -INFINITY;
          const double lambda_s = sink ? gamma_float(2) * (std::abs(double(sink[h])) + std::abs(slope_t)) : 0.0;
          double m = s_logit;
          for (int j = 0; j <= pos; ++j) {
            double dot = 0, mag = 0;
            for (int d = 0; d < Dh; ++d) {
              const double t = double(qi[d]) * double(kb[long(j) * s.kv_stride + d]);
              dot += t, mag += std::abs(t);
            }
            const double bias = x.alibi_slopes ? double(x.alibi_slopes[h]) * (pos - j) : 0.0;
            logit[j] = dot * scale - bias;
            lambda[j] = gamma_float(Dh + 3) * (scale * mag + std::abs(bias));
            m = std::max(m, logit[j]);
          }
          double Z = sink ? std::exp(s_logit - m) : 0.0;
          for (int j = 0; j <= pos; ++j) Z += (p[j] = std::exp(logit[j] - m));
          for (int j = 0; j <= pos; ++j) p[j] /= Z;
          const double ps = sink ? std::exp(s_logit - m) / Z : 0.0, L = m + std::log(Z);
          // The weights' relative errors η and the normaliser's share H.
          double H = sink ? ps * (lambda_s + u * (m - s_logit) + R * E) : 0.0;
          for (int j = 0; j <= pos; ++j) {
            eta[j] = lambda[j] + u * (m - logit[j]) + (1 + R) * E;
            H += p[j] * eta[j];
            worst = std::max(worst, eta[j]);
          }
          const double N = n + 1 + R;
          for (int d = 0; d < Dh; ++d) {
            double sum = 0, mag = 0, err = 0;
            for (int j = 0; j <= pos; ++j) {
              const double vj = double(vb[long(j) * s.kv_stride + d]);
              sum += p[j] * vj, mag += p[j] * std::abs(vj), err += p[j] * std::abs(vj) * eta[j];
            }
            y[d] = sum;
            by[d] = err + (H + 2 * gamma_float(N + 1)) * mag;
          }
          const double dL = H + gamma_float(N) + 2 * u * (L - m) + u * std::abs(L);
          worst = std::max({worst, H, dL, gamma_float(N + 1)});
          // XSA's projection of the own value.
          double c = 0, dc = 0, nrm = 1, nu = 0, gh = 0;
          if (x.xsa_gamma) {
            double n2 = 0, cdot = 0, cmag = 0, cin = 0;
            for (int d = 0; d < Dh; ++d) {
              const double vd = double(vi[d]);
              n2 += vd * vd, cdot += y[d] * vd, cmag += std::abs(y[d] * vd), cin += by[d] * std::abs(vd);
            }
            nrm = std::sqrt(n2);
            if (!(nrm > 1e-3)) ADD_FAILURE() << "error bounds: a value norm near XSA's floor is not modelled";
            nu = gdh / 2 + u, gh = double(x.xsa_gamma[h]);
            c = cdot / nrm;
            dc = (cin + (gdh + nu + u) * cmag) / nrm;
            const double coef = gh * c / nrm, dcoef = std::abs(gh) * (dc + std::abs(c) * (nu + 2 * u)) / nrm;
            for (int d = 0; d < Dh; ++d) {
              const double vd = double(vi[d]);
              z[d] = y[d] - coef * vd;
              bz[d] = by[d] + std::abs(vd) * dcoef + u * (std::abs(coef * vd) + std::abs(z[d]));
            }
          } else {
            z = y, bz = by;
          }
          if (o.out)
            for (int d = 0; d < Dh; ++d) o.out[out_row + d] = K * bz[d];
          if (o.lse) o.lse[row] = K * dL;
          if (o.xsa_c && x.xsa_gamma) o.xsa_c[row] = K * dc;
          if (!dout) continue;

          // Backward: D, dy, then every key the row sees.
          const float* gi = dout + out_row;
          double D = 0, Dmag = 0, Din = 0;
          for (int d = 0; d < Dh; ++d) {
            g[d] = double(gi[d]);
            D += g[d] * z[d], Dmag += std::abs(g[d] * z[d]), Din += std::abs(g[d]) * bz[d];
          }
          const double dD = gdh * Dmag + Din;
          double gv_dot = 0, gv_mag = 0;  // g·v and Σ|g_d v_d| (XSA)
          if (x.xsa_gamma) {
            for (int d = 0; d < Dh; ++d) gv_dot += g[d] * double(vi[d]), gv_mag += std::abs(g[d] * double(vi[d]));
            const double coef = gh * gv_dot / (nrm * nrm);
            const double dcoef = std::abs(gh) * (gdh * gv_mag + std::abs(gv_dot) * (2 * nu + 3 * u)) / (nrm * nrm);
            for (int d = 0; d < Dh; ++d) {
              const double vd = double(vi[d]);
              dy[d] = g[d] - coef * vd;
              bdy[d] = std::abs(vd) * dcoef + u * (std::abs(coef * vd) + std::abs(dy[d]));
            }
          } else {
            dy = g;
            std::fill(bdy.begin(), bdy.end(), 0.0);
          }
          std::fill(dq_err.begin(), dq_err.end(), 0.0), std::fill(dq_mag.begin(), dq_mag.end(), 0.0);
          for (int j = 0; j <= pos; ++j) {
            const float* kj = kb + long(j) * s.kv_stride;
            const float* vj = vb + long(j) * s.kv_stride;
            double dP = 0, dP_mag = 0, dP_in = 0;
            for (int d = 0; d < Dh; ++d) {
              const double vd = double(vj[d]);
              dP += dy[d] * vd, dP_mag += std::abs(dy[d] * vd), dP_in += bdy[d] * std::abs(vd);
            }
            const double Gj = dP - D, dG = gdh * dP_mag + dP_in + dD + u * std::abs(Gj);
            const double pi = lambda[j] + dL + u * std::abs(logit[j] - L) + E;
            worst = std::max(worst, pi);
            const double dS = scale * p[j] * Gj, dS_err = scale * p[j] * (std::abs(Gj) * (pi + 2 * u) + dG);
            double* dk_e = &dk_err[size_t(j) * Dh];
            double* dk_m = &dk_mag[size_t(j) * Dh];
            double* dv_e = &dv_err[size_t(j) * Dh];
            double* dv_m = &dv_mag[size_t(j) * Dh];
            for (int d = 0; d < Dh; ++d) {
              const double kd = std::abs(double(kj[d])), qd = std::abs(double(qi[d]));
              dq_err[d] += dS_err * kd, dq_mag[d] += std::abs(dS) * kd;
              dk_e[d] += dS_err * qd, dk_m[d] += std::abs(dS) * qd;
              dv_e[d] += p[j] * (pi * std::abs(dy[d]) + bdy[d]), dv_m[d] += p[j] * std::abs(dy[d]);
            }
            ++terms[j];
          }
          if (o.dq) {
            double* dst = o.dq + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
            for (int d = 0; d < Dh; ++d) dst[d] = K * (dq_err[d] + gamma_float(n + 1) * dq_mag[d]);
          }
          if (x.xsa_gamma) {
            // The own-value term of dv (§2.2) as the kernel forms it, a·(c·g + gv·z) + bv·v with
            // a = −γ/‖v‖, gv = g·v/‖v‖, bv = −γ(γ − 2)·c·gv/‖v‖²: at most 8 roundings and 2 norms per
            // piece, plus the errors of c, gv and the float z.
            const double gv = gv_dot / nrm, dgv = gdh * gv_mag / nrm + std::abs(gv) * (nu + u);
            const double a = std::abs(gh) / nrm, b2 = std::abs(gh * (gh - 2)) / (nrm * nrm);
            double* dv_e = &dv_err[size_t(pos) * Dh];
            double* dv_m = &dv_mag[size_t(pos) * Dh];
            for (int d = 0; d < Dh; ++d) {
              const double vd = std::abs(double(vi[d]));
              const double mag = a * (std::abs(c * g[d]) + std::abs(gv * z[d])) + b2 * std::abs(c * gv) * vd;
              dv_m[d] += mag;
              dv_e[d] += (gamma_float(8) + 2 * nu) * mag +
                         a * (dc * std::abs(g[d]) + dgv * std::abs(z[d]) + std::abs(gv) * bz[d]) +
                         b2 * (dc * std::abs(gv) + std::abs(c) * dgv) * vd;
            }
            ++terms[pos];
            gamma_mag[h] += std::abs(c * gv);
            gamma_err[h] += dc * std::abs(gv) + std::abs(c) * (gdh * gv_mag / nrm + std::abs(gv) * gdh / 2);
          }
          if (sink) {  // −p_s·D (·t_i) from the float L̂ and D̂
            const double mag = ps * std::abs(D), err = ps * (std::abs(D) * dL + dD);
            sink_mag[h] += mag, sink_err[h] += err;
            slope_mag[h] += mag * pos, slope_err[h] += err * pos;
          }
        }
      if (!dout) continue;
      // dk, dv of this (b, kv head): sums of terms[j] products (+ XSA's own terms).
      for (int j = 0; j < s.Tk; ++j)
        for (int d = 0; d < Dh; ++d) {
          const size_t e = size_t(j) * Dh + d;
          const long at = b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * Dh + d;
          if (o.dk) o.dk[at] = K * (dk_err[e] + gamma_float(terms[j] + 1) * dk_mag[e]);
          if (o.dv) o.dv[at] = K * (dv_err[e] + gamma_float(terms[j] + 1) * dv_mag[e]);
        }
    }
  if (dout) {
    // Summed in double over B·Tq rows, rounded to float, added to the float already there.
    auto reduced = [&](double err, double mag) {
      return K * (err + gamma_double(s.B * s.Tq + 4) * mag + 2 * u * (mag + o.added_to));
    };
    for (int h = 0; h < s.H; ++h) {
      if (o.dsink) o.dsink[h] = reduced(sink_err[h], sink_mag[h]);
      if (o.dslope) o.dslope[h] = reduced(slope_err[h], slope_mag[h]);
      if (o.dgamma) o.dgamma[h] = reduced(gamma_err[h], gamma_mag[h]);
    }
  }
  return worst;
}

// The bounds of run(Impl::Fast, p, dout) in a Result of the same layout (dqkv: the packed buffer's).
Result<double> error_bounds(Packed<float>& p, const std::vector<float>* dout) {
  const Problem& c = p.c;
  Result<double> r;
  r.out.assign(p.out_size(), 0.0);
  r.lse.assign(size_t(c.B) * c.H * c.T, 0.0);
  r.xsa_c.assign(p.xsa_c.size(), 0.0);
  r.dqkv.assign(p.qkv.size(), 0.0);
  r.dsink.assign(c.H, 0.0), r.dslope.assign(c.H, 0.0), r.dgamma.assign(c.H, 0.0);
  BoundTargets o{r.out.data(), r.lse.data(), r.xsa_c.empty() ? nullptr : r.xsa_c.data()};
  if (dout) {
    o.dq = r.dqkv.data(), o.dk = o.dq + c.H * c.Dh, o.dv = o.dq + (c.H + c.Hkv) * c.Dh;
    o.dsink = r.dsink.data(), o.dslope = r.dslope.data(), o.dgamma = r.dgamma.data();
    o.added_to = 0.5;  // run() starts dsink, dslope, dgamma at 0.5, 0.25, −0.5
  }
  const double worst = attention_error_bounds(o, dout ? dout->data() : nullptr, p.q(), p.k(), p.v(), p.sink_ptr(),
                                              p.scale(), p.s, p.extras(), attnlab::kernels::attention_kernels().tile);
  check_relative_factor(worst);
  return r;
}

// Every element within its bound (times `factor`: 2 when both sides are float kernels, each within
// its bound of the exact result).
template <class A, class R, class B>
void expect_within(const A& fast, const R& ref, const B& bound, const std::string& what, double factor = 1) {
  const double ratio = attnlab::test::expect_within_bound(fast, ref, bound, kBoundFloor, what, factor);
  double& worst = worst_ratios()[what];
  worst = std::max(worst, ratio);
}

// ----- fast vs naive --------------------------------------------------------------------------

void expect_fast_matches_naive_float(const Problem& c) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " T=" << c.T << " H=" << c.H << " Hkv=" << c.Hkv << " Dh=" << c.Dh
                                  << " sink=" << c.sink << " alibi=" << c.alibi << " pad=" << c.pad
                                  << " xsa=" << int(c.xsa) << " sink_slope=" << c.sink_slope << " split=" << c.split);
  Packed<float> p(c);
  const auto dout = random_vec<float>(p.out_size(), c.seed + 7);
  const auto fast = run(Impl::Fast, p, &dout);
  Packed<double> exact_problem = as_double(p);
  const auto dout_exact = as_double(dout);
  const auto exact = run(Impl::Naive, exact_problem, &dout_exact);
  const auto bound = error_bounds(p, &dout);
  expect_within(fast.out, exact.out, bound.out, "out");
  expect_within(fast.lse, exact.lse, bound.lse, "lse");
  const auto dqkv = without_padding(fast.dqkv, p);
  const auto exact_dqkv = without_padding(exact.dqkv, exact_problem);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part)
    expect_within(qkv_part(dqkv, c, p.s, part), qkv_part(exact_dqkv, c, p.s, part), qkv_part(bound.dqkv, c, p.s, part),
                  names[part]);
  if (c.sink) {
    expect_within(fast.dsink, exact.dsink, bound.dsink, "dsink");
  }
  if (c.sink_slope) {
    expect_within(fast.dslope, exact.dslope, bound.dslope, "dsink_slope");
  }
  if (c.xsa != Problem::Off) {
    expect_within(fast.xsa_c, exact.xsa_c, bound.xsa_c, "xsa c");
    expect_within(fast.dgamma, exact.dgamma, bound.dgamma, "dgamma");
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
  // Logits of several hundred: the online softmax rescales by factors that underflow to zero, and
  // the logits' rounding (their bound λ grows with them) dominates every other error.
  Problem c{1, 150, 2, 2, 64, true, false};
  c.q_scale = 30;
  expect_fast_matches_naive_float(c);
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
  // 8 pairs: no chunks, only a pack per thread (Q, dO, dQ rows of G = 2 heads, Dh = 64 whole vectors).
  EXPECT_EQ(attnlab::kernels::attention_backward_scratch_size<float>(attnlab::kernels::packed_attention_shape(4, 256, 4, 2, 64)),
            size_t(omp_get_max_threads()) * 3 * 2 * 256 * 64);
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

TEST(Attention, FastMatchesNaiveFloatSplitBackwardAllExtrasT101) {
  // Every extra at once (sink, GOAT's slope, ALiBi, gated XSA, GQA 2, padding) over 101 tokens,
  // split backward. dsink_slope = Σ_i −p_s·D_i·t_i cancels to far below the size of its terms: a
  // fixed tolerance relative to the value (5e-6) failed here (5.2e-6, part of it the float
  // reference's own rounding); the error bound follows the size of the terms instead.
  expect_fast_matches_naive_float(split(with({1, 101, 4, 2, 40, true, true, 2}, Problem::Gated, true)));
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
    // Both are float kernels, each within its bound of the exact result: twice the bound apart.
    const auto bound = error_bounds(whole, &dout);
    expect_within(qkv_part(two.dqkv, c, p.s, 1), qkv_part(unsplit.dqkv, c, p.s, 1), qkv_part(bound.dqkv, c, p.s, 1),
                  "dk split vs unsplit", 2);
    expect_within(qkv_part(two.dqkv, c, p.s, 2), qkv_part(unsplit.dqkv, c, p.s, 2), qkv_part(bound.dqkv, c, p.s, 2),
                  "dv split vs unsplit", 2);
    // dQ keeps its order over key tiles: the same bits as the unsplit kernel.
    for (int t = 0; t < c.T; ++t)
      for (int d = 0; d < c.H * c.Dh; ++d)
        ASSERT_EQ(two.dqkv[size_t(t) * p.s.q_stride + d], unsplit.dqkv[size_t(t) * p.s.q_stride + d]) << t;
  }
}

TEST(Attention, PackedQueryRowsGiveTheSameBits) {
  // With 8 or more (b, kv head) pairs the scratch holds only the packs: each task's Q and dO rows
  // (dy under XSA) copied once, dQ summed there and written at the end. The arithmetic and its
  // order are those of the backward without scratch, so every gradient has the same bits, for one
  // thread and for two (each thread its own pack).
  for (const Problem& c : {Problem{4, 130, 4, 2, 24, true, true, 3}, with({2, 77, 8, 4, 40, true}, Problem::Gated, true),
                           with({8, 45, 2, 1, 64}, Problem::On)}) {
    ASSERT_GE(c.B * c.Hkv, attnlab::kernels::kAttentionBackwardTasks);
    Packed<float> packed(split(c));
    Packed<float> plain(c);
    const auto dout = random_vec<float>(packed.out_size(), 9);
    const int threads = omp_get_max_threads();
    const auto reference = run(Impl::Fast, plain, &dout);
    for (int n : {1, std::max(2, threads)}) {
      omp_set_num_threads(n);
      const auto r = run(Impl::Fast, packed, &dout);
      EXPECT_EQ(max_abs_diff(r.dqkv, reference.dqkv), 0.0) << n << " threads";
      EXPECT_EQ(max_abs_diff(r.dsink, reference.dsink), 0.0);
      EXPECT_EQ(max_abs_diff(r.dslope, reference.dslope), 0.0);
      EXPECT_EQ(max_abs_diff(r.dgamma, reference.dgamma), 0.0);
    }
    // The packs were used, not the copies per key tile: the first thread's pack holds the task's
    // Q rows afterwards (the first row of the last task it ran is one of the q rows of the shape).
    omp_set_num_threads(1);
    std::vector<float> scratch(attnlab::kernels::attention_backward_scratch_size<float>(packed.s),
                               std::numeric_limits<float>::quiet_NaN());
    std::vector<float> dqkv(packed.qkv.size(), 0.0f), dsink(c.H, 0.0f), dslope(c.H, 0.0f), dgamma(c.H, 0.0f);
    const Result<float> fwd = run(Impl::Fast, packed, static_cast<const std::vector<float>*>(nullptr));
    attnlab::kernels::attention_backward(dqkv.data(), dqkv.data() + c.H * c.Dh, dqkv.data() + (c.H + c.Hkv) * c.Dh,
                                         packed.sink.empty() ? nullptr : dsink.data(), dout.data(), fwd.out.data(),
                                         fwd.lse.data(), packed.q(), packed.k(), packed.v(), packed.sink_ptr(),
                                         packed.scale(), packed.s, packed.extras(dslope.data(), dgamma.data()),
                                         scratch.data(), scratch.size());
    omp_set_num_threads(threads);
    EXPECT_FALSE(std::isnan(scratch[0])) << "the backward did not use the pack";
    bool is_a_q_row = false;
    for (int t = 0; t < c.B * c.T && !is_a_q_row; ++t)
      for (int h = 0; h < c.H && !is_a_q_row; ++h)
        is_a_q_row = std::equal(scratch.begin(), scratch.begin() + c.Dh, packed.q() + t * packed.s.q_stride + h * c.Dh);
    EXPECT_TRUE(is_a_q_row) << "the pack does not start with a row of Q";
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
  // Both are float kernels, each within its error bound of the exact result (the bound of a row
  // does not depend on how the queries are grouped into calls): twice the bound apart.
  const auto bound = error_bounds(p, nullptr);
  expect_within(out, one_shot.out, bound.out, "out chunks vs one shot", 2);
  expect_within(lse, one_shot.lse, bound.lse, "lse chunks vs one shot", 2);
}

void expect_kv_chunk_matches_naive(int Tq, int Tk, int off, bool split = false) {
  // Forward and backward of a chunk (Tq < Tk, pos_offset > 0, batch stride = cache capacity) in
  // float, against the naive reference in double on the same values, within the error bounds.
  SCOPED_TRACE(testing::Message() << "Tq=" << Tq << " Tk=" << Tk << " pos_offset=" << off << " split=" << split);
  const int B = 2, H = 4, Hkv = 1, Dh = 64, capacity = 200;
  const int kv_stride = 2 * Hkv * Dh;
  AttentionShape s{B, Tq, Tk, H, Hkv, Dh, H * Dh, long(Tq) * H * Dh, kv_stride, long(capacity) * kv_stride, H * Dh, off};
  const auto q = random_vec<float>(size_t(B) * Tq * H * Dh, 11);
  const auto cache = random_vec<float>(size_t(B) * capacity * kv_stride, 12);
  const auto sink = random_vec<float>(H, 13);
  const auto dout = random_vec<float>(size_t(B) * Tq * H * Dh, 14);
  const float scale = 0.125f;
  Result<float> fast;
  Result<double> exact, bound;
  auto prepare = [&](auto& r) {
    r.out.assign(dout.size(), 0);
    r.lse.assign(size_t(B) * H * Tq, 0);
    r.dqkv.assign(q.size() + cache.size(), kSentinel);  // dq, then the cache's dk/dv
    r.dsink.assign(H, 0);
  };
  prepare(fast), prepare(exact), prepare(bound);
  std::fill(bound.dqkv.begin(), bound.dqkv.end(), 0.0);
  forward(Impl::Fast, fast.out.data(), fast.lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh, sink.data(),
          scale, s, {});
  float* dcache = fast.dqkv.data() + q.size();
  backward(Impl::Fast, fast.dqkv.data(), dcache, dcache + Hkv * Dh, fast.dsink.data(), dout.data(), fast.out.data(),
           fast.lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh, sink.data(), scale, s, {}, split);
  const auto qd = as_double(q), cached = as_double(cache), sinkd = as_double(sink), doutd = as_double(dout);
  forward(Impl::Naive, exact.out.data(), exact.lse.data(), qd.data(), cached.data(), cached.data() + Hkv * Dh,
          sinkd.data(), double(scale), s, {});
  double* dcache_exact = exact.dqkv.data() + q.size();
  backward(Impl::Naive, exact.dqkv.data(), dcache_exact, dcache_exact + Hkv * Dh, exact.dsink.data(), doutd.data(),
           exact.out.data(), exact.lse.data(), qd.data(), cached.data(), cached.data() + Hkv * Dh, sinkd.data(),
           double(scale), s, {});
  double* dcache_bound = bound.dqkv.data() + q.size();
  const double worst = attention_error_bounds(
      BoundTargets{bound.out.data(), bound.lse.data(), nullptr, bound.dqkv.data(), dcache_bound,
                   dcache_bound + Hkv * Dh, bound.dsink.data()},
      dout.data(), q.data(), cache.data(), cache.data() + Hkv * Dh, sink.data(), scale, s, {},
      attnlab::kernels::attention_kernels().tile);
  check_relative_factor(worst);
  expect_within(fast.out, exact.out, bound.out, "out");
  expect_within(fast.lse, exact.lse, bound.lse, "lse");
  expect_within(fast.dsink, exact.dsink, bound.dsink, "dsink");
  // dq, then dk and dv of the cache slots < Tk; the slots >= Tk must keep the sentinel.
  for (int j = Tk; j < capacity; ++j)
    for (int b = 0; b < B; ++b)
      for (int d = 0; d < kv_stride; ++d)
        ASSERT_EQ(fast.dqkv[q.size() + (size_t(b) * capacity + j) * kv_stride + d], float(kSentinel))
            << "backward wrote cache slot " << j << " >= Tk";
  auto part = [&](const auto& dqkv, int which) {  // 0: dq, 1: dk, 2: dv
    using T = typename std::decay_t<decltype(dqkv)>::value_type;
    if (which == 0) return std::vector<T>(dqkv.begin(), dqkv.begin() + q.size());
    std::vector<T> r;
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < Tk; ++j) {
        const auto slot = dqkv.begin() + q.size() + (size_t(b) * capacity + j) * kv_stride + (which - 1) * Hkv * Dh;
        r.insert(r.end(), slot, slot + Hkv * Dh);
      }
    return r;
  };
  const char* names[3] = {"dq", "dk", "dv"};
  for (int which = 0; which < 3; ++which)
    expect_within(part(fast.dqkv, which), part(exact.dqkv, which), part(bound.dqkv, which), names[which]);
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
// model can pass: GQA, a sink with GOAT's slope, ALiBi, XSA (gated: γ ≠ 1), odd head sizes (vector
// tails), and positions on both sides of the kernel's 128-key blocks and of its four-key passes. The reference runs in double on
// the same values; the float step must stay within the error bounds of expect_fast_matches_naive_float.
TEST(Attention, DecodeStepMatchesNaive) {
  const int B = 2, H = 4, Hkv = 2, capacity = 400;
  for (int Dh : {36, 40, 64})  // 36: a vector tail with 8 lanes, 40: with 16
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
        // The float step, its bounds and the double reference, with the same extras.
        Result<float> fast;
        Result<double> exact, bound;
        fast.out.assign(size_t(B) * H * Dh, 0.f), fast.lse.assign(size_t(B) * H, 0.f);
        fast.xsa_c.assign(size_t(B) * H, 0.f);
        exact.out.assign(size_t(B) * H * Dh, 0.0), exact.lse.assign(size_t(B) * H, 0.0);
        exact.xsa_c.assign(size_t(B) * H, 0.0);
        bound = exact;
        // The same extras for the float step and the double reference.
        auto extras_of = [&]<class T>(const std::vector<T>& al, const std::vector<T>& sl, const std::vector<T>& ga,
                                      std::vector<T>& c) {
          AttentionExtras<T> e;
          if (with_alibi) e.alibi_slopes = al.data();
          if (with_sink) e.sink_slope = sl.data();
          if (with_xsa) e.xsa_gamma = ga.data(), e.xsa_c = c.data();
          return e;
        };
        const AttentionExtras<float> x = extras_of(alibi, slope, gamma, fast.xsa_c);
        forward(Impl::Fast, fast.out.data(), fast.lse.data(), q.data(), cache.data(), cache.data() + Hkv * Dh,
                with_sink ? sink.data() : nullptr, 0.125f, s, x);
        const auto qd = as_double(q), cached = as_double(cache), sinkd = as_double(sink), alibid = as_double(alibi),
                   sloped = as_double(slope), gammad = as_double(gamma);
        const AttentionExtras<double> xd = extras_of(alibid, sloped, gammad, exact.xsa_c);
        forward(Impl::Naive, exact.out.data(), exact.lse.data(), qd.data(), cached.data(), cached.data() + Hkv * Dh,
                with_sink ? sinkd.data() : nullptr, 0.125, s, xd);
        const double worst = attention_error_bounds(
            BoundTargets{bound.out.data(), bound.lse.data(), bound.xsa_c.data()}, nullptr, q.data(), cache.data(),
            cache.data() + Hkv * Dh, with_sink ? sink.data() : nullptr, 0.125f, s, x,
            attnlab::kernels::attention_kernels().tile);
        check_relative_factor(worst);
        expect_within(fast.out, exact.out, bound.out, "out");
        expect_within(fast.lse, exact.lse, bound.lse, "lse");
        if (with_xsa) expect_within(fast.xsa_c, exact.xsa_c, bound.xsa_c, "xsa c");
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
