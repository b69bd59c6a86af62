// attnlab kernels, fused attention: the naive references, the oracle of the tests and the plain
// statement of the math (docs/mechanisms.md §1.1, §1.3, §1.2, §2). One softmax row at a time, in
// double, with no tiling and no saved state.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/attention/shape.h"

namespace attnlab::kernels {

// XSA's projection of one row in double (§2.1): z = y − γ c v̂, c = y·v̂; returns c. Also used by
// the naive backward to rebuild z from y.
inline double xsa_project_naive(double* z, const double* y, const double* v, double gamma, int Dh) {
  double n2 = 0;
  for (int d = 0; d < Dh; ++d) n2 += v[d] * v[d];
  const double n = std::max(std::sqrt(n2), kXsaEps);
  double c = 0;
  for (int d = 0; d < Dh; ++d) c += y[d] * v[d] / n;
  for (int d = 0; d < Dh; ++d) z[d] = y[d] - gamma * c * v[d] / n;
  return c;
}

// out (B,Tq,H*Dh) at out_stride; lse (B,H,Tq). q, k, v, sink, x as in attention_forward.
template <class T>
void attention_forward_naive(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                             const AttentionShape& s, const AttentionExtras<T>& x = {}) {
  check_attention_shape(s, "attention_forward_naive");
  const int G = s.H / s.Hkv;
  std::vector<double> logit(s.Tk), acc(s.Dh), vown(s.Dh), z(s.Dh);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.Tq; ++i) {
        const T* qi = q + b * s.q_batch_stride + long(i) * s.q_stride + h * s.Dh;
        const int kappa = h / G, pos = s.pos_offset + i;
        const double sink_logit =
            sink ? double(sink[h]) + (x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0) : -INFINITY;
        double m = sink_logit;
        for (int j = 0; j <= pos; ++j) {
          const T* kj = k + b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * s.Dh;
          double dot = 0;
          for (int d = 0; d < s.Dh; ++d) dot += double(qi[d]) * double(kj[d]);
          logit[j] = dot * double(scale) - (x.alibi_slopes ? double(x.alibi_slopes[h]) * (pos - j) : 0.0);
          m = std::max(m, logit[j]);
        }
        double Z = sink ? std::exp(sink_logit - m) : 0.0;  // the sink joins Z with a zero value vector
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j <= pos; ++j) {
          const T* vj = v + b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * s.Dh;
          const double p = std::exp(logit[j] - m);
          Z += p;
          for (int d = 0; d < s.Dh; ++d) acc[d] += p * double(vj[d]);
        }
        for (int d = 0; d < s.Dh; ++d) acc[d] /= Z;
        T* oi = out + (long(b) * s.Tq + i) * s.out_stride + h * s.Dh;
        if (x.xsa_gamma) {
          const T* vi = v + b * s.kv_batch_stride + long(pos) * s.kv_stride + kappa * s.Dh;
          for (int d = 0; d < s.Dh; ++d) vown[d] = double(vi[d]);
          const double c = xsa_project_naive(z.data(), acc.data(), vown.data(), double(x.xsa_gamma[h]), s.Dh);
          x.xsa_c[(long(b) * s.H + h) * s.Tq + i] = T(c);
          for (int d = 0; d < s.Dh; ++d) oi[d] = T(z[d]);
        } else {
          for (int d = 0; d < s.Dh; ++d) oi[d] = T(acc[d]);
        }
        lse[(long(b) * s.H + h) * s.Tq + i] = T(m + std::log(Z));
      }
}

