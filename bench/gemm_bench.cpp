// Chooses the GEMM library: times attnlab::gemm (oneDNN matmul) against OpenBLAS's cblas_sgemm on
// the products one training step of the bench model makes (forward, dX = dY·Wᵀ, dW += Xᵀ·dY), with
// the same threads, alternating, median of repeats. Result and command: docs/performance.md.
//   build/release/gemm_bench            (OpenBLAS runs under this environment's OPENBLAS_CORETYPE;
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/release/gemm_bench   to see its best case)
// With -DATTNLAB_MKL_ROOT=DIR at configure time (an unpacked PyPI `mkl` + `mkl-include`, see
// docs/performance.md) a third column times MKL's cblas_sgemm through its GNU OpenMP layer.
// gemm() (oneDNN) runs twice per product: "direct" with its strided copies forced off, "copies"
// forced on (core/gemm.h: products with a transposed first operand whose rows lie a multiple of
// 4 KiB apart); the header says which of the two training uses on this CPU. The "bf16" column times
// gemm(bf16) on the same shapes (bf16 operands, float result: train.precision = bf16's products),
// and the header says whether this CPU runs it natively or widens to float.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/arena.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#ifdef ATTNLAB_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef ATTNLAB_HAVE_MKL
#include <mkl_cblas.h>
#endif

using namespace attnlab;

namespace {
struct Shape { const char* what; bool ta, tb; int M, N, K; float beta; };

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main() {
  // B*T = 4096 rows, d = 256, 4d = 1024, qkv = 768, V = 8192 (chunk of 512 rows for the LM head).
  const Shape shapes[] = {
      {"qkv fwd   X·W", false, false, 4096, 768, 256, 0.f},
      {"fc fwd    X·W", false, false, 4096, 1024, 256, 0.f},
      {"proj fwd  X·W", false, false, 4096, 256, 1024, 0.f},
      {"fc dX     dY·Wᵀ", false, true, 4096, 256, 1024, 0.f},
      {"fc dW     Xᵀ·dY", true, false, 256, 1024, 4096, 1.f},
      {"fc2 dW    Xᵀ·dY", true, false, 1024, 256, 4096, 1.f},
      {"qkv dW    Xᵀ·dY", true, false, 256, 768, 4096, 1.f},
      {"head fwd  X·Eᵀ", false, true, 512, 8192, 256, 0.f},
      {"head dX   dL·E", false, false, 512, 256, 8192, 0.f},
      {"head dE   dLᵀ·X", true, false, 8192, 256, 512, 1.f},
      // mHC's maps (n = 4 streams: nd = 1024, M = n² + 2n = 24 projections): x⃗·Φ and dΦᵀ = zᵀ·x⃗
      {"mhc fwd   X·Φ", false, true, 4096, 24, 1024, 0.f},
      {"mhc dΦ    zᵀ·X", true, false, 24, 1024, 4096, 0.f},
  };
  const size_t max_elems = size_t(8192) * 4096;
  Buffer A(max_elems * 4), B(max_elems * 4), C(max_elems * 4), Ah(max_elems * 2), Bh(max_elems * 2);
  Rng rng(1);
  for (size_t i = 0; i < max_elems; ++i) {
    A.as<float>()[i] = float(rng.normal());
    B.as<float>()[i] = float(rng.normal());
  }
  to_bf16(Ah.as<bf16>(), A.as<float>(), max_elems);
  to_bf16(Bh.as<bf16>(), B.as<float>(), max_elems);
  std::printf("threads: %d; GFLOP/s, median of 15 alternating repeats; strided copies %s here; bf16 %s\n",
              omp_threads(), gemm_strided_copies_active() ? "on" : "off",
              bf16_matmul_native() ? "native (oneDNN bf16 matmul)" : "widened to float (no bf16 matmul here)");
  std::printf("| product | M×N×K | oneDNN direct | oneDNN copies | OpenBLAS | MKL | oneDNN bf16 |\n"
              "|---|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<double> t_direct, t_copies, t_blas, t_mkl, t_half;
    for (int rep = 0; rep < 17; ++rep) {
      const GemmStridedCopies modes[2] = {GemmStridedCopies::never, GemmStridedCopies::always};
      std::vector<double>* times[2] = {&t_direct, &t_copies};
      Timer t;
      for (int m = 0; m < 2; ++m) {
        set_gemm_strided_copies(modes[m]);
        t.reset();
        gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.as<float>(), lda, B.as<float>(), ldb, s.beta, C.as<float>(), s.N);
        if (rep >= 2) times[m]->push_back(t.seconds());
      }
      set_gemm_strided_copies(GemmStridedCopies::automatic);
#ifdef ATTNLAB_HAVE_OPENBLAS
      t.reset();
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
                  A.as<float>(), lda, B.as<float>(), ldb, s.beta, C.as<float>(), s.N);
      if (rep >= 2) t_blas.push_back(t.seconds());
#endif
#ifdef ATTNLAB_HAVE_MKL
      t.reset();
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f,
                  A.as<float>(), lda, B.as<float>(), ldb, s.beta, C.as<float>(), s.N);
      if (rep >= 2) t_mkl.push_back(t.seconds());
#endif
      t.reset();
      gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, Ah.as<bf16>(), lda, Bh.as<bf16>(), ldb, s.beta, C.as<float>(), s.N);
      if (rep >= 2) t_half.push_back(t.seconds());
    }
    const double flops = 2.0 * s.M * s.N * s.K;
    std::printf("| %s | %d×%d×%d | %.0f | %.0f | ", s.what, s.M, s.N, s.K, flops / median(t_direct) / 1e9,
                flops / median(t_copies) / 1e9);
    if (t_blas.empty()) std::printf("n/a | ");
    else std::printf("%.0f | ", flops / median(t_blas) / 1e9);
    if (t_mkl.empty()) std::printf("n/a | ");
    else std::printf("%.0f | ", flops / median(t_mkl) / 1e9);
    std::printf("%.0f |\n", flops / median(t_half) / 1e9);
  }
  return 0;
}
