// attnlab kernels, fused attention: the fast kernels of one kernel set, that is one instruction set.
// kernels/attention.h explains the algorithm and the public API; this file is their body, included
// once per set: by attention.h as set `baseline` (whatever the compile flags allow) and by
// src/kernels/attention_avx2.cpp / attention_avx512.cpp inside a region compiled for that
// instruction set (kernels/attention_set.inc), for the run-time choice of attention.cpp. Each
// inclusion defines namespace attnlab::kernels::ATTNLAB_KERNEL_SET (and the set's own Simd type),
// so no two sets share a symbol (an inline function compiled for AVX-512 can never stand in for the
// AVX2 one at link time).
// Before including: ATTNLAB_KERNEL_SET (the namespace) and ATTNLAB_KERNEL_SIMD (float vectors:
// 0 one lane, 1 AVX2 + FMA, 2 AVX-512, 3 ARM NEON); the includer undefines them after. No include
// guard on purpose. The parts, in the order each needs the ones before:
#include "kernels/simd_set.inc"         // the set's Simd (kernels/simd.h) and vector_exp
#include "kernels/attention/tile.h"      // tile sizes, the micro-kernel, tile_product, packing
#include "kernels/attention/decode.h"    // one query row per head (a decoding step)
#include "kernels/attention/forward.h"   // forward tasks and the set's attention_forward
#include "kernels/attention/backward.h"  // backward tasks and the set's attention_backward