// dq, dk, dv WRITTEN (layouts of q, k, v); dsink += (if non-null); x.dsink_slope, x.dxsa_gamma +=.
// dout is dL/d(out): with XSA that is g = dL/dz. The reference recomputes the probabilities, y and
// z in double from q, k, v, so it ignores `out`, `lse` and x.xsa_c (kept for the signature).
template <class T>
void attention_backward_naive(T* dq, T* dk, T* dv, T* dsink, const T* dout, const T* /*out*/, const T* /*lse*/,
                              const T* q, const T* k, const T* v, const T* sink, T scale, const AttentionShape& s,
                              const AttentionExtras<T>& x = {}) {
  check_attention_shape(s, "attention_backward_naive");
  const int G = s.H / s.Hkv, Dh = s.Dh;
  std::vector<double> a(s.Tk), y(Dh), dqi(Dh), g(Dh), z(Dh), vhat(Dh);
  std::vector<double> dk_acc(size_t(s.Tk) * Dh), dv_acc(size_t(s.Tk) * Dh);
  for (int b = 0; b < s.B; ++b)
    for (int kappa = 0; kappa < s.Hkv; ++kappa) {
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      const T* kb = k + b * s.kv_batch_stride + kappa * Dh;
      const T* vb = v + b * s.kv_batch_stride + kappa * Dh;
      for (int h = kappa * G; h < (kappa + 1) * G; ++h)
        for (int i = 0; i < s.Tq; ++i) {
          const T* qi = q + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
          const T* gi = dout + (long(b) * s.Tq + i) * s.out_stride + h * Dh;
          const int pos = s.pos_offset + i;
          // a_ij = softmax over j <= pos (and the sink) of the logits (§1.1, §1.3)
          const double sink_logit =
              sink ? double(sink[h]) + (x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0) : -INFINITY;
          double m = sink_logit;
          for (int j = 0; j <= pos; ++j) {
            double dot = 0;
            for (int d = 0; d < Dh; ++d) dot += double(qi[d]) * double(kb[long(j) * s.kv_stride + d]);
            a[j] = dot * double(scale) - (x.alibi_slopes ? double(x.alibi_slopes[h]) * (pos - j) : 0.0);
            m = std::max(m, a[j]);
          }
          double Z = sink ? std::exp(sink_logit - m) : 0.0;
          for (int j = 0; j <= pos; ++j) Z += (a[j] = std::exp(a[j] - m));
          std::fill(y.begin(), y.end(), 0.0);
          for (int j = 0; j <= pos; ++j) {
            a[j] /= Z;
            for (int d = 0; d < Dh; ++d) y[d] += a[j] * double(vb[long(j) * s.kv_stride + d]);
          }
          for (int d = 0; d < Dh; ++d) g[d] = double(gi[d]);
          if (x.xsa_gamma) {
            // §2.2: dy = g − γ(g·v̂)v̂; the own value gets the direct term; dγ = Σ −c·(g·v̂).
            const double gamma = double(x.xsa_gamma[h]);
            const T* vi = vb + long(pos) * s.kv_stride;
            double n2 = 0;
            for (int d = 0; d < Dh; ++d) n2 += double(vi[d]) * double(vi[d]);
            const double nrm = std::sqrt(n2), n = std::max(nrm, kXsaEps);
            for (int d = 0; d < Dh; ++d) vhat[d] = double(vi[d]) / n;
            double c = 0, gv = 0;
            for (int d = 0; d < Dh; ++d) c += y[d] * vhat[d], gv += g[d] * vhat[d];
            double* dvi = &dv_acc[size_t(pos) * Dh];
            for (int d = 0; d < Dh; ++d) {
              const double dvhat = -gamma * (c * g[d] + gv * y[d]);
              dvi[d] += nrm > kXsaEps ? (dvhat + gamma * 2 * c * gv * vhat[d]) / n : dvhat / kXsaEps;
            }
            if (x.dxsa_gamma) x.dxsa_gamma[h] += T(-c * gv);
            for (int d = 0; d < Dh; ++d) g[d] -= gamma * gv * vhat[d];  // g is now dy
          }
          double D = 0;  // D_i = dy_i·y_i
          for (int d = 0; d < Dh; ++d) D += g[d] * y[d];
          std::fill(dqi.begin(), dqi.end(), 0.0);
          for (int j = 0; j <= pos; ++j) {
            double gv = 0;
            for (int d = 0; d < Dh; ++d) gv += g[d] * double(vb[long(j) * s.kv_stride + d]);
            const double dl = a[j] * (gv - D);  // dℓ_ij
            for (int d = 0; d < Dh; ++d) {
              dqi[d] += dl * double(kb[long(j) * s.kv_stride + d]) * double(scale);
              dk_acc[size_t(j) * Dh + d] += dl * double(qi[d]) * double(scale);
              dv_acc[size_t(j) * Dh + d] += a[j] * g[d];
            }
          }
          T* dqo = dq + b * s.q_batch_stride + long(i) * s.q_stride + h * Dh;
          for (int d = 0; d < Dh; ++d) dqo[d] = T(dqi[d]);
          const double dsink_i = -std::exp(sink_logit - m) / Z * D;  // ds = −p_sink·D (§1.3)
          if (dsink) dsink[h] += T(dsink_i);
          if (x.dsink_slope) x.dsink_slope[h] += T(dsink_i * pos);
        }
      for (int j = 0; j < s.Tk; ++j)
        for (int d = 0; d < Dh; ++d) {
          dk[b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * Dh + d] = T(dk_acc[size_t(j) * Dh + d]);
          dv[b * s.kv_batch_stride + long(j) * s.kv_stride + kappa * Dh + d] = T(dv_acc[size_t(j) * Dh + d]);
        }
    }
}

}  // namespace attnlab::kernels
