// attnlab core: the one matrix product every forward, dX and dW goes through.
// Row-major: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, op = transpose when trans* is set
// (A stored [K,M] with leading dimension lda when transA, and so on).
// float goes to oneDNN's matmul (chosen by bench/gemm_bench.cpp: see docs/performance.md);
// double (test builds, finite differences) goes to the naive reference below.
#pragma once
#include <atomic>
#include <cstddef>

#include "core/bf16.h"

namespace attnlab {

void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// bf16 operands, float result: C = alpha·op(A)·op(B) + beta·C with each product of two bf16 values
// exact and the sums in float (oneDNN's bf16 matmul: AVX512-BF16 or AMX where the CPU has them,
// else oneDNN's own conversion path). The mixed-precision step's products (train.precision = bf16).
void gemm(bool transA, bool transB, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, float* C, int ldc);
// Whether oneDNN has a bf16 matmul for this CPU (it needs AVX-512; otherwise gemm(bf16) widens the
// operands to float first).
bool bf16_matmul_native();
// Tests: force the widening path on any CPU (true), or back to the CPU's choice (false).
void set_gemm_bf16_widen(bool on);

// The reference: plain triple loop with double accumulation. The oracle for tests and the
// implementation for double.
template <class T>
void gemm_naive(bool transA, bool transB, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                int ldb, T beta, T* C, int ldc) {
#pragma omp parallel for schedule(static)
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const double a = transA ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
        const double b = transB ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
        acc += a * b;
      }
      T& c = C[(size_t)m * ldc + n];
      c = (beta == T(0) ? T(0) : beta * c) + alpha * T(acc);
    }
}

inline void gemm(bool transA, bool transB, int M, int N, int K, double alpha, const double* A, int lda,
                 const double* B, int ldb, double beta, double* C, int ldc) {
  gemm_naive<double>(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace detail {
// True while oneDNN executes a matmul (tests/test_no_alloc.cpp attributes allocations with it).
extern std::atomic<bool> onednn_executing;
}

// Narrow products with a transposed first operand (every dW, the LM head's dE) walk their
// operands' rows, ld floats apart. When ld is a multiple of 4 KiB (1024 floats) and the product is
// narrow (at most 256 on the other side), oneDNN 2.6's AVX2 path runs them at about half speed:
// rows that far apart share L1 cache sets (measured with bench/gemm_bench.cpp; docs/performance.md,
// "The cause: rows 4 KiB apart"). gemm(float) then copies each such operand, 512 rows of K at a
// time, into rows 16 floats longer and multiplies the copies, adding the slabs' products into C.
// `automatic` does so on CPUs without AVX-512 (where it was measured); the choice is fixed per
// machine, so runs are reproducible. Tests and gemm_bench force either form.
enum class GemmStridedCopies { automatic, always, never };
void set_gemm_strided_copies(GemmStridedCopies mode);
bool gemm_strided_copies_active();

// Which backend gemm(float), or with bf16 = true gemm(bf16), uses, for the banners.
const char* gemm_backend_name(bool bf16 = false);

}  // namespace attnlab
