// attnlab kernels, fused attention: the backward (§1.1 Backward, §1.3, §2.2). One task per
// (b, kv head), or per query chunk of it (query_chunks.h); the set's attention_backward and its
// scratch size.
// Part of one kernel set's body (kernels/attention/set_body.h); no include guard on purpose.

namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail {

// Rows of D_i = dout_i·out_i a backward task keeps (32 KiB of stack in float).
inline constexpr int kDCacheRows = 8192;

// One backward task: batch b, KV head kappa, with its G query heads, over the queries [qa, qb) (see
// kernels/attention.h, Algorithm). It writes dQ of those rows, and the dK, dV its queries give to
// the keys [0, key_end) at dk_out + j·out_stride, dv_out + j·out_stride (key_end = Tk for a task over
// every query: keys no query sees get zero). A task over all the queries writes the final dK, dV; a task
// over a query chunk writes its partial sums (attention_backward adds them up).
template <class T>
void attention_backward_task(T* dq, T* dk_out, T* dv_out, long out_stride, int key_end, const T* dout, const T* out,
                             const T* lse, const T* q, const T* k, const T* v, T scale, const AttentionShape& s,
                             const AttentionExtras<T>& x, int b, int kappa, int qa, int qb, T* pack) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::W, TILE = kTile<T>, MAXD = kAttentionMaxHeadDim;
  constexpr T kInf = std::numeric_limits<T>::infinity();
  const int Dh = s.Dh, ld = padded_head_dim<T>(Dh), G = s.H / s.Hkv;
  alignas(64) T k_packed[MAXD * TILE];               // Kᵀ, [Dh][TILE]
  alignas(64) T v_packed[MAXD * TILE];               // Vᵀ, [Dh][TILE]
  alignas(64) T k_rows[TILE * MAXD];                 // K, [TILE][ld]
  alignas(64) T dk_acc[TILE * MAXD], dv_acc[TILE * MAXD];  // the key tile's dK, dV, [TILE][ld]
  alignas(64) T q_rows[TILE * MAXD], g_rows[TILE * MAXD];  // the query tile's Q and dO, [TILE][ld]
  alignas(64) T p_tile[TILE * TILE];                 // S, then P: [query][key]
  alignas(64) T ds_tile[TILE * TILE];                // dP, then scale·dS: [query][key]
  alignas(64) T d_cache[kDCacheRows];                // D_i of the task's G heads, when they fit
  alignas(64) T xsa_cache[kDCacheRows];              // XSA: γ(g_i·v_i)/n_i², same rows as d_cache
  const LaneIndex<T> lane;
  const long kv_offset = b * s.kv_batch_stride + kappa * Dh;
  const T* kb = k + kv_offset;
  const T* vb = v + kv_offset;
  const int last_pos = s.pos_offset + qb - 1, nq = qb - qa;  // the task's last query sees keys 0..last_pos
  const V vscale = S::set1(scale);
  // D_i = dout_i·out_i is needed once per key tile; computed once here when the task's G·nq rows
  // fit the cache (every training shape), else recomputed per tile from the same dot (same bits).
  // With XSA, dout is g = dL/dz and out is z: D_i = g_i·z_i still holds (§2.2), while every
  // other use of dO needs dy = g − γ(g·v̂)v̂, made when the rows are copied (xsa_coef).
  const bool d_cached = long(G) * nq <= kDCacheRows;
  auto xsa_coef = [&](int h, int i) {  // γ(g·v)/n², so that dy = g − coef·v
    const T* vi = vb + long(s.pos_offset + i) * s.kv_stride;
    const T n = std::max(std::sqrt(dot(vi, vi, Dh)), T(kXsaEps));
    return x.xsa_gamma[h] * dot(dout + (long(b) * s.Tq + i) * s.out_stride + h * Dh, vi, Dh) / (n * n);
  };
  if (d_cached)
    for (int h = kappa * G; h < (kappa + 1) * G; ++h)
      for (int i = qa; i < qb; ++i) {
        const long row = (long(b) * s.Tq + i) * s.out_stride + h * Dh;
        d_cache[(h - kappa * G) * nq + i - qa] = dot(dout + row, out + row, Dh);
        if (x.xsa_gamma) xsa_cache[(h - kappa * G) * nq + i - qa] = xsa_coef(h, i);
      }
  // Rows of Q and dO (dy under XSA) as the tile products read them, [TILE][ld] from row r·ld: with
  // a pack (backward_pack_elements), the task's rows of each head once, contiguous, and dQ summed
  // there, written out at the end; else each query tile's rows are copied for every key tile and
  // dQ is summed in dq itself. Same values in the same order either way: the same bits.
  T* const q_pack = pack;
  T* const g_pack = pack ? pack + long(G) * nq * ld : nullptr;
  T* const dq_pack = pack ? g_pack + long(G) * nq * ld : nullptr;
  auto load_rows = [&](T* q_dst, T* g_dst, int h, int i0, int br) {
    copy_rows(q_dst, ld, q + b * s.q_batch_stride + long(i0) * s.q_stride + h * Dh, s.q_stride, br, Dh);
    copy_rows(g_dst, ld, dout + (long(b) * s.Tq + i0) * s.out_stride + h * Dh, s.out_stride, br, Dh);
    if (x.xsa_gamma)
      for (int r = 0; r < br; ++r) {
        const T coef = d_cached ? xsa_cache[(h - kappa * G) * nq + i0 + r - qa] : xsa_coef(h, i0 + r);
        const T* vi = vb + long(s.pos_offset + i0 + r) * s.kv_stride;
        T* gr = g_dst + r * ld;
        for (int d = 0; d < Dh; ++d) gr[d] -= coef * vi[d];
      }
  };
  if (pack)
    for (int h = kappa * G; h < (kappa + 1) * G; ++h) {
      const long at = long(h - kappa * G) * nq * ld;
      load_rows(q_pack + at, g_pack + at, h, qa, nq);
    }
  for (int j0 = 0; j0 < key_end; j0 += TILE) {
    const int bc = std::min(TILE, key_end - j0);
    std::fill(dk_acc, dk_acc + bc * ld, T(0));
    std::fill(dv_acc, dv_acc + bc * ld, T(0));
    if (j0 <= last_pos) {  // else: keys no query sees (a cache longer than pos_offset+Tq) get zero
      const T* kj = kb + long(j0) * s.kv_stride;
      pack_transposed(k_packed, TILE, kj, s.kv_stride, bc, Dh, T(1));
      pack_transposed(v_packed, TILE, vb + long(j0) * s.kv_stride, s.kv_stride, bc, Dh, T(1));
      copy_rows(k_rows, ld, kj, s.kv_stride, bc, Dh);
      const int i_first = std::max(qa, j0 - s.pos_offset);  // the task's first query that sees key j0
      for (int h = kappa * G; h < (kappa + 1) * G; ++h) {
        const T* lse_h = lse + (long(b) * s.H + h) * s.Tq;
        const T slope = x.alibi_slopes ? x.alibi_slopes[h] : T(0);
        for (int i0 = i_first; i0 < qb; i0 += TILE) {
          const int br = std::min(TILE, qb - i0);
          const T* oi = out + (long(b) * s.Tq + i0) * s.out_stride + h * Dh;
          const T* qt = q_rows;  // the tile's Q, dO and dQ rows
          const T* gt = g_rows;
          T* dqi = dq + b * s.q_batch_stride + long(i0) * s.q_stride + h * Dh;
          long dq_ld = s.q_stride;
          if (pack) {
            const long at = (long(h - kappa * G) * nq + i0 - qa) * ld;
            qt = q_pack + at, gt = g_pack + at, dqi = dq_pack + at, dq_ld = ld;
          } else {
            load_rows(q_rows, g_rows, h, i0, br);
          }
          // S = Q·Kᵀ and dP = dO·Vᵀ for this (query tile, key tile). On the diagonal, bands of
          // kBand queries stop at the last key vector any of them sees.
          const int pos0 = s.pos_offset + i0;  // >= j0, since i0 >= i_first
          const int band = j0 + TILE - 1 > pos0 ? kBand<T> : TILE;  // masked pairs only on the diagonal
          for (int r0 = 0; r0 < br; r0 += band) {
            const int n = std::min(band, br - r0);
            const int lanes = std::min(TILE, (pos0 + r0 + n - j0 + W - 1) / W * W);
            tile_product<T, false>(p_tile + r0 * TILE, TILE, nullptr, qt + r0 * ld, ld, 1, k_packed, TILE, n, lanes,
                                   Dh);
            tile_product<T, false>(ds_tile + r0 * TILE, TILE, nullptr, gt + r0 * ld, ld, 1, v_packed, TILE, n, lanes,
                                   Dh);
          }
          // P = exp(scale·S + bias − lse) (recomputed, §1.1); scale·dS = scale·P∘(dP − D)
          for (int r = 0; r < br; ++r) {
            T* p = p_tile + r * TILE;
            T* g = ds_tile + r * TILE;
            const int pos = pos0 + r;
            const int visible = std::min(TILE, pos - j0 + 1);  // keys j0 .. pos: lanes 0..visible−1
            const int nv = (visible + W - 1) / W;             // vectors computed above for this row
            std::fill(p + visible, p + nv * W, -kInf);         // includes padding keys >= Tk
            const V D = S::set1(d_cached ? d_cache[(h - kappa * G) * nq + i0 + r - qa]
                                         : dot(dout + (long(b) * s.Tq + i0 + r) * s.out_stride + h * Dh,
                                               oi + long(r) * s.out_stride, Dh));  // g·z, never dy·z (§2.2)
            const V L = S::set1(lse_h[i0 + r]);
            const V m = S::set1(slope), base = S::set1(T(j0 - pos));
            for (int vv = 0; vv < nv; ++vv) {
              // logit = scale·S + bias in one rounding, the same with or without ALiBi (zero slopes
              // reproduce no-ALiBi to the bit; GCC contracts a separate multiply and add anyway).
              const V bias = x.alibi_slopes ? S::mul(m, S::add(base, S::load(lane.at + vv * W))) : S::zero();  // −m_h(t_i − t_j)
              const V logit = S::fmadd(S::load(p + vv * W), vscale, bias);
              const V prob = S::exp(S::sub(logit, L));
              S::store(p + vv * W, prob);
              S::store(g + vv * W, S::mul(S::mul(prob, S::sub(S::load(g + vv * W), D)), vscale));
            }
            std::fill(p + nv * W, p + TILE, T(0));  // keys after every query of the band
            std::fill(g + nv * W, g + TILE, T(0));
          }
          // dV[c] += Σ_r P[r][c]·dO[r];  dK[c] += Σ_r scale·dS[r][c]·Q[r]  (rows: keys, lanes: Dh),
          // over the queries r >= c − (pos0 − j0) that see key c.
          const KBand seen_by{.first = j0 - pos0};
          tile_product<T, true>(dv_acc, ld, nullptr, p_tile, 1, TILE, gt, ld, bc, Dh, br, seen_by);
          tile_product<T, true>(dk_acc, ld, nullptr, ds_tile, 1, TILE, qt, ld, bc, Dh, br, seen_by);
          // dQ[r] (+)= Σ_c scale·dS[r][c]·K[c] over the keys c <= r + pos0 − j0 it sees; key tile 0
          // reaches every query row of the task, so it writes.
          const KBand sees{.end = pos0 - j0};
          if (j0 == 0)
            tile_product<T, false>(dqi, dq_ld, nullptr, ds_tile, TILE, 1, k_rows, ld, br, Dh, bc, sees);
          else
            tile_product<T, true>(dqi, dq_ld, nullptr, ds_tile, TILE, 1, k_rows, ld, br, Dh, bc, sees);
        }
      }
    }
    if (x.xsa_gamma)  // XSA's direct term on each key that is also a query of the task: its own value (§2.2)
      for (int c = 0; c < bc; ++c) {
        const int i = j0 + c - s.pos_offset;
        if (i < qa || i >= qb) continue;
        const T* vi = vb + long(j0 + c) * s.kv_stride;
        const T nrm = std::sqrt(dot(vi, vi, Dh)), n = std::max(nrm, T(kXsaEps));
        T* acc = dv_acc + c * ld;
        for (int h = kappa * G; h < (kappa + 1) * G; ++h) {
          const long row = (long(b) * s.Tq + i) * s.out_stride + h * Dh;
          const T* g = dout + row;
          const T* z = out + row;
          const T gamma = x.xsa_gamma[h], cy = x.xsa_c[(long(b) * s.H + h) * s.Tq + i], gv = dot(g, vi, Dh) / n;
          if (nrm > T(kXsaEps)) {
            // −(γ/n)(c·g + gv·y − 2c·gv·v̂) with y = z + γc·v̂
            const T a = -gamma / n, bv = -gamma * (gamma - 2) * cy * gv / (n * n);
            for (int d = 0; d < Dh; ++d) acc[d] += a * (cy * g[d] + gv * z[d]) + bv * vi[d];
          } else {  // dv̂/ε with dv̂ = −γ(c·g + gv·y)
            const T a = -gamma / T(kXsaEps), bv = gamma * cy / n;
            for (int d = 0; d < Dh; ++d) acc[d] += a * (cy * g[d] + gv * (z[d] + bv * vi[d]));
          }
        }
      }
    copy_rows(dk_out + long(j0) * out_stride, out_stride, dk_acc, ld, bc, Dh);
    copy_rows(dv_out + long(j0) * out_stride, out_stride, dv_acc, ld, bc, Dh);
  }
  if (pack)
    for (int h = kappa * G; h < (kappa + 1) * G; ++h)
      copy_rows(dq + b * s.q_batch_stride + long(qa) * s.q_stride + h * Dh, s.q_stride,
                dq_pack + long(h - kappa * G) * nq * ld, ld, nq, Dh);
}

