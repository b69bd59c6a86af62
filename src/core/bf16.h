// attnlab core: bfloat16 storage. A bf16 value is the upper 16 bits of a float (sign, the same 8
// exponent bits, 7 mantissa bits): the same range as float, 8 significant bits. attnlab computes
// in float and keeps bf16 only as a storage format for the operands of bf16 matrix products
// (train.precision = bf16, docs/performance.md "bf16"): products of two bf16 values are exact in
// float, so such a product is a float dot product of rounded inputs.
//
// Rounding float -> bf16 is to nearest, ties to even (each conversion's relative error is at most
// 2^-8 = u_bf16); NaN stays NaN (quiet), ±inf stays ±inf; finite values above the largest bf16
// round to ±inf as IEEE rounding does. bf16 -> float is exact.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace attnlab {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

inline constexpr float kBf16Unit = 1.0f / 256;  // unit roundoff of bf16: 2^-8

inline uint16_t bf16_bits_from_float_bits(uint32_t u) {
  // NaN: keep the sign and the top of the payload, force quiet.
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  // Round to nearest even: add 0x7fff plus the lowest kept bit; a carry into the exponent is the
  // right result (including overflow to inf).
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return bf16{bf16_bits_from_float_bits(u)};
}

inline float to_float(bf16 h) {
  const uint32_t u = uint32_t(h.bits) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// p[j] as Real: float and double as stored, bf16 widened (exact: a bf16 is the upper half of a
// float's bits). Vectorizes inside `omp simd` loops, for kernels that read float or bf16 operands.
template <class Real, class Src>
inline Real value_as(const Src* p, size_t j) {
  if constexpr (std::is_same_v<Src, bf16>) return Real(std::bit_cast<float>(uint32_t(p[j].bits) << 16));
  else return Real(p[j]);
}

// Reading bf16 operands at memory speed: a pair of bf16 values (p[2i], p[2i+1]) loaded as one 32-bit
// word (little-endian: p[2i] in the low half) gives both as exact floats with an integer shift and
// an and, where widening 16 bf16 values to 16 floats takes a shuffle per vector (with widening
// loads the decode's LM head took about as long on bf16 as on float weights, docs/performance.md
// "bf16 weights").
// A kernel using it sees the even-indexed and the odd-indexed values of a row as two streams.
using bf16_pair = uint32_t __attribute__((may_alias, aligned(2)));
inline float bf16_even(uint32_t word) { return std::bit_cast<float>(word << 16); }
inline float bf16_odd(uint32_t word) { return std::bit_cast<float>(word & 0xffff0000u); }
inline const bf16_pair* bf16_pairs(const bf16* p) { return reinterpret_cast<const bf16_pair*>(p); }

// dst[i] = to_bf16(src[i]), i < n (vectorized: integer operations only; one thread — callers
// parallelize over rows).
inline void to_bf16(bf16* __restrict dst, const float* __restrict src, size_t n) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = s[i];
    const uint16_t rounded = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    const uint16_t nan = uint16_t((u >> 16) | 0x40u);
    d[i] = (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
  }
}

// Rows: dst (rows, cols) with leading dimension ldd from src (rows, cols) with lds, threads over rows.
void to_bf16_rows(bf16* dst, size_t ldd, const float* src, size_t lds, int rows, int cols);

inline void to_float(float* __restrict dst, const bf16* __restrict src, size_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
#pragma omp simd
  for (size_t i = 0; i < n; ++i) d[i] = uint32_t(s[i]) << 16;
}

// y[0..n) = f(0), ..., f(n−1) stored as Out. For float or double Out the values are written as
// they are; for bf16 they are computed into a float tile on the stack (in L1) and rounded from there,
// the bits to_bf16 gives for the same float values, without a float copy of the row in memory. One
// thread; inside a row kernel's own loop over rows.
// (GCC 12 reports `tile` as maybe uninitialized where to_bf16 reads it after inlining; every lane it
// reads was written just before.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class Out, class F>
inline void store_row(Out* __restrict y, int n, F&& f) {
  if constexpr (std::is_same_v<Out, bf16>) {
    constexpr int kTile = 256;
    alignas(64) float tile[kTile];
    for (int c0 = 0; c0 < n; c0 += kTile) {
      const int m = std::min(kTile, n - c0);
#pragma omp simd
      for (int c = 0; c < m; ++c) tile[c] = float(f(c0 + c));
      to_bf16(y + c0, tile, size_t(m));
    }
  } else {
#pragma omp simd
    for (int c = 0; c < n; ++c) y[c] = Out(f(c));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace attnlab
