// attnlab kernels, fused attention: the forward (§1.1, §1.2, §1.3, §2.1). One task per (b, h,
// query tile): the online softmax over key tiles; the set's attention_forward, which gives a
// decoding step to attention_decode_task (decode.h).
// Part of one kernel set's body (kernels/attention/set_body.h); no include guard on purpose.

namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail {

// ALiBi on a transposed score tile (§1.2): scores[c][r] += −m_h·(t_r − t_c) for key c and the
// queries r of the first n_vectors vectors, where t_c − t_r = key_minus_query + c − r. The
// distance is formed in integers first, so it is exact in float at any length.
template <class T>
inline void add_alibi_transposed(T* scores, T slope, int key_minus_query, int n_keys, int n_vectors,
                                 const LaneIndex<T>& lane) {
  using S = Simd<T>;
  constexpr int W = S::W, TILE = kTile<T>;
  const auto m = S::set1(slope);
  for (int c = 0; c < n_keys; ++c) {
    const auto base = S::set1(T(key_minus_query + c));
    for (int vv = 0; vv < n_vectors; ++vv) {
      T* x = scores + c * TILE + vv * W;
      S::store(x, S::fmadd(m, S::sub(base, S::load(lane.at + vv * W)), S::load(x)));
    }
  }
}

// One key tile of the forward's online softmax, on the transposed scores of NVQ query vectors:
// new running max, rescale factor alpha = exp(m_old − m_new) of the old sum and output, P in
// place of S, and the running sum. The NVQ vectors are independent chains (a single chain would
// wait on the max/add latency at every key).
template <class T, int NVQ>
void online_softmax(T* scores, int bc, T* m, T* l, T* alpha) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::W, TILE = kTile<T>;
  V tile_max[NVQ], m_new[NVQ], sum[NVQ];
  for (int vv = 0; vv < NVQ; ++vv) tile_max[vv] = S::set1(-std::numeric_limits<T>::infinity()), sum[vv] = S::zero();
  for (int c = 0; c < bc; ++c)
    for (int vv = 0; vv < NVQ; ++vv) tile_max[vv] = S::max(tile_max[vv], S::load(scores + c * TILE + vv * W));
  for (int vv = 0; vv < NVQ; ++vv) {
    const V m_old = S::load(m + vv * W);
    m_new[vv] = S::max(m_old, tile_max[vv]);
    S::store(alpha + vv * W, S::exp(S::sub(m_old, m_new[vv])));  // 0 on the first tile without a sink
    S::store(m + vv * W, m_new[vv]);
  }
  for (int c = 0; c < bc; ++c)
    for (int vv = 0; vv < NVQ; ++vv) {
      const V p = S::exp(S::sub(S::load(scores + c * TILE + vv * W), m_new[vv]));
      S::store(scores + c * TILE + vv * W, p);
      sum[vv] = S::add(sum[vv], p);
    }
  for (int vv = 0; vv < NVQ; ++vv) S::store(l + vv * W, S::fmadd(S::load(l + vv * W), S::load(alpha + vv * W), sum[vv]));
}

template <class T, int N = kTile<T> / Simd<T>::W>
void online_softmax_dispatch(int n_vectors, T* scores, int bc, T* m, T* l, T* alpha) {
  if constexpr (N >= 1) {
    if (n_vectors == N)
      online_softmax<T, N>(scores, bc, m, l, alpha);
    else
      online_softmax_dispatch<T, N - 1>(n_vectors, scores, bc, m, l, alpha);
  }
}