// Elements of one chunk's partial sums: dK then dV of every key, [Tk][Dh] each.
inline long backward_chunk_elements(const AttentionShape& s) { return 2 * long(s.Tk) * s.Dh; }

// Elements of one thread's pack (attention_backward_task): Q, dO and dQ rows of a task's G heads,
// [G][rows][ld] each, for up to Tq rows.
template <class T>
long backward_pack_elements(const AttentionShape& s) {
  return 3 * long(s.H / s.Hkv) * s.Tq * padded_head_dim<T>(s.Dh);
}

// The backward's split over queries at this set's tile (attention_query_chunks in attention.h).
template <class T>
int backward_query_chunks(const AttentionShape& s) { return attention_query_chunks(s, kTile<T>); }

template <class T>
void split_queries(const AttentionShape& s, int n, int* bounds) { split_attention_queries(s, n, kTile<T>, bounds); }

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail

namespace attnlab::kernels::ATTNLAB_KERNEL_SET {

// The fast kernels of this set are documented at their public entry points in kernels/attention.h.

// The query chunks' partial sums, then one pack per thread of the calling context's team.
template <class T>
size_t attention_backward_scratch_size(const AttentionShape& s) {
  return size_t(detail::backward_query_chunks<T>(s) - 1) * size_t(s.B) * s.Hkv * detail::backward_chunk_elements(s) +
         size_t(omp_get_max_threads()) * detail::backward_pack_elements<T>(s);
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, T* dsink, const T* dout, const T* out, const T* lse, const T* q,
                        const T* k, const T* v, const T* sink, T scale, const AttentionShape& s,
                        const AttentionExtras<T>& x = {}, T* scratch = nullptr, size_t scratch_size = 0) {
  check_attention_shape(s, "attention_backward");
  check_attention_extras(x, sink, "attention_backward");
  if (dsink && !sink) fail("attention_backward: dsink is given but sink is null; pass the sink logits or no dsink");
  const long pairs = long(s.B) * s.Hkv, chunk_elements = detail::backward_chunk_elements(s);
  const int chunks = scratch ? int(std::min<long>(detail::backward_query_chunks<T>(s),
                                                  1 + long(scratch_size / size_t(pairs * chunk_elements))))
                             : 1;
  // Packs after the largest chunk region, when the scratch holds one per thread of the team below
  // (a scratch sized for an earlier, smaller team: none, the copies per key tile instead).
  const bool threaded = detail::worth_threads(s);
  const size_t chunk_region = size_t(detail::backward_query_chunks<T>(s) - 1) * size_t(pairs * chunk_elements);
  const long pack_elements = detail::backward_pack_elements<T>(s);
  T* const packs = scratch && scratch_size >= chunk_region + size_t(threaded ? omp_get_max_threads() : 1) *
                                                                size_t(pack_elements)
                       ? scratch + chunk_region
                       : nullptr;
  auto pack_of_thread = [&]() { return packs ? packs + omp_get_thread_num() * pack_elements : nullptr; };
  if (chunks == 1) {
#pragma omp parallel for schedule(dynamic, 1) if (threaded)
    for (long task = 0; task < pairs; ++task) {
      const int b = int(task / s.Hkv), kappa = int(task % s.Hkv);
      const long kv_offset = b * s.kv_batch_stride + kappa * s.Dh;
      detail::attention_backward_task(dq, dk + kv_offset, dv + kv_offset, s.kv_stride, s.Tk, dout, out, lse, q, k, v,
                                      scale, s, x, b, kappa, 0, s.Tq, pack_of_thread());
    }
  } else {
    int bounds[kAttentionMaxQueryChunks + 1];
    detail::split_queries<T>(s, chunks, bounds);
#pragma omp parallel for schedule(dynamic, 1) if (threaded)
    for (long task = 0; task < pairs * chunks; ++task) {
      const long pair = task / chunks;
      const int c = int(task % chunks), b = int(pair / s.Hkv), kappa = int(pair % s.Hkv);
      const long kv_offset = b * s.kv_batch_stride + kappa * s.Dh;
      if (c == chunks - 1) {
        detail::attention_backward_task(dq, dk + kv_offset, dv + kv_offset, s.kv_stride, s.Tk, dout, out, lse, q, k, v,
                                        scale, s, x, b, kappa, bounds[c], bounds[c + 1], pack_of_thread());
      } else {
        T* part = scratch + (pair * (chunks - 1) + c) * chunk_elements;
        detail::attention_backward_task(dq, part, part + long(s.Tk) * s.Dh, s.Dh, s.pos_offset + bounds[c + 1], dout,
                                        out, lse, q, k, v, scale, s, x, b, kappa, bounds[c], bounds[c + 1],
                                        pack_of_thread());
      }
    }
    // dK, dV of key j: the last chunk's sum, then + the partial sum of every chunk whose queries
    // see j (those ending after position j), in chunk order.
    constexpr int TILE = detail::kTile<T>;
    const long key_tiles = (s.Tk + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) if (detail::worth_threads(s))
    for (long task = 0; task < pairs * key_tiles; ++task) {
      const long pair = task / key_tiles;
      const int b = int(pair / s.Hkv), kappa = int(pair % s.Hkv), j0 = int(task % key_tiles) * TILE;
      const long kv_offset = b * s.kv_batch_stride + kappa * s.Dh;
      for (int j = j0; j < std::min(j0 + TILE, s.Tk); ++j) {
        T* dkj = dk + kv_offset + long(j) * s.kv_stride;
        T* dvj = dv + kv_offset + long(j) * s.kv_stride;
        for (int c = 0; c < chunks - 1; ++c) {
          if (j >= s.pos_offset + bounds[c + 1]) continue;
          const T* pk = scratch + (pair * (chunks - 1) + c) * chunk_elements + long(j) * s.Dh;
          const T* pv = pk + long(s.Tk) * s.Dh;
          for (int d = 0; d < s.Dh; ++d) dkj[d] += pk[d], dvj[d] += pv[d];
        }
      }
    }
  }
  if (dsink || x.dsink_slope || x.dxsa_gamma) {
    // Per-head reductions over rows, one head per iteration (no shared accumulator between threads):
    // ds_h = −Σ_{b,i} p_sink·D_i with p_sink = exp(sink logit − lse_i) (§1.3), its slope part
    // weighted by t_i, and XSA's dL/dγ_h = Σ_{b,i} −c·(g·v̂) (§2.2).
    const int G = s.H / s.Hkv;
#pragma omp parallel for schedule(static) if (detail::worth_threads(s))
    for (int h = 0; h < s.H; ++h) {
      double acc_sink = 0, acc_slope = 0, acc_xsa = 0;
      for (int b = 0; b < s.B; ++b)
        for (int i = 0; i < s.Tq; ++i) {
          const long row = (long(b) * s.Tq + i) * s.out_stride + h * s.Dh;
          const int pos = s.pos_offset + i;
          if (dsink || x.dsink_slope) {
            const double D = double(detail::dot(dout + row, out + row, s.Dh));
            const double logit = double(sink[h]) + (x.sink_slope ? double(x.sink_slope[h]) * pos : 0.0);
            const double ds = -std::exp(logit - double(lse[(long(b) * s.H + h) * s.Tq + i])) * D;
            acc_sink += ds;
            acc_slope += ds * pos;
          }
          if (x.dxsa_gamma) {
            const T* vi = v + b * s.kv_batch_stride + long(pos) * s.kv_stride + (h / G) * s.Dh;
            const double n = std::max(std::sqrt(double(detail::dot(vi, vi, s.Dh))), kXsaEps);
            acc_xsa -= double(x.xsa_c[(long(b) * s.H + h) * s.Tq + i]) * double(detail::dot(dout + row, vi, s.Dh)) / n;
          }
        }
      if (dsink) dsink[h] += T(acc_sink);
      if (x.dsink_slope) x.dsink_slope[h] += T(acc_slope);
      if (x.dxsa_gamma) x.dxsa_gamma[h] += T(acc_xsa);
    }
  }
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET
