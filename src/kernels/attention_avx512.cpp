// attnlab kernels: the avx512 attention kernel set (AVX-512F, sixteen float lanes), compiled for
// that instruction set whatever the build's -march, and used only where the CPU has AVX-512F, AVX2
// and FMA (attention.cpp).
// Only the functions defined between the target pragmas get the wider instructions: the standard
// library and the rest of the project stay at the build's target, and the set's own functions
// live in their own namespace (attention_impl.h), so nothing compiled here can stand in for a
// baseline function at link time.
#include "kernels/attention.h"

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's own AVX-512 intrinsics (see attention.h)
#endif
#define ATTNLAB_KERNEL_SET avx512
#define ATTNLAB_KERNEL_SIMD 2
#include "kernels/attention_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

namespace attnlab::kernels {

const AttentionKernelSet& attention_kernel_set_avx512() {
  static constexpr AttentionKernelSet set{"avx512",
                                          avx512::detail::Simd<float>::W,
                                          avx512::detail::kTile<float>,
                                          &avx512::attention_forward<float>,
                                          &avx512::attention_backward_scratch_size<float>,
                                          &avx512::attention_backward<float>,
                                          &avx512::vector_exp<float>};
  return set;
}

}  // namespace attnlab::kernels

#endif  // __x86_64__
