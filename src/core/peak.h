// attnlab core: the machine's fp32 (and bf16) peak, measured, as the denominator of MFU figures.
// docs/performance.md ("Model FLOPs and MFU") has the method and the values measured so far.
#pragma once

namespace attnlab {

struct PeakFlops {
  double gflops = 0;          // fp32 GFLOP/s over `threads` threads (an FMA counts 2 FLOPs)
  int threads = 0;
  const char* source = "";    // "measured" or "ATTNLAB_PEAK_GFLOPS"
  const char* isa = "";       // the widest vector FMA this CPU runs (chosen at run time, whatever the -march)
};

// The FMA throughput of this machine over `threads` OpenMP threads: a register-only loop of
// independent vector FMAs (of the widest ISA this binary is compiled for: AVX-512, AVX2 + FMA, or
// the compiler's code for scalar a·b + c elsewhere) run by every thread at once; each thread's best
// rate over 40 trials of about 2 ms, summed over the threads (a shared core only ever reads low,
// and the best of many short trials finds moments it was not shared). About 0.1 s the first time;
// cached per process for the last thread count asked. ATTNLAB_PEAK_GFLOPS (a positive number)
// replaces the measurement, for users who know their peak or want one figure across machines.
// bf16 = true: the peak of the bf16 products instead (train.precision = bf16): AVX512-BF16's dot
// product (64 FLOPs per instruction) where the CPU has it, else the float FMA peak (gemm(bf16)
// widens to float there); ATTNLAB_PEAK_GFLOPS_BF16 replaces it.
PeakFlops peak_flops(int threads, bool bf16 = false);

}  // namespace attnlab