// One forward task: the queries i0 .. i0+kTile−1 of head h in batch b.
template <class T>
void attention_forward_task(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                            const AttentionShape& s, const AttentionExtras<T>& x, int b, int h, int i0) {
  using S = Simd<T>;
  constexpr int W = S::W, TILE = kTile<T>;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const int Dh = s.Dh, ld = padded_head_dim<T>(Dh), kappa = h / (s.H / s.Hkv), br = std::min(TILE, s.Tq - i0);
  // Query lanes in use: a short tile (a decoding step has one query) computes only the vectors it
  // needs, not 64 lanes of padding.
  const int n_vectors = (br + W - 1) / W, lanes = n_vectors * W;
  alignas(64) T q_packed[kAttentionMaxHeadDim * TILE];  // scale·Qᵀ, [Dh][TILE]
  alignas(64) T v_rows[TILE * kAttentionMaxHeadDim];    // the key tile's values, [TILE][ld]
  alignas(64) T o_acc[TILE * kAttentionMaxHeadDim];     // unnormalized output, [TILE][ld]
  alignas(64) T scores[TILE * TILE];                   // Sᵀ, then Pᵀ: [key][query]
  alignas(64) T m[TILE], l[TILE], alpha[TILE];         // per query: running max, running sum, rescale
  const LaneIndex<T> lane;
  const T* kb = k + b * s.kv_batch_stride + kappa * Dh;
  const T* vb = v + b * s.kv_batch_stride + kappa * Dh;
  pack_transposed(q_packed, TILE, q + b * s.q_batch_stride + long(i0) * s.q_stride + h * Dh, s.q_stride, br, Dh, scale);
  const int pos_first = s.pos_offset + i0, n_keys = pos_first + br;  // the last query sees keys 0..n_keys−1
  // The sink opens the softmax as a key of logit s_h (+ slope·t_i) and zero value (§1.3): m = that
  // logit, l = e^0. Padding lanes get a finite value too.
  for (int r = 0; r < TILE; ++r) m[r] = sink ? sink[h] + (x.sink_slope ? x.sink_slope[h] * T(pos_first + r) : T(0)) : -kInf;
  std::fill(l, l + TILE, sink ? T(1) : T(0));
  for (int j0 = 0; j0 < n_keys; j0 += TILE) {
    const int bc = std::min(TILE, n_keys - j0);
    if (j0 + TILE < n_keys) {  // the next key tile's rows
      prefetch_rows(kb + long(j0 + TILE) * s.kv_stride, s.kv_stride, std::min(TILE, n_keys - j0 - TILE), Dh);
      prefetch_rows(vb + long(j0 + TILE) * s.kv_stride, s.kv_stride, std::min(TILE, n_keys - j0 - TILE), Dh);
    }
    const T* kj = kb + long(j0) * s.kv_stride;
    const bool diagonal = j0 + bc - 1 > pos_first;  // some (key, query) pairs of the tile are masked
    if (!diagonal) {
      tile_product<T, false>(scores, TILE, nullptr, kj, s.kv_stride, 1, q_packed, TILE, bc, lanes, Dh);
    } else {
      // Bands of kBand keys skip the query vectors none of their keys is visible to (the mask
      // below fills those lanes with −inf).
      for (int c0 = 0; c0 < bc; c0 += kBand<T>) {
        const int first = std::clamp(j0 + c0 - pos_first, 0, lanes) / W * W;
        tile_product<T, false>(scores + c0 * TILE + first, TILE, nullptr, kj + long(c0) * s.kv_stride, s.kv_stride,
                               1, q_packed + first, TILE, std::min(kBand<T>, bc - c0), lanes - first, Dh);
      }
    }
    // Per-(i, j) score biases go here (§1.2 ALiBi; GOAT's prior rides in extra q/k lanes instead).
    if (x.alibi_slopes) add_alibi_transposed(scores, x.alibi_slopes[h], j0 - pos_first, bc, n_vectors, lane);
    // Causal mask: key j0+c is visible to query r iff j0+c <= pos_first+r. Padding lanes (r >= br)
    // see every key of the loop, so they stay finite.
    if (diagonal)
      for (int c = 0; c < bc; ++c) {
        const int hidden = std::min(TILE, j0 + c - pos_first);
        if (hidden > 0) std::fill(scores + c * TILE, scores + c * TILE + hidden, -kInf);
      }
    online_softmax_dispatch<T>(n_vectors, scores, bc, m, l, alpha);
    // O[r] = alpha[r]·O[r] + Σ_c Pᵀ[c][r]·V[c]
    copy_rows(v_rows, ld, vb + long(j0) * s.kv_stride, s.kv_stride, bc, Dh);
    const KBand visible{.end = pos_first - j0};  // query r sees keys c <= r + pos_first − j0
    if (j0 == 0)
      tile_product<T, false>(o_acc, ld, nullptr, scores, 1, TILE, v_rows, ld, br, Dh, bc, visible);
    else
      tile_product<T, true>(o_acc, ld, alpha, scores, 1, TILE, v_rows, ld, br, Dh, bc, visible);
  }
  // Per-row epilogue: normalize, store, save the log-sum-exp; with XSA project out the own value
  // (§2.1) and save c = y·v̂ for the backward.
  T* ob = out + (long(b) * s.Tq + i0) * s.out_stride + h * Dh;
  T* lse_row = lse + (long(b) * s.H + h) * s.Tq + i0;
  for (int r = 0; r < br; ++r) {
    const T inv = T(1) / l[r];
    T* o = o_acc + r * ld;
    T* dst = ob + long(r) * s.out_stride;
    if (x.xsa_gamma) {
      for (int d = 0; d < Dh; ++d) o[d] *= inv;
      const T* vi = vb + long(pos_first + r) * s.kv_stride;
      const T n = std::max(std::sqrt(dot(vi, vi, Dh)), T(kXsaEps)), c = dot(o, vi, Dh) / n;
      const T coef = x.xsa_gamma[h] * c / n;  // z = y − γ c v̂ = y − (γ c / n) v
      for (int d = 0; d < Dh; ++d) dst[d] = o[d] - coef * vi[d];
      x.xsa_c[(long(b) * s.H + h) * s.Tq + i0 + r] = c;
    } else {
      for (int d = 0; d < Dh; ++d) dst[d] = o[d] * inv;
    }
    lse_row[r] = m[r] + std::log(l[r]);
  }
}

