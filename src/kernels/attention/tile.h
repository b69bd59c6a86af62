// attnlab kernels, fused attention: the tile layer. Tile sizes, the register-blocked micro-kernel
// behind every matrix product of a tile (tile_product, with KBand to skip the masked blocks of
// diagonal tiles), and the helpers that pack, copy and prefetch tile operands.
// Part of one kernel set's body (kernels/attention/set_body.h); no include guard on purpose.

namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail {

// Tile edge: query rows per forward task, key columns per backward key tile. 64 keeps a tile's
// score block (16 KiB in float) and its operands in L1/L2; the one-lane path uses 8 so that the
// double tests cross many tile boundaries.
template <class T>
inline constexpr int kTile = Simd<T>::W == 1 ? 8 : 4 * Simd<T>::W;

// Rows per band on diagonal tiles: the causal structure is followed at this granularity.
template <class T>
inline constexpr int kBand = Simd<T>::W == 1 ? 2 : Simd<T>::W;

// Most vectors per micro-kernel call; wider products are split into chunks of this many. Four (64
// float lanes) keeps a chunk's B operand in L1: with 8, Dh = 128 ran at half the speed. With 16
// registers (AVX2) two: 6 rows × 2 vectors hold 12 accumulators, enough independent FMA chains
// to cover the FMA latency, where 2 rows × 4 vectors (8 chains) left the FMA units waiting.
template <class T>
inline constexpr int kMaxVectors = Simd<T>::kRegs >= 32 ? 4 : 2;

// Rows per register block for nv vectors: about 24 accumulators plus nv operands in 32 registers;
// with 16 registers (nv ≤ kMaxVectors = 2) 12 accumulators, nv operands and the broadcast A value.
template <class T>
constexpr int rows_per_block(int nv) {
  if constexpr (Simd<T>::kRegs >= 32) return nv >= 4 ? 6 : nv == 3 ? 8 : 12;
  return nv == 2 ? 6 : 12;
}

// The micro-kernel. C[r][0..NV·W) (+)= Σ_{k<K} A[r·sr + k·sk] · B[k·ldb + 0..NV·W) for r < RB;
// the last vector of each row is limited to the lanes of `last` unless Full (every lane live: no
// masked load or store, which on AVX2 are slow, the masked store microcoded on AMD). With
// Accumulate, C is first multiplied by row_scale[r] when row_scale is non-null (the online
// softmax's rescaling). Each output lane is one FMA chain over k in order, whatever RB and NV: the
// blocking changes no bit of the result.
template <class T, int RB, int NV, bool Accumulate, bool Full>
inline void micro_kernel(T* C, long ldc, const T* row_scale, const T* A, long sr, long sk, const T* B, long ldb,
                         int K, typename Simd<T>::Mask last) {
  using S = Simd<T>;
  using V = typename S::V;
  constexpr int W = S::W;
  const auto load_last = [&](const T* p) { if constexpr (Full) return S::load(p); else return S::load(p, last); };
  V acc[RB][NV] = {};  // every entry is set below; the initializer only quiets GCC 12
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if constexpr (Accumulate)
        acc[r][v] = v == NV - 1 ? load_last(C + r * ldc + v * W) : S::load(C + r * ldc + v * W);
      else
        acc[r][v] = S::zero();
    }
    if constexpr (Accumulate)
      if (row_scale) {
        const V scale = S::set1(row_scale[r]);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = S::mul(acc[r][v], scale);
      }
  }
  for (int kk = 0; kk < K; ++kk) {
    const T* b = B + kk * ldb;
    V bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) bv[v] = S::load(b + v * W);
    bv[NV - 1] = load_last(b + (NV - 1) * W);
#if ATTNLAB_KERNEL_SIMD == 1
    // Keep B in registers: GCC otherwise folds its loads into the FMAs of every row, RB loads per
    // vector instead of one, and the loads, not the FMAs, set the pace.
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) __asm__("" : "+x"(bv[v]));
#endif
    const T* a = A + kk * sk;
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const V ar = S::set1(a[r * sr]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = S::fmadd(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r) {
#pragma GCC unroll 16
    for (int v = 0; v < NV - 1; ++v) S::store(C + r * ldc + v * W, acc[r][v]);
    if constexpr (Full)
      S::store(C + r * ldc + (NV - 1) * W, acc[r][NV - 1]);
    else
      S::store(C + r * ldc + (NV - 1) * W, acc[r][NV - 1], last);
  }
}

// The leftover rows (fewer than a full block) of product_rows, dispatched to a fixed-size kernel.
template <class T, int NV, bool Accumulate, bool Full, int N>
inline void micro_kernel_rest(int rest, T* C, long ldc, const T* row_scale, const T* A, long sr, long sk,
                              const T* B, long ldb, int K, typename Simd<T>::Mask last) {
  if constexpr (N >= 1) {
    if (rest == N)
      micro_kernel<T, N, NV, Accumulate, Full>(C, ldc, row_scale, A, sr, sk, B, ldb, K, last);
    else
      micro_kernel_rest<T, NV, Accumulate, Full, N - 1>(rest, C, ldc, row_scale, A, sr, sk, B, ldb, K, last);
  }
}

