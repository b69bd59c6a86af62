// attnlab kernels: the avx512 attention kernel set (AVX-512F, sixteen float lanes), compiled for
// that instruction set whatever the build's -march, and used only where the CPU has AVX-512F, AVX2
// and FMA (attention.cpp). The file's body: kernels/attention_set.inc.
#include "kernels/attention.h"

#define ATTNLAB_KERNEL_SET avx512
#define ATTNLAB_KERNEL_SIMD 2
#define ATTNLAB_KERNEL_TARGET "avx512f,avx2,fma"
#include "kernels/attention_set.inc"