// Whether a call is worth a parallel region (the backward's as well): below ~2 MFLOP (a few
// microseconds of work) the fork/join costs more than it saves, and on a busy machine a spinning
// team costs milliseconds.
inline bool worth_threads(const AttentionShape& s) {
  const double flops = 4.0 * s.B * s.H * s.Dh * s.Tq * (s.pos_offset + 0.5 * (s.Tq + 1));
  return flops > 2e6;
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail

namespace attnlab::kernels::ATTNLAB_KERNEL_SET {

// The fast kernels of this set are documented at their public entry points in kernels/attention.h.
template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const T* sink, T scale,
                       const AttentionShape& s, const AttentionExtras<T>& x = {}) {
  check_attention_shape(s, "attention_forward");
  check_attention_extras(x, sink, "attention_forward");
  constexpr int TILE = detail::kTile<T>;
  if (s.Tq == 1) {  // a decoding step: one row per head (attention_decode_task)
#pragma omp parallel for schedule(static) if (detail::worth_threads_decode<T>(s))
    for (long task = 0; task < long(s.B) * s.H; ++task)
      detail::attention_decode_task(out, lse, q, k, v, sink, scale, s, x, int(task / s.H), int(task % s.H));
    return;
  }
  const int n_query_tiles = (s.Tq + TILE - 1) / TILE;
  const long n_heads = long(s.B) * s.H, n_tasks = n_heads * n_query_tiles;
#pragma omp parallel for schedule(dynamic, 1) if (detail::worth_threads(s))
  for (long task = 0; task < n_tasks; ++task) {
    // The query tiles of one head are consecutive (its keys and values stay in L2), the longest
    // rows first: the loop then ends on short tasks, which balances the two threads.
    const int query_tile = n_query_tiles - 1 - int(task % n_query_tiles);
    const int b = int(task / n_query_tiles / s.H), h = int(task / n_query_tiles % s.H);
    detail::attention_forward_task(out, lse, q, k, v, sink, scale, s, x, b, h, query_tile * TILE);
  }
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET
