// attnlab kernels: the SIMD layer. Simd<T, Target> is one vector of T and the handful of operations
// the kernels need on it, for one place the code is compiled for (Target):
// - SimdBuildTarget, the default (so Simd<T> in namespace attnlab::kernels): the build's own -march,
//   as GCC/Clang vector types (below); the batched Sinkhorn, dots4 (kernels/math.h) and the
//   residual streams use it.
// - a kernel set of the fused attention (kernels/attention.h, "Kernel sets"), whose tag is
//   <set>::KernelSetTarget: float has its set's intrinsics there (AVX-512, AVX2 + FMA, NEON), in
//   kernels/simd_set.inc, compiled inside the set's target region; inside a set's namespace
//   Simd<T> names the set's version.
// - any other pair (double in a kernel set, float in a one-lane set): the portable version, one lane
//   (the primary template).
// Every version has W (lanes), V, Mask, zero, set1, load, store and max. The build-target version's V
// is a vector type with operators (a * b + c), the way its callers write their arithmetic; the
// others name each operation (fmadd, mul, add, sub, exp, reduce_add, masked load and store) so
// that the instruction is the one written, whatever the compiler contracts.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace attnlab::kernels {

// Code compiled for the build's own target (the default of Simd).
struct SimdBuildTarget {};

// The portable version: one lane. In a kernel set, float is sixteen lanes on AVX-512, eight on AVX2
// + FMA and four on NEON (kernels/simd_set.inc). kRegs is the number of vector registers the
// micro-kernel's register blocking may plan for (kernels/attention/tile.h).
template <class T, class Target = SimdBuildTarget>
struct Simd {
  static constexpr int W = 1;
  static constexpr int kRegs = 32;
  using V = T;
  using Mask = unsigned;  // 1 = the lane is live
  static Mask tail_mask(int n) { return n > 0 ? 1u : 0u; }
  static V zero() { return T(0); }
  static V set1(T x) { return x; }
  static V load(const T* p) { return *p; }
  static V load(const T* p, Mask m) { return m ? *p : T(0); }
  static void store(T* p, V x) { *p = x; }
  static void store(T* p, V x, Mask m) { if (m) *p = x; }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V max(V a, V b) { return a > b ? a : b; }
  // exp(−inf) = 0 exactly: masked scores vanish. float results below the smallest normal are
  // flushed to 0 as in the AVX-512 version (denormal operands are slow); double keeps them.
  static V exp(V x) {
    if constexpr (std::is_same_v<T, float>)
      if (!(x >= T(-87.33))) return T(0);
    return std::exp(x);
  }
  static T reduce_add(V x) { return x; }
};

// The build target's version: one SIMD vector of Real as a GCC/Clang vector type, for kernels whose
// loops GCC 12 does not vectorize well from `omp simd` (short fixed-length loops nested in others: it
// produced scalar code or gathers there). W lanes: 32 bytes with AVX, else 16 — the widest width at
// which GCC 12 turns a vector compare into one instruction (wider generic vectors are compared lane
// by lane); on AVX-512 builds a 32-byte vector is half a register, which these small kernels do not
// miss.
#if defined(__AVX__)
inline constexpr int kLaneBytes = 32;
#else
inline constexpr int kLaneBytes = 16;
#endif
template <class Real>
struct Simd<Real, SimdBuildTarget> {
  static constexpr int W = kLaneBytes / (int)sizeof(Real);
  typedef Real V __attribute__((vector_size(kLaneBytes)));
  typedef std::conditional_t<sizeof(Real) == 4, int32_t, int64_t> Mask __attribute__((vector_size(kLaneBytes)));
  static V load(const Real* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(Real* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V zero() { return V{}; }
  static V set1(Real x) { return V{} + x; }
  // std::max(a, b) per lane: b exactly where a < b, as std::max does (so a NaN in a passes through).
  static V max(V a, V b) {
    const Mask take_b = a < b;
    return std::bit_cast<V>((std::bit_cast<Mask>(a) & ~take_b) | (std::bit_cast<Mask>(b) & take_b));
  }
};

}  // namespace attnlab::kernels
