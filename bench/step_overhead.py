#!/usr/bin/env python3
"""Training-step time of configuration variants relative to the first one, measured alternately.

    python3 bench/step_overhead.py --attnlab build/release/attnlab --preset bench \\
        --variant standard:residual.kind=standard \\
        --variant dar-block:residual.kind=dar \\
        --variant dar-full:residual.kind=dar,residual.block_size=1 \\
        [--set model.n_layer=12 ...] [--rounds 7] [--steps 3] [--warmup 1]

Each round runs `attnlab bench --json` once per variant (the order rotates from round to round), so
slow drifts of a shared machine hit every variant alike. Reported per variant: the median over rounds
of the median step time, and the median over rounds of the ratio to the first variant measured in
the same round (the paired ratio is the robust number on a noisy machine). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def run_bench(binary, preset, common, variant_sets, steps, warmup):
    cmd = [binary, "bench", "--preset", preset, "--steps", str(steps), "--warmup", str(warmup), "--json"]
    for kv in common + variant_sets:
        cmd += ["--set", kv]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"step_overhead: {' '.join(cmd)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnlab", default="build/release/attnlab")
    ap.add_argument("--preset", default="bench")
    ap.add_argument("--set", action="append", default=[], help="key=value applied to every variant")
    ap.add_argument("--variant", action="append", required=True,
                    help="name:key=value[,key=value...] (the first variant is the baseline)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args(argv)
    variants = []
    for v in a.variant:
        name, _, sets = v.partition(":")
        variants.append((name, [s for s in sets.split(",") if s]))
    ms = {name: [] for name, _ in variants}
    ratio = {name: [] for name, _ in variants}
    for r in range(a.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        this = {}
        for name, sets in order:
            j = run_bench(a.attnlab, a.preset, a.set, sets, a.steps, a.warmup)
            this[name] = j["ms_per_step_median"]
            ms[name].append(this[name])
        base = variants[0][0]
        for name, _ in variants:
            ratio[name].append(this[name] / this[base])
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{n} {this[n]:.0f} ms" for n, _ in variants),
              file=sys.stderr, flush=True)
    print(f"attnlab bench --preset {a.preset} {' '.join('--set ' + s for s in a.set)}: "
          f"{a.rounds} alternating rounds of {a.steps} timed steps\n")
    print("| variant | settings | median step (ms) | min (ms) | paired ratio to "
          f"{variants[0][0]} (median) | overhead |")
    print("|---|---|---:|---:|---:|---:|")
    for name, sets in variants:
        rr = statistics.median(ratio[name])
        print(f"| {name} | {' '.join(sets) or '-'} | {statistics.median(ms[name]):.0f} | {min(ms[name]):.0f} | "
              f"{rr:.3f} | {100 * (rr - 1):+.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1:])
