// Rotary position embedding, docs/mechanisms.md §1.2 (attn.pos = rope): the GPT-NeoX / Hugging Face LLaMA
// rotate-half convention, pairing head dims (m, m + D_h/2), θ_m = base^{−2m/D_h}:
//   forward   x′_m = x_m cos(tθ_m) − x_{m+D_h/2} sin(tθ_m);  x′_{m+D_h/2} = x_{m+D_h/2} cos(tθ_m) + x_m sin(tθ_m)
//   backward  the rotation by −tθ:  dx_m = dx′_m cos + dx′_{m+D_h/2} sin;  dx_{m+D_h/2} = −dx′_m sin + dx′_{m+D_h/2} cos
// Applied to q and k (never v), in place, on the packed qkv buffer: the caller points x at the first
// q (or k) head of token (0,0) and gives the row stride of the buffer.
//
// The cos/sin tables are computed in float64 and then rounded (§0 Precision: in fp32 the phase t·θ
// alone loses about 1e-3 rad at t ≈ 16k).
//
// Header-only templates on the scalar type `Real`.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"

namespace attnlab::kernels {

// cos and sin of t·θ_m for t < max_pos, m < half = D_h/2, stored [max_pos][half].
template <class Real>
struct RopeTable {
  int max_pos = 0, half = 0;
  std::vector<Real> cos, sin;
};

// Built once per model (allocation is fine here, not in the step). base is attn.rope.base (10000).
template <class Real>
RopeTable<Real> make_rope_table(int max_pos, int head_dim, double base) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    fail("rope: head dimension ", head_dim, " must be positive and even (§1.2); choose d_model/n_head even");
  if (max_pos < 0) fail("rope: max_pos ", max_pos, " must be non-negative");
  if (!(base > 0)) fail("rope: attn.rope.base = ", base, " must be positive (10000 is the usual value)");
  RopeTable<Real> tab;
  tab.max_pos = max_pos;
  tab.half = head_dim / 2;
  tab.cos.resize((size_t)max_pos * tab.half);
  tab.sin.resize((size_t)max_pos * tab.half);
  for (int m = 0; m < tab.half; ++m) {
    const double theta = std::pow(base, -2.0 * m / head_dim);
    for (int t = 0; t < max_pos; ++t) {
      const double angle = double(t) * theta;
      tab.cos[(size_t)t * tab.half + m] = Real(std::cos(angle));
      tab.sin[(size_t)t * tab.half + m] = Real(std::sin(angle));
    }
  }
  return tab;
}

namespace detail {
// Checks shared by rope_forward and rope_backward, before any thread starts (fail throws).
template <class Real>
void rope_check(const RopeTable<Real>& tab, int T, int head_dim, int pos_offset) {
  if (head_dim != 2 * tab.half)
    fail("rope: head dimension ", head_dim, " does not match the table (built for ", 2 * tab.half, ")");
  if (pos_offset < 0 || (long long)pos_offset + T > tab.max_pos)
    fail("rope: positions ", pos_offset, "..", (long long)pos_offset + T - 1, " are beyond the table (", tab.max_pos,
         " positions); build the table with a larger max_pos or shorten the context");
}

// Rotates every head of every (b,t) row by sign·(pos_offset+t)·θ: sign = +1 forward, −1 backward.
template <class Real>
void rope_rotate(Real* x, const RopeTable<Real>& tab, int B, int T, int n_heads, int head_dim, int row_stride,
                 int pos_offset, Real sign) {
  rope_check(tab, T, head_dim, pos_offset);
  const int half = tab.half;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * T * n_heads * head_dim >= kParallelMinElements)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const Real* cs = tab.cos.data() + (size_t)(pos_offset + t) * half;
      const Real* sn = tab.sin.data() + (size_t)(pos_offset + t) * half;
      Real* row = x + ((size_t)b * T + t) * row_stride;
      for (int h = 0; h < n_heads; ++h) {
        Real* lo = row + (size_t)h * head_dim;
        Real* hi = lo + half;
#pragma omp simd
        for (int m = 0; m < half; ++m) {
          const Real a = lo[m], c = hi[m], s = sign * sn[m];
          lo[m] = a * cs[m] - c * s;
          hi[m] = c * cs[m] + a * s;
        }
      }
    }
}
}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Forward, in place. x: for b < B, t < T, the n_heads heads of head_dim dims starting at
// x + (b·T+t)·row_stride (e.g. row_stride = (H + 2·H_kv)·D_h for the packed qkv buffer) are rotated by
// the angle (pos_offset+t)·θ_m. tab from make_rope_table(≥ pos_offset+T, head_dim, base).
template <class Real>
void rope_forward(Real* x, const RopeTable<Real>& tab, int B, int T, int n_heads, int head_dim, int row_stride,
                  int pos_offset) {
  detail::rope_rotate(x, tab, B, T, n_heads, head_dim, row_stride, pos_offset, Real(1));
}

// Backward, in place on the gradient dx (same layout as x): the rotation is orthogonal, so its
// transpose is the rotation by −tθ (§1.2 Backward). The gradient is overwritten, not accumulated.
template <class Real>
void rope_backward(Real* dx, const RopeTable<Real>& tab, int B, int T, int n_heads, int head_dim, int row_stride,
                   int pos_offset) {
  detail::rope_rotate(dx, tab, B, T, n_heads, head_dim, row_stride, pos_offset, Real(-1));
}

// ---------------------------------------------------------------------------------------------
// Naive reference: the §1.2 forward written literally, serial, with θ and the angle recomputed in
// double for every element (no table). The oracle of test_rope.cpp, including of the table itself.
template <class Real>
void rope_forward_naive(Real* x, double base, int B, int T, int n_heads, int head_dim, int row_stride,
                        int pos_offset) {
  const int half = head_dim / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < n_heads; ++h) {
        Real* v = x + ((size_t)b * T + t) * row_stride + (size_t)h * head_dim;
        for (int m = 0; m < half; ++m) {
          const double angle = double(pos_offset + t) * std::pow(base, -2.0 * m / head_dim);
          const double a = v[m], c = v[m + half];
          v[m] = Real(a * std::cos(angle) - c * std::sin(angle));
          v[m + half] = Real(c * std::cos(angle) + a * std::sin(angle));
        }
      }
}

}  // namespace attnlab::kernels
