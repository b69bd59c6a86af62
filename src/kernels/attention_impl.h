// attnlab kernels: the fast attention kernels of one kernel set, that is one instruction set.
// kernels/attention.h explains the algorithm and the public API; this file is its body, included
// once per set: by attention.h as set `baseline` (whatever the compile flags allow) and by
// src/kernels/attention_avx2.cpp / attention_avx512.cpp inside a region compiled for that
// instruction set (kernels/target.h), for the run-time choice of attention.cpp. Each inclusion
// defines namespace attnlab::kernels::ATTNLAB_KERNEL_SET, so no two sets share a symbol (an
// inline function compiled for AVX-512 can never stand in for the AVX2 one at link time).
// Before including: ATTNLAB_KERNEL_SET (the namespace) and ATTNLAB_KERNEL_SIMD (float vectors:
// 0 one lane, 1 AVX2 + FMA, 2 AVX-512, 3 ARM NEON); the includer undefines them after. No include
// guard on purpose.

namespace attnlab::kernels::ATTNLAB_KERNEL_SET {

namespace detail {

// ---------------------------------------------------------------------------------------------
// SIMD layer: the handful of vector operations the tiles need. The portable version is one lane
// wide; float is sixteen on AVX-512, eight on AVX2 + FMA and four on NEON (ATTNLAB_KERNEL_SIMD).
// kRegs is the number of vector registers the micro-kernel's register blocking may plan for.
// ---------------------------------------------------------------------------------------------
template <class T>
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

#if ATTNLAB_KERNEL_SIMD == 2
template <>
struct Simd<float> {
  static constexpr int W = 16;
  static constexpr int kRegs = 32;
  using V = __m512;
  using Mask = __mmask16;
  static Mask tail_mask(int n) { return n >= 16 ? Mask(0xFFFF) : Mask((1u << n) - 1u); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static void store(float* p, V x, Mask m) { _mm512_mask_storeu_ps(p, m, x); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V max(V a, V b) { return _mm512_maskz_max_ps(Mask(0xFFFF), a, b); }
  // exp(x) = 2^n·2^f with n = round(x·log2e), f = x·log2e − n in [−1/2, 1/2] (log2e split in two
  // floats so that f keeps full precision up to |x| = 88), 2^f by the degree-6 polynomial of Cephes
  // exp2f, and 2^n added to the exponent bits. 1.6 ulp at worst over [−87.3, 88.3]. n comes from the
  // 1.5·2^23 trick (its low mantissa bits), so no rounding or scaling instruction is needed. Results
  // below e^−87.33 (the smallest normal float) are exactly 0: masked scores (−inf) then contribute
  // nothing, and no denormal reaches the FMAs (they cost microcode assists when FTZ/DAZ are off).
  static V exp(V x) {
    const Mask live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33f), _CMP_GE_OQ);
    x = _mm512_maskz_min_ps(Mask(0xFFFF), x, _mm512_set1_ps(88.3f));
    const V magic = _mm512_set1_ps(12582912.0f);  // 1.5·2^23
    const V t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    const V n = _mm512_sub_ps(t, magic);
    V f = _mm512_fmsub_ps(x, _mm512_set1_ps(1.44269502162933349609375f), n);
    f = _mm512_fmadd_ps(x, _mm512_set1_ps(1.925963033500011e-08f), f);
    V p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __m512i scale = _mm512_maskz_slli_epi32(Mask(0xFFFF), _mm512_castps_si512(t), 23);  // n·2^23: the magic's bits shift out
    return _mm512_castsi512_ps(_mm512_maskz_add_epi32(live, _mm512_castps_si512(p), scale));
  }
  static float reduce_add(V x) { return _mm512_reduce_add_ps(x); }
};
#elif ATTNLAB_KERNEL_SIMD == 1
// The same operations on eight lanes (AVX2 + FMA, 16 registers). Masks are lane vectors of all ones
// (live) or zeros; masked loads read nothing from dead lanes (no fault past the end of a row).
template <>
struct Simd<float> {
  static constexpr int W = 8;
  static constexpr int kRegs = 16;
  using V = __m256;
  using Mask = __m256i;
  static Mask tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static void store(float* p, V x, Mask m) { _mm256_maskstore_ps(p, m, x); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  // The AVX-512 exp above, operation for operation (same constants, same 1.6 ulp): only the masking
  // differs. Lanes below e^−87.33, −inf and NaN are cleared with an AND of the ordered compare.
  static V exp(V x) {
    const V live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_GE_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
    const V magic = _mm256_set1_ps(12582912.0f);  // 1.5·2^23
    const V t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
    const V n = _mm256_sub_ps(t, magic);
    V f = _mm256_fmsub_ps(x, _mm256_set1_ps(1.44269502162933349609375f), n);
    f = _mm256_fmadd_ps(x, _mm256_set1_ps(1.925963033500011e-08f), f);
    V p = _mm256_set1_ps(1.535336188319500e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i scale = _mm256_slli_epi32(_mm256_castps_si256(t), 23);  // n·2^23: the magic's bits shift out
    return _mm256_and_ps(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), scale)), live);
  }
  static float reduce_add(V x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
  }
};
#elif ATTNLAB_KERNEL_SIMD == 3
// ARM NEON (AArch64): four lanes, 32 registers. NEON has no masked load or store, so the masked
// forms go through a small stack copy lane by lane (they only ever touch a row's tail); masks are
// lane vectors of all ones (live) or zeros as on AVX2.
template <>
struct Simd<float> {
  static constexpr int W = 4;
  static constexpr int kRegs = 32;
  using V = float32x4_t;
  using Mask = uint32x4_t;
  static Mask tail_mask(int n) {
    const uint32_t lanes[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(lanes), vdupq_n_u32(uint32_t(std::max(n, 0))));
  }
  static V zero() { return vdupq_n_f32(0.0f); }
  static V set1(float x) { return vdupq_n_f32(x); }
  static V load(const float* p) { return vld1q_f32(p); }
  static V load(const float* p, Mask m) {
    uint32_t live[4];
    float x[4];
    vst1q_u32(live, m);
    for (int l = 0; l < 4; ++l) x[l] = live[l] ? p[l] : 0.0f;
    return vld1q_f32(x);
  }
  static void store(float* p, V x) { vst1q_f32(p, x); }
  static void store(float* p, V x, Mask m) {
    uint32_t live[4];
    float v[4];
    vst1q_u32(live, m);
    vst1q_f32(v, x);
    for (int l = 0; l < 4; ++l)
      if (live[l]) p[l] = v[l];
  }
  static V fmadd(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V max(V a, V b) { return vmaxq_f32(a, b); }
  // The AVX-512 exp, operation for operation (same constants); lanes below e^−87.33, −inf and NaN
  // are cleared with an AND of the ordered compare.
  static V exp(V x) {
    const uint32x4_t live = vcgeq_f32(x, vdupq_n_f32(-87.33f));
    x = vminq_f32(x, vdupq_n_f32(88.3f));
    const V magic = vdupq_n_f32(12582912.0f);  // 1.5·2^23
    const V t = vfmaq_f32(magic, x, vdupq_n_f32(1.44269504088896341f));
    const V n = vsubq_f32(t, magic);
    V f = vfmaq_f32(vnegq_f32(n), x, vdupq_n_f32(1.44269502162933349609375f));
    f = vfmaq_f32(f, x, vdupq_n_f32(1.925963033500011e-08f));
    V p = vdupq_n_f32(1.535336188319500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.339887440266574e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(9.618437357674640e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(5.550332471162809e-2f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2.402264791363012e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(6.931472028550421e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    const int32x4_t scale = vshlq_n_s32(vreinterpretq_s32_f32(t), 23);  // n·2^23: the magic's bits shift out
    const int32x4_t e = vaddq_s32(vreinterpretq_s32_f32(p), scale);
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(e), live));
  }
  static float reduce_add(V x) { return vaddvq_f32(x); }
};
#endif

// Tile edge: query rows per forward task, key columns per backward key tile. 64 keeps a tile's
// score block (16 KiB in float) and its operands in L1/L2; the one-lane path uses 8 so that the
// double tests cross many tile boundaries.
template <class T>
inline constexpr int kTile = Simd<T>::W == 1 ? 8 : 4 * Simd<T>::W;

// Rows of D_i = dout_i·out_i a backward task keeps (32 KiB of stack in float).
inline constexpr int kDCacheRows = 8192;

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

// One decoding step's attention for head h of batch b: a single query row (s.Tq == 1) against the
// keys 0..pos_offset. The tiled task above would pack a tile of kTile query rows for it (one live)
// and copy every value row; here each key costs one dot product over Dh and one scaled add of its
// value, in blocks of kDecodeBlock keys: the block's scores, their max, the rescale of the running
// sum and output (the online softmax of the tiles, one row wide), then Σ p_j·v_j. Same extras, same
// epilogue.
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

// One backward task: batch b, KV head kappa, with its G query heads, over the queries [qa, qb) (see
// the file comment). It writes dQ of those rows, and the dK, dV its queries give to the keys
// [0, key_end) at dk_out + j·out_stride, dv_out + j·out_stride (key_end = Tk for a task over every
// query: keys no query sees get zero). A task over all the queries writes the final dK, dV; a task
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

// Whether a call is worth a parallel region: below ~2 MFLOP (a few microseconds of work) the
// fork/join costs more than it saves, and on a busy machine a spinning team costs milliseconds.
inline bool worth_threads(const AttentionShape& s) {
  const double flops = 4.0 * s.B * s.H * s.Dh * s.Tq * (s.pos_offset + 0.5 * (s.Tq + 1));
  return flops > 2e6;
}

// A decoding step reads B·H slices of the key and value caches with 2 FLOPs per value read:
// memory-bound, so the threshold is on bytes, far below worth_threads' (which kept the step on one
// thread up to ~2000 cached positions at H = 4, Dh = 64). With 2 threads, from 32 positions on (64
// KiB) the split ran 1.2–1.8× faster (docs/performance.md, Decode).
template <class T>
bool worth_threads_decode(const AttentionShape& s) {
  return s.B * s.H > 1 && 2.0 * s.B * s.H * s.Dh * (s.pos_offset + 1) * sizeof(T) >= 65536;
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

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Fast kernels of this set (documented at their public entry points in attention.h)
// ---------------------------------------------------------------------------------------------

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

// out[i] = exp(in[i]) for i < n with this set's vector exp (the softmax's; the tests check it).
template <class T>
void vector_exp(T* out, const T* in, int n) {
  using S = detail::Simd<T>;
  int i = 0;
  for (; i + S::W <= n; i += S::W) S::store(out + i, S::exp(S::load(in + i)));
  if (i < n) {
    const auto m = S::tail_mask(n - i);
    S::store(out + i, S::exp(S::load(in + i, m)), m);
  }
}

}  // namespace attnlab::kernels::ATTNLAB_KERNEL_SET
