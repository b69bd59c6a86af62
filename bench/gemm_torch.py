#!/usr/bin/env python3
"""The products of bench/gemm_bench.cpp (one training step of the bench model) timed in PyTorch's
own matmul, fp32 (MKL in the PyPI wheels) and bf16 (bf16 operands and result, as under autocast;
oneDNN in the wheels), same threads, median of 15 repeats after 2: the GEMM speed the PyTorch peer
starts from, to set beside gemm_bench's oneDNN columns.

    /path/to/python-with-torch bench/gemm_torch.py [--threads 2]
"""
import argparse
import statistics
import time

import torch

SHAPES = [  # what, A transposed, B transposed, M, N, K, beta (as in gemm_bench.cpp)
    ("qkv fwd   X·W", False, False, 4096, 768, 256, 0.0),
    ("fc fwd    X·W", False, False, 4096, 1024, 256, 0.0),
    ("proj fwd  X·W", False, False, 4096, 256, 1024, 0.0),
    ("fc dX     dY·Wᵀ", False, True, 4096, 256, 1024, 0.0),
    ("fc dW     Xᵀ·dY", True, False, 256, 1024, 4096, 1.0),
    ("head fwd  X·Eᵀ", False, True, 512, 8192, 256, 0.0),
    ("head dX   dL·E", False, False, 512, 256, 8192, 0.0),
    ("head dE   dLᵀ·X", True, False, 8192, 256, 512, 1.0),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}; GFLOP/s, median of 15 repeats")
    print("| product | M×N×K | torch fp32 | torch bf16 |\n|---|---|---:|---:|")
    for what, ta, tb, M, N, K, beta in SHAPES:
        rates = []
        for dtype in (torch.float32, torch.bfloat16):
            a = torch.randn(*((K, M) if ta else (M, K)), generator=g).to(dtype)
            b = torch.randn(*((N, K) if tb else (K, N)), generator=g).to(dtype)
            a, b = (a.t() if ta else a), (b.t() if tb else b)  # row-major storage, as in gemm_bench
            c = torch.randn(M, N, generator=g).to(dtype)
            times = []
            for rep in range(17):
                t = time.perf_counter()
                if beta:
                    c.addmm_(a, b)
                else:
                    torch.mm(a, b, out=c)
                if rep >= 2:
                    times.append(time.perf_counter() - t)
            rates.append(2.0 * M * N * K / statistics.median(times) / 1e9)
        print(f"| {what} | {M}×{N}×{K} | {rates[0]:.0f} | {rates[1]:.0f} |")


if __name__ == "__main__":
    main()
