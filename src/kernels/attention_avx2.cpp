// attnlab kernels: the avx2 attention kernel set (AVX2 + FMA, eight float lanes), compiled for
// that instruction set whatever the build's -march, and used only where the CPU has AVX2 and FMA
// (attention.cpp). The file's body: kernels/attention_set.inc.
#include "kernels/attention.h"

#define ATTNLAB_KERNEL_SET avx2
#define ATTNLAB_KERNEL_SIMD 1
#define ATTNLAB_KERNEL_TARGET "avx2,fma"
#include "kernels/attention_set.inc"