// A causal band on the k range of a tile product: row block [r, r_end) only sums over
// k in [r + first, r_end + end) (clipped to [0, K)). The entries outside are masked scores, exactly
// zero, so skipping them changes no bit of the result; it skips most of a diagonal tile's work.
struct KBand {
  int first = -(1 << 29), end = 1 << 29;  // the default: every k for every row
};

template <class T, int NV, bool Accumulate, bool Full>
void product_rows(T* C, long ldc, const T* row_scale, const T* A, long sr, long sk, const T* B, long ldb, int rows,
                  int K, typename Simd<T>::Mask last, KBand band) {
  constexpr int RB = rows_per_block<T>(NV);
  for (int r = 0, n; r < rows; r += n) {
    // Full blocks, but where the last would hold fewer than 8 FMA chains (too few to cover the FMA
    // latency) the last two share what is left past RB rows: 32 rows of 6 × 2 vectors on AVX2 run
    // as 6, 6, 6, 6, 4, 4, not 6, 6, 6, 6, 6, 2.
    n = std::min(RB, rows - r);
    if (rows - r > RB && rows - r < 2 * RB && (rows - r - RB) * NV < 8) n = (rows - r + 1) / 2;
    const int k0 = std::clamp(r + band.first, 0, K), k1 = std::clamp(r + n + band.end, k0, K);
    T* c = C + r * ldc;
    const T* scale = row_scale ? row_scale + r : nullptr;
    const T* a = A + r * sr + k0 * sk;
    const T* b = B + k0 * ldb;
    if (n == RB)
      micro_kernel<T, RB, NV, Accumulate, Full>(c, ldc, scale, a, sr, sk, b, ldb, k1 - k0, last);
    else
      micro_kernel_rest<T, NV, Accumulate, Full, RB - 1>(n, c, ldc, scale, a, sr, sk, b, ldb, k1 - k0, last);
  }
}

// product_rows for a chunk of NV vectors or fewer (nv of them live, the last up to `last`).
template <class T, bool Accumulate, int NV = kMaxVectors<T>>
void product_chunk(int nv, bool full, T* C, long ldc, const T* row_scale, const T* A, long sr, long sk, const T* B,
                   long ldb, int rows, int K, typename Simd<T>::Mask last, KBand band) {
  if constexpr (NV >= 1) {
    if (nv != NV)
      return product_chunk<T, Accumulate, NV - 1>(nv, full, C, ldc, row_scale, A, sr, sk, B, ldb, rows, K, last, band);
    if (full)
      product_rows<T, NV, Accumulate, true>(C, ldc, row_scale, A, sr, sk, B, ldb, rows, K, last, band);
    else
      product_rows<T, NV, Accumulate, false>(C, ldc, row_scale, A, sr, sk, B, ldb, rows, K, last, band);
  }
}

// C[r][0..lanes) (+)= Σ_{k<K} A[r·sr + k·sk] · B[k·ldb + 0..lanes), r < rows: one tile product,
// restricted to the k of `band` on diagonal tiles. A is read by broadcast, so any of its layouts
// (rows of q, columns of a score tile) works in place; B's rows are loaded as vectors, so callers
// pass contiguous copies (see copy_rows). Writing C never touches lanes >= `lanes`.
template <class T, bool Accumulate>
void tile_product(T* C, long ldc, const T* row_scale, const T* A, long sr, long sk, const T* B, long ldb, int rows,
                  int lanes, int K, KBand band = {}) {
  using S = Simd<T>;
  constexpr int W = S::W, MV = kMaxVectors<T>;
  for (int l0 = 0; l0 < lanes; l0 += MV * W) {
    const int n = std::min(MV * W, lanes - l0), nv = (n + W - 1) / W;
    const auto last = S::tail_mask(n - (nv - 1) * W);
    product_chunk<T, Accumulate>(nv, n == nv * W, C + l0, ldc, row_scale, A, sr, sk, B + l0, ldb, rows, K, last,
                                 band);
  }
}

#if ATTNLAB_KERNEL_SIMD == 2
// In-register transpose of a 16×16 float block: unpack pairs, then pairs of pairs, then 128-bit
// lanes twice (the standard four-stage network, 64 shuffles for 256 values).
inline void transpose16x16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}
#endif

#if ATTNLAB_KERNEL_SIMD == 1
// In-register transpose of an 8×8 float block: unpack pairs, shuffle pairs of pairs, then swap
// 128-bit halves (24 shuffles for 64 values).
inline void transpose8x8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
    r[j + 4] = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
  }
}
#endif

