#!/usr/bin/env python3
"""The ring all-reduce cost model of docs/distributed.md ("What it costs on a network"): the
efficiency of data-parallel training on N ranks for the bench shape and a GPT-2-small shape on 10,
25 and 100 Gb/s networks, printed as the markdown table there.

  t_comm = 2(N-1)/N * S / BW + 2(N-1) * k * alpha      (S: gradient bytes, k: buckets, alpha: latency per message)
  E_no_overlap = t_c / (t_c + t_comm)
  E_overlap    = t_c / (t_c + max(t_comm - 2/3 t_c, f_end * t_comm))

t_c is a rank's compute per step: its tokens x model FLOPs per token / the FLOP rate of a rank,
here 32 cores at the rate measured on this project's machine (--core-tokens-per-s on the bench
shape, 1 thread). The backward, about 2/3 of t_c, is the window the sums can hide in; f_end is the
share of the gradient only the end of the backward completes (the tied embedding: 40% of the
bench shape's bytes, 32% of GPT-2 small's), which never overlaps.

  scripts/data_parallel_model.py [--core-tokens-per-s 3746] [--cores 32]
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--core-tokens-per-s", type=float, default=3746, help="bench shape, 1 thread, measured")
p.add_argument("--cores", type=int, default=32, help="cores per rank")
a = p.parse_args()
bench_flops_per_token = 3.3e7  # attnlab info --preset bench
rank_flops = a.cores * a.core_tokens_per_s * bench_flops_per_token
# name, gradient bytes, tokens per rank and step, model FLOPs per token, f_end, bucket MB
shapes = [("bench", 21.29e6, 16 * 256, bench_flops_per_token, 0.40, 1),
          ("GPT-2 small", 497.8e6, 8 * 1024, 8.0e8, 0.32, 25)]
print("| shape (per-rank compute, buckets) | network | N = 2 | N = 8 | N = 32 |")
print("|---|---|---|---|---|")
for name, S, tokens, fpt, f_end, bucket_mb in shapes:
    tc = tokens * fpt / rank_flops
    k = int(S / (bucket_mb * 1e6)) + 1
    for gbps, alpha in ((10, 25e-6), (25, 25e-6), (100, 5e-6)):
        bw = gbps * 1e9 / 8
        cells = []
        for N in (2, 8, 32):
            t = 2 * (N - 1) / N * S / bw + 2 * (N - 1) * k * alpha
            exposed = max(t - 2 / 3 * tc, f_end * t)
            cells.append("%.0f ms: %.0f%% / %.0f%%" % (t * 1e3, 100 * tc / (tc + t), 100 * tc / (tc + exposed)))
        print("| %s (t_c = %.0f ms, %d MB buckets) | %d Gb/s | %s |" % (name, tc * 1e3, bucket_mb, gbps, " | ".join(cells)))
