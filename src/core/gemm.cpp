// oneDNN matmul behind attnlab::gemm: Debian's 2.6 by default, or a 3.x (CMakeLists.txt,
// ATTNLAB_ONEDNN_DIR; the two differ only in how a primitive is described, below). Primitives are
// created once per distinct shape and reused (creation costs ~100 us; a training step calls gemm ~30
// times with a handful of shapes).
// Threads: gemm() may run on several threads at once (two Models, each on its own thread: the
// public API's promise). A cached primitive's memory objects carry the data handles of the call in
// flight, and the copy workspaces are scratch, so each thread has its own engine, stream, cache and
// workspaces (thread_local): no lock on the single-threaded path, and a thread's primitives are the
// ones it would have built alone, so its results are bit-identical either way.
#include "core/gemm.h"

#include <dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "core/arena.h"
#include "core/error.h"

namespace attnlab {
namespace detail {
std::atomic<bool> onednn_executing{false};
}
namespace {

// (bf16 inputs, transA, transB, M, N, K, lda, ldb, ldc, alpha, beta)
using Key = std::tuple<bool, bool, bool, int, int, int, int, int, int, float, float>;

// A primitive with its memory objects and argument map, built once per shape: a call only swaps the
// data handles, so the training step does not allocate inside gemm().
struct Cached {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  dnnl_exec_arg_t args[3];  // the C API takes a plain array: no std::vector built per call
};

struct Engine {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<Key, Cached> cache;
};

// One per calling thread (see the top of the file).
Engine& engine() {
  thread_local Engine e;
  return e;
}

Cached& lookup(Engine& e, bool half, bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc, float alpha,
               float beta) {
  Key key{half, ta, tb, M, N, K, lda, ldb, ldc, alpha, beta};
  auto it = e.cache.find(key);
  if (it != e.cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  // Row-major strides; a transposed operand is the same bytes read with swapped strides.
  const dt in = half ? dt::bf16 : dt::f32;
  dnnl::memory::desc a(dims{M, K}, in, ta ? dims{1, lda} : dims{lda, 1});
  dnnl::memory::desc b(dims{K, N}, in, tb ? dims{1, ldb} : dims{ldb, 1});
  dnnl::memory::desc c(dims{M, N}, dt::f32, dims{ldc, 1});
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
#if DNNL_VERSION_MAJOR >= 3
  // 3.x has no output scales: alpha is a linear post-op, applied to the product before the sum (one
  // rounding of alpha·acc, as the 2.x output scale).
  if (alpha != 1.0f) po.append_eltwise(dnnl::algorithm::eltwise_linear, alpha, 0.0f);
#else
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
#endif
  if (beta != 0.0f) po.append_sum(beta);
  if (po.len() > 0) attr.set_post_ops(po);
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(e.eng, a, b, c, attr);
#else
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, e.eng);
#endif
  dnnl::memory ma(a, e.eng, DNNL_MEMORY_NONE), mb(b, e.eng, DNNL_MEMORY_NONE), mc(c, e.eng, DNNL_MEMORY_NONE);
  Cached entry{dnnl::matmul(pd), ma, mb, mc, {{DNNL_ARG_SRC, ma.get()}, {DNNL_ARG_WEIGHTS, mb.get()}, {DNNL_ARG_DST, mc.get()}}};
  auto res = e.cache.emplace(key, std::move(entry));
  return res.first->second;
}

std::atomic<int> strided_copies_mode{int(GemmStridedCopies::automatic)};
std::atomic<bool> bf16_widen_forced{false};

constexpr int kAliasFloats = 1024;  // rows a multiple of 4 KiB apart share L1 sets
constexpr int kNarrowMax = 256;     // ... and cost half the speed up to this width (gemm_bench)
constexpr int kNarrowMin = 16;      // below this the copy costs about what the product does
constexpr int kSlabRows = 512;      // K rows per copied slab: 2 MB at ld 1024, and no slower
constexpr int kRowPad = 16;         // 64 bytes added to each copied row

// The copies' workspace, grown on first use (the training step's warm-up) and then reused; one per
// calling thread, like the primitives.
Buffer& copy_workspace(size_t floats) {
  thread_local Buffer buf;
  if (buf.bytes() < floats * sizeof(float)) buf = Buffer(floats * sizeof(float));
  return buf;
}

// The widened operands of gemm(bf16) where oneDNN has no bf16 matmul (grown on first use).
Buffer& widen_workspace(size_t floats) {
  thread_local Buffer buf;
  if (buf.bytes() < floats * sizeof(float)) buf = Buffer(floats * sizeof(float));
  return buf;
}

void copy_rows(float* dst, int ldd, const float* src, int lds, int rows, int cols) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536)
  for (int r = 0; r < rows; ++r) std::memcpy(dst + (size_t)r * ldd, src + (size_t)r * lds, (size_t)cols * sizeof(float));
}

void execute(bool half, bool transA, bool transB, int M, int N, int K, float alpha, const void* A, int lda,
             const void* B, int ldb, float beta, float* C, int ldc) {
  Engine& e = engine();
  Cached& p = lookup(e, half, transA, transB, M, N, K, lda, ldb, ldc, alpha, beta);
  p.a.set_data_handle(const_cast<void*>(A));
  p.b.set_data_handle(const_cast<void*>(B));
  p.c.set_data_handle(C);
  // oneDNN 2.6 builds a small argument map on the heap inside every execute (a few hundred bytes,
  // from its own code); the no-allocation test attributes those to the library through this flag.
  detail::onednn_executing.store(true, std::memory_order_relaxed);
  const bool ok = dnnl_primitive_execute(p.prim.get(), e.strm.get(), 3, p.args) == dnnl_success;
  e.strm.wait();
  detail::onednn_executing.store(false, std::memory_order_relaxed);
  if (!ok) fail("oneDNN matmul failed (", half ? "bf16 " : "", M, "x", N, "x", K, ")");
}

