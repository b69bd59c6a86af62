// attnlab kernels, fused attention: a decoding step (one query row per head, s.Tq == 1): one
// task per (b, h), and when such a step is worth threads.
// Part of one kernel set's body (kernels/attention/set_body.h); no include guard on purpose.

namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail {

// One decoding step's attention for head h of batch b: a single query row (s.Tq == 1) against the
// keys 0..pos_offset. The tiled task (attention_forward_task, forward.h) would pack a tile of kTile
// query rows for it (one live) and copy every value row; here each key costs one dot product over Dh
// and one scaled add of its value, in blocks of kDecodeBlock keys: the block's scores, their max, the
// rescale of the running sum and output (the online softmax of the tiles, one row wide), then
// Σ p_j·v_j. Same extras, same epilogue.
inline constexpr int kDecodeBlock = 128;

template <class T>
void attention_decode_task(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                           const AttentionShape& s, const AttentionExtras<T>& x, int b, int h) {
  using S = Simd<T>;
  constexpr int W = S::W;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const int Dh = s.Dh, kappa = h / (s.H / s.Hkv), pos = s.pos_offset, n_keys = pos + 1;
  const T* kb = k + b * s.kv_batch_stride + kappa * Dh;
  const T* vb = v + b * s.kv_batch_stride + kappa * Dh;
  alignas(64) T qs[kAttentionMaxHeadDim];  // scale·q
  alignas(64) T o[kAttentionMaxHeadDim];   // unnormalized output
  alignas(64) T p[kDecodeBlock];           // the block's scores, then probabilities
  const T* qrow = q + b * s.q_batch_stride + h * Dh;
  for (int d = 0; d < Dh; ++d) qs[d] = scale * qrow[d], o[d] = T(0);
  // The sink opens the softmax as a key of logit s_h (+ slope·t) and zero value (§1.3).
  T m = sink ? sink[h] + (x.sink_slope ? x.sink_slope[h] * T(pos) : T(0)) : -kInf;
  T l = sink ? T(1) : T(0);
  const T slope = x.alibi_slopes ? x.alibi_slopes[h] : T(0);
  const long ks = s.kv_stride;
  for (int j0 = 0; j0 < n_keys; j0 += kDecodeBlock) {
    const int bc = std::min(kDecodeBlock, n_keys - j0);
    // Scores four keys at a time: four independent FMA chains (one key's dot product is a chain of
    // Dh/W dependent FMAs and a reduction, latency-bound). Each is dot()'s sum, in dot()'s order.
    // The head's slice of each key row is a few cache lines a whole row apart, a pattern the
    // hardware prefetchers follow poorly: the key rows 8–11 ahead are prefetched (the same for the
    // value rows below; 1.6–2.3× with both changes, docs/performance.md, Decode). The prefetch is
    // written out in both loops: a shared helper or lambda ran the decode attention ~12% slower
    // (decode_read_bench, GCC 12, 3 alternating rounds).
    int c = 0;
    for (; c + 4 <= bc; c += 4) {
      const T* k0 = kb + long(j0 + c) * ks;
      if (c + 12 <= bc)
        for (int r = 8; r < 12; ++r)
          for (int d = 0; d < Dh; d += 64 / int(sizeof(T))) __builtin_prefetch(k0 + r * ks + d);
      typename S::V a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
      int d = 0;
      for (; d + W <= Dh; d += W) {
        const auto qv = S::load(qs + d);
        a0 = S::fmadd(qv, S::load(k0 + d), a0);
        a1 = S::fmadd(qv, S::load(k0 + ks + d), a1);
        a2 = S::fmadd(qv, S::load(k0 + 2 * ks + d), a2);
        a3 = S::fmadd(qv, S::load(k0 + 3 * ks + d), a3);
      }
      if (d < Dh) {
        const auto mask = S::tail_mask(Dh - d);
        const auto qv = S::load(qs + d, mask);
        a0 = S::fmadd(qv, S::load(k0 + d, mask), a0);
        a1 = S::fmadd(qv, S::load(k0 + ks + d, mask), a1);
        a2 = S::fmadd(qv, S::load(k0 + 2 * ks + d, mask), a2);
        a3 = S::fmadd(qv, S::load(k0 + 3 * ks + d, mask), a3);
      }
      p[c] = S::reduce_add(a0), p[c + 1] = S::reduce_add(a1), p[c + 2] = S::reduce_add(a2), p[c + 3] = S::reduce_add(a3);
    }
    for (; c < bc; ++c) p[c] = dot(qs, kb + long(j0 + c) * ks, Dh);
    T block_max = -kInf;
    for (c = 0; c < bc; ++c) {
      if (x.alibi_slopes) p[c] -= slope * T(pos - (j0 + c));  // §1.2
      block_max = std::max(block_max, p[c]);
    }
    const T m_new = std::max(m, block_max);
    // exp(m − m_new) rescales what came before (0 on the first block without a sink).
    alignas(64) T lanes[W];
    S::store(lanes, S::exp(S::set1(m - m_new)));
    const T alpha = lanes[0];
    // Lanes past the block's last key score −inf: their exp is exactly 0.
    const int padded = (bc + W - 1) / W * W;
    for (int c = bc; c < padded; ++c) p[c] = -kInf;
    typename S::V sum = S::zero();
    const typename S::V mv = S::set1(m_new);
    for (int c = 0; c < padded; c += W) {
      const auto e = S::exp(S::sub(S::load(p + c), mv));
      S::store(p + c, e);
      sum = S::add(sum, e);
    }
    l = l * alpha + S::reduce_add(sum);
    m = m_new;
    if (alpha != T(1))
      for (int d = 0; d < Dh; ++d) o[d] *= alpha;
    // o += Σ p_j·v_j, four value rows per pass over o: o += (p₀v₀ + p₁v₁) + (p₂v₂ + p₃v₃), one
    // load and store of o per four keys instead of per key.
    int cc = 0;
    for (; cc + 4 <= bc; cc += 4) {
      const T* v0 = vb + long(j0 + cc) * ks;
      if (cc + 12 <= bc)
        for (int r = 8; r < 12; ++r)
          for (int d = 0; d < Dh; d += 64 / int(sizeof(T))) __builtin_prefetch(v0 + r * ks + d);
      const auto p0 = S::set1(p[cc]), p1 = S::set1(p[cc + 1]), p2 = S::set1(p[cc + 2]), p3 = S::set1(p[cc + 3]);
      int d = 0;
      for (; d + W <= Dh; d += W) {
        const auto t01 = S::fmadd(p1, S::load(v0 + ks + d), S::mul(p0, S::load(v0 + d)));
        const auto t23 = S::fmadd(p3, S::load(v0 + 3 * ks + d), S::mul(p2, S::load(v0 + 2 * ks + d)));
        S::store(o + d, S::add(S::load(o + d), S::add(t01, t23)));
      }
      if (d < Dh) {
        const auto mask = S::tail_mask(Dh - d);
        const auto t01 = S::fmadd(p1, S::load(v0 + ks + d, mask), S::mul(p0, S::load(v0 + d, mask)));
        const auto t23 = S::fmadd(p3, S::load(v0 + 3 * ks + d, mask), S::mul(p2, S::load(v0 + 2 * ks + d, mask)));
        S::store(o + d, S::add(S::load(o + d, mask), S::add(t01, t23)), mask);
      }
    }
    for (; cc < bc; ++cc) {
      const T* vj = vb + long(j0 + cc) * ks;
      const typename S::V pv = S::set1(p[cc]);
      int d = 0;
      for (; d + W <= Dh; d += W) S::store(o + d, S::fmadd(pv, S::load(vj + d), S::load(o + d)));
      if (d < Dh) {
        const auto mask = S::tail_mask(Dh - d);
        S::store(o + d, S::fmadd(pv, S::load(vj + d, mask), S::load(o + d, mask)), mask);
      }
    }
  }
  // The epilogue of attention_forward_task for its one row.
  T* dst = out + long(b) * s.out_stride + h * Dh;
  const T inv = T(1) / l;
  if (x.xsa_gamma) {
    for (int d = 0; d < Dh; ++d) o[d] *= inv;
    const T* vi = vb + long(pos) * s.kv_stride;
    const T n = std::max(std::sqrt(dot(vi, vi, Dh)), T(kXsaEps)), cy = dot(o, vi, Dh) / n;
    const T coef = x.xsa_gamma[h] * cy / n;
    for (int d = 0; d < Dh; ++d) dst[d] = o[d] - coef * vi[d];
    x.xsa_c[long(b) * s.H + h] = cy;
  } else {
    for (int d = 0; d < Dh; ++d) dst[d] = o[d] * inv;
  }
  lse[long(b) * s.H + h] = m + std::log(l);
}

// A decoding step reads B·H slices of the key and value caches with 2 FLOPs per value read:
// memory-bound, so the threshold is on bytes, far below worth_threads' (which kept the step on one
// thread up to ~2000 cached positions at H = 4, Dh = 64). With 2 threads, from 32 positions on (64
// KiB) the split ran 1.2–1.8× faster (docs/performance.md, Decode).
template <class T>
bool worth_threads_decode(const AttentionShape& s) {
  return s.B * s.H > 1 && 2.0 * s.B * s.H * s.Dh * (s.pos_offset + 1) * sizeof(T) >= 65536;
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail
