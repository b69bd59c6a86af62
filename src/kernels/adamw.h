// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"), bias-corrected, plus the two
// helpers of global-norm gradient clipping. Which parameters get weight_decay > 0 is the §0 "Weight
// decay [Ours]" policy of docs/mechanisms.md; the caller passes 0 for the others (one call per group).
//
// Header-only templates on the scalar type `Real`. Every loop is elementwise over one contiguous
// buffer (llm.c style: parameters, gradients, m and v are each one buffer), OpenMP + SIMD.
#pragma once
#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// One AdamW step t ≥ 1 (the first step is t = 1) on n parameters, in place on param, m and v:
//   m ← β1·m + (1−β1)·g
//   v ← β2·v + (1−β2)·g²
//   m̂ = m/(1−β1^t),  v̂ = v/(1−β2^t)
//   p ← p − lr·( m̂/(sqrt(v̂)+ε) + wd·p )      with p on the right the value BEFORE this step.
// The decay is decoupled (it does not pass through m and v) and scaled by lr, which equals
// PyTorch's AdamW (p ← p(1−lr·wd), then the Adam step) up to rounding. The bias corrections are
// computed once in double.
// param (n), grad (n), m (n), v (n); m and v start at zero before step 1.
template <class Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t) {
  ATTNLAB_CHECK(t >= 1, "adamw step counts from 1");
  const Real b1 = Real(beta1), b2 = Real(beta2);
  const Real inv_bc1 = Real(1.0 / (1.0 - std::pow(double(beta1), t)));
  const Real inv_bc2 = Real(1.0 / (1.0 - std::pow(double(beta2), t)));
  const Real step = Real(lr), decay = Real(weight_decay), epsilon = Real(eps);
  // Always the full team, even for small n: switching libgomp between team sizes allocates a new
  // team (tests/test_no_alloc.cpp), and the optimizer's undecayed range is small.
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const Real g = grad[i];
    const Real mi = b1 * m[i] + (Real(1) - b1) * g;
    const Real vi = b2 * v[i] + (Real(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const Real p = param[i];
    param[i] = p - step * (mi * inv_bc1 / (std::sqrt(vi * inv_bc2) + epsilon) + decay * p);
  }
}

// Naive reference: the same update, serial, straight from the formulas in double.
template <class Real>
void adamw_update_naive(Real* param, const Real* grad, Real* m, Real* v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int t) {
  for (size_t i = 0; i < n; ++i) {
    const double mi = double(beta1) * m[i] + (1.0 - double(beta1)) * grad[i];
    const double vi = double(beta2) * v[i] + (1.0 - double(beta2)) * double(grad[i]) * grad[i];
    const double m_hat = mi / (1.0 - std::pow(double(beta1), t));
    const double v_hat = vi / (1.0 - std::pow(double(beta2), t));
    const double p = param[i];
    m[i] = Real(mi);
    v[i] = Real(vi);
    param[i] = Real(p - double(lr) * (m_hat / (std::sqrt(v_hat) + double(eps)) + double(weight_decay) * p));
  }
}

// ---------------------------------------------------------------------------------------------
// Σ x_i² over n values (the square of the global L2 norm used for gradient clipping), accumulated in
// double: a float sum over ~1e8 gradients would lose most of its digits.
template <class Real>
double l2_norm_squared(const Real* x, size_t n) {
  double sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum) if (parallel : n >= 16384)
  for (size_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

// x (n) ← s·x (gradient clipping by max_norm/‖g‖).
template <class Real>
void scale_inplace(Real* x, size_t n, Real s) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= 16384)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// True when every one of the n values is finite (no NaN, no ±Inf): the trainer's check that an
// update left the weights usable, and the checkpoint writer's refusal to store NaN weights.
// Counts instead of returning early so that it vectorizes; the caller pays one pass over x.
template <class Real>
bool all_finite(const Real* x, size_t n) {
  size_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (parallel : n >= 16384)
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);
  return bad == 0;
}

}  // namespace attnlab::kernels