// C = alpha·Aᵀ·B + beta·C with A (K,M) and B (K,N) stored by rows, where copy_a / copy_b say which
// operand is read from padded copies. Slab by slab over K: the first adds beta·C, the rest add 1·C.
// The sum over K is then split at slab edges, each partial scaled and rounded into C: an element's
// error stays within γ_n·(|alpha|·Σ|a·b| + |beta·c|), n = K + 3 + slabs, a float dot product's bound
// with one rounding more per slab (derived and checked in tests/kernels/test_gemm.cpp).
void gemm_tn_copied(bool copy_a, bool copy_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  const int lda_c = copy_a ? lda + kRowPad : lda, ldb_c = copy_b ? ldb + kRowPad : ldb;
  const int rows = std::min(K, kSlabRows);
  float* ws = copy_workspace((copy_a ? (size_t)rows * lda_c : 0) + (copy_b ? (size_t)rows * ldb_c : 0)).as<float>();
  float* wa = ws;
  float* wb = ws + (copy_a ? (size_t)rows * lda_c : 0);
  for (int k0 = 0; k0 < K; k0 += kSlabRows) {
    const int kk = std::min(kSlabRows, K - k0);
    const float* a = A + (size_t)k0 * lda;
    const float* b = B + (size_t)k0 * ldb;
    if (copy_a) { copy_rows(wa, lda_c, a, lda, kk, M); a = wa; }
    if (copy_b) { copy_rows(wb, ldb_c, b, ldb, kk, N); b = wb; }
    execute(false, true, false, M, N, kk, alpha, a, lda_c, b, ldb_c, k0 == 0 ? beta : 1.0f, C, ldc);
  }
}

// C = beta·C: a product with K = 0 (oneDNN rejects it; the sum is empty).
void scale_c(int M, int N, float beta, float* C, int ldc) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) C[(size_t)m * ldc + n] = beta == 0.0f ? 0.0f : beta * C[(size_t)m * ldc + n];
}

bool cpu_has_avx512f() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace

void set_gemm_strided_copies(GemmStridedCopies mode) { strided_copies_mode.store(int(mode)); }

bool gemm_strided_copies_active() {
  switch (GemmStridedCopies(strided_copies_mode.load())) {
    case GemmStridedCopies::always: return true;
    case GemmStridedCopies::never: return false;
    default: return !cpu_has_avx512f();
  }
}

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (transA && !transB && gemm_strided_copies_active()) {
    const auto narrow = [](int width) { return width >= kNarrowMin && width <= kNarrowMax; };
    const bool copy_a = lda % kAliasFloats == 0 && narrow(N);
    const bool copy_b = ldb % kAliasFloats == 0 && narrow(M);
    if (copy_a || copy_b) return gemm_tn_copied(copy_a, copy_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  execute(false, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_c(M, N, beta, C, ldc);
  if (bf16_matmul_native() && !bf16_widen_forced.load())
    return execute(true, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // No bf16 matmul in oneDNN on this CPU: the operands widened to float (exactly) and multiplied in
  // float — the same products, summed in float as the native path does, only not faster.
  const size_t a_rows = transA ? K : M, a_cols = transA ? M : K;
  const size_t b_rows = transB ? N : K, b_cols = transB ? K : N;
  float* ws = widen_workspace(a_rows * a_cols + b_rows * b_cols).as<float>();
  float* a = ws;
  float* b = ws + a_rows * a_cols;
#pragma omp parallel for schedule(static) if (a_rows * a_cols >= 65536)
  for (size_t r = 0; r < a_rows; ++r) to_float(a + r * a_cols, A + r * lda, a_cols);
#pragma omp parallel for schedule(static) if (b_rows * b_cols >= 65536)
  for (size_t r = 0; r < b_rows; ++r) to_float(b + r * b_cols, B + r * ldb, b_cols);
  gemm(transA, transB, M, N, K, alpha, a, int(a_cols), b, int(b_cols), beta, C, ldc);
}

void set_gemm_bf16_widen(bool on) { bf16_widen_forced.store(on); }

bool bf16_matmul_native() {
  static const bool yes = [] {
    try {
      using dt = dnnl::memory::data_type;
      using dims = dnnl::memory::dims;
      Engine& e = engine();
      dnnl::memory::desc a(dims{16, 16}, dt::bf16, dims{16, 1}), c(dims{16, 16}, dt::f32, dims{16, 1});
#if DNNL_VERSION_MAJOR >= 3
      dnnl::matmul::primitive_desc pd(e.eng, a, a, c);
#else
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), e.eng);
#endif
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return yes;
}

void to_bf16_rows(bf16* dst, size_t ldd, const float* src, size_t lds, int rows, int cols) {
#pragma omp parallel for schedule(static) if ((long)rows * cols >= 65536)
  for (int r = 0; r < rows; ++r) to_bf16(dst + r * ldd, src + r * lds, size_t(cols));
}

const char* gemm_backend_name(bool bf16) {
  if (!bf16) return "oneDNN matmul (fp32)";
  return bf16_matmul_native() ? "oneDNN matmul (bf16 operands)" : "oneDNN matmul (bf16 operands widened to fp32: no bf16 matmul on this CPU)";
}

}  // namespace attnlab
