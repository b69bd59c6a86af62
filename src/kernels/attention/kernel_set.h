// attnlab kernels, fused attention: the kernel sets, one per instruction set, and the run-time
// choice among them (defined in src/kernels/attention.cpp; each x86 set is compiled by its own
// src/kernels/attention_<set>.cpp through attention_set.inc).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/attention/shape.h"

namespace attnlab::kernels {

// ---------------------------------------------------------------------------------------------
// Kernel sets. One build carries the float kernels for several instruction sets and picks one at
// run time, the widest this CPU runs, so a binary built for a portable target (the `portable`
// preset) still uses AVX-512 or AVX2 where the CPU has them. On x86-64: avx512 (16 lanes), avx2
// (AVX2 + FMA, 8 lanes) and baseline (what the compile flags allow: one lane for a plain x86-64
// target, the widest of the two under -march=native). AArch64: baseline only, which is NEON (4
// lanes; every AArch64 CPU has it). Other CPUs: baseline, one lane. The environment
// variable ATTNLAB_KERNELS=<name> forces a set (an error if this CPU cannot run it), as does
// use_attention_kernels. Sets differ by float rounding only; the tests run each set this CPU has
// against the same references.
// ---------------------------------------------------------------------------------------------
struct AttentionKernelSet {
  const char* name;
  int lanes;  // float lanes per vector
  int tile;   // query rows per forward task, keys per backward tile
  void (*forward)(float*, float*, const float*, const float*, const float*, const float*, float,
                  const AttentionShape&, const AttentionExtras<float>&);
  size_t (*backward_scratch_size)(const AttentionShape&);
  void (*backward)(float*, float*, float*, float*, const float*, const float*, const float*, const float*,
                   const float*, const float*, const float*, float, const AttentionShape&,
                   const AttentionExtras<float>&, float*, size_t);
  void (*vector_exp)(float*, const float*, int);
};

// The AttentionKernelSet of the kernels in namespace attnlab::kernels::<set> (attention/set_body.h),
// named after it. Two levels, so a macro argument (attention_set.inc passes ATTNLAB_KERNEL_SET)
// is expanded before # turns it into the name.
#define ATTNLAB_ATTENTION_KERNEL_SET(set) ATTNLAB_ATTENTION_KERNEL_SET_(set)
#define ATTNLAB_ATTENTION_KERNEL_SET_(set)                                                             \
  ::attnlab::kernels::AttentionKernelSet {                                                           \
    #set, set::detail::Simd<float>::W, set::detail::kTile<float>, &set::attention_forward<float>,    \
        &set::attention_backward_scratch_size<float>, &set::attention_backward<float>,                \
        &set::vector_exp<float>                                                                      \
  }

// The active set: chosen at the first call (ATTNLAB_KERNELS if set, else the widest this CPU runs).
const AttentionKernelSet& attention_kernels();
// Names of the sets this binary carries and this CPU runs, widest first.
std::vector<std::string> attention_kernel_sets();
// Makes `name` the active set; fails, naming the sets available, if it is unknown or this CPU
// cannot run it. Not safe while kernels run on other threads: call it between steps.
void use_attention_kernels(std::string_view name);

}  // namespace attnlab::kernels