// dst[c·ld + r] = scale·src[r·src_stride + c] for r < rows, c < cols; rows..ld-1 of every column
// are zeroed (padding lanes then hold finite values).
template <class T>
inline void pack_transposed(T* dst, int ld, const T* src, long src_stride, int rows, int cols, T scale) {
  for (int c = 0; c < cols; ++c) std::fill(dst + long(c) * ld + rows, dst + long(c) * ld + ld, T(0));
#if ATTNLAB_KERNEL_SIMD == 2
  if constexpr (std::is_same_v<T, float>) {
    // 16×16 blocks through registers: the scalar scatter of the portable loop would cost about a
    // tenth of a short forward task.
    for (int r0 = 0; r0 < rows; r0 += 16)
      for (int c0 = 0; c0 < cols; c0 += 16) {
        const int nr = std::min(16, rows - r0), nc = std::min(16, cols - c0);
        const __mmask16 cm = Simd<float>::tail_mask(nc);
        __m512 x[16];
        for (int r = 0; r < 16; ++r)
          x[r] = r < nr ? _mm512_mul_ps(_mm512_maskz_loadu_ps(cm, src + (r0 + r) * src_stride + c0), _mm512_set1_ps(scale))
                        : _mm512_setzero_ps();
        transpose16x16(x);
        const __mmask16 rm = Simd<float>::tail_mask(nr);
        for (int c = 0; c < nc; ++c) _mm512_mask_storeu_ps(dst + long(c0 + c) * ld + r0, rm, x[c]);
      }
    return;
  }
#elif ATTNLAB_KERNEL_SIMD == 1
  if constexpr (std::is_same_v<T, float>) {
    // 8×8 blocks through registers, as above; rows past `rows` are zeros, so a block's store may
    // cover them whole while it stays inside the column's ld lanes.
    using S = Simd<float>;
    for (int r0 = 0; r0 < rows; r0 += 8)
      for (int c0 = 0; c0 < cols; c0 += 8) {
        const int nr = std::min(8, rows - r0), nc = std::min(8, cols - c0);
        const auto cm = S::tail_mask(nc);
        __m256 x[8];
        for (int r = 0; r < 8; ++r) {
          const float* p = src + (r0 + r) * src_stride + c0;
          x[r] = r >= nr ? S::zero() : S::mul(nc == 8 ? S::load(p) : S::load(p, cm), S::set1(scale));
        }
        transpose8x8(x);
        for (int c = 0; c < nc; ++c) {
          float* d = dst + long(c0 + c) * ld + r0;
          if (r0 + 8 <= ld)
            S::store(d, x[c]);
          else
            S::store(d, x[c], S::tail_mask(nr));
        }
      }
    return;
  }
#endif
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[long(c) * ld + r] = scale * src[r * src_stride + c];
}

// Σ_d a[d]·b[d] over n values (D_i = dout_i·out_i of the backward).
template <class T>
inline T dot(const T* a, const T* b, int n) {
  using S = Simd<T>;
  constexpr int W = S::W;
  typename S::V acc = S::zero();
  int d = 0;
  for (; d + W <= n; d += W) acc = S::fmadd(S::load(a + d), S::load(b + d), acc);
  if (d < n) {
    const auto m = S::tail_mask(n - d);
    acc = S::fmadd(S::load(a + d, m), S::load(b + d, m), acc);
  }
  return S::reduce_add(acc);
}

// lane[r] = r: the query (forward) or key (backward) offset of each lane of a tile row.
template <class T>
struct LaneIndex {
  alignas(64) T at[kTile<T>];
  LaneIndex() { for (int r = 0; r < kTile<T>; ++r) at[r] = T(r); }
};

// dst[r·ld + 0..cols) = src[r·src_stride + 0..cols) for r < rows. Tile operands that are loaded as
// vectors (B of tile_product) are copied contiguous first: rows of the packed qkv buffer sit
// (H+2Hkv)·Dh floats apart, a stride that maps a tile's rows onto a few L1 sets, so reading them
// in place re-fetches them from L2 at every row block.
template <class T>
inline void copy_rows(T* dst, long ld, const T* src, long src_stride, int rows, int cols) {
  using S = Simd<T>;
  constexpr int W = S::W;
  for (int r = 0; r < rows; ++r) {
    int c = 0;
    for (; c + W <= cols; c += W) S::store(dst + r * ld + c, S::load(src + r * src_stride + c));
    if (c < cols) {
      const auto m = S::tail_mask(cols - c);
      S::store(dst + r * ld + c, S::load(src + r * src_stride + c, m), m);
    }
  }
}

// Asks for rows of a strided operand ahead of use, into L2. Rows of the packed qkv buffer are a
// few KiB apart, mostly on different pages, where the hardware prefetchers do not follow.
template <class T>
inline void prefetch_rows(const T* src, long src_stride, int rows, int cols) {
#if defined(__SSE__)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; c += 64 / int(sizeof(T)))
      _mm_prefetch(reinterpret_cast<const char*>(src + r * src_stride + c), _MM_HINT_T1);
#else
  (void)src, (void)src_stride, (void)rows, (void)cols;
#endif
}

// Row length of the contiguous tiles: Dh rounded up to whole vectors, so every row is aligned.
template <class T>
inline int padded_head_dim(int Dh) {
  constexpr int W = Simd<T>::W;
  return (Dh + W - 1) / W * W;
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET::detail
