#!/usr/bin/env python3
"""Two builds of attnlab, alternated in one run: the training step of each model under each binary
(`attnlab bench --json`), binary A then B then A ..., for several rounds, so that drift of the
machine (frequency, a neighbour) lands on both. Prints, per model, the median ms per step of each
binary and the ratio B / A with the spread of the per-round ratios. For refactors that must not
slow the engine (issue 24: the standard, XSA and GOAT models within ±1%).

  python3 bench/ab_binaries.py OLD/attnlab NEW/attnlab [--rounds 7] [--steps 10]

Time it on a quiet machine (no build or training beside it). The models are the `bench` preset
(L = 4, d = 256, T = 256, B = 16) with learned positions (standard), RoPE + XSA, and GOAT.
"""
import argparse
import json
import statistics
import subprocess
import sys

MODELS = {
    "standard": [],
    "xsa": ["attn.pos=rope", "attn.xsa=on"],
    "goat": ["attn.pos=goat"],
}


def step_ms(binary, sets, steps, warmup):
    cmd = [binary, "bench", "--preset", "bench", "--steps", str(steps), "--warmup", str(warmup), "--json"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ms_per_step_median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    times = {m: {"a": [], "b": []} for m in MODELS}
    for r in range(args.rounds):
        for model, sets in MODELS.items():
            order = ("a", "b") if r % 2 == 0 else ("b", "a")  # alternate which binary goes first
            for which in order:
                times[model][which].append(step_ms(getattr(args, which), sets, args.steps, args.warmup))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'model':10} {'A ms/step':>10} {'B ms/step':>10} {'B/A':>7} {'per-round B/A (min..max)':>26}")
    for model in MODELS:
        a, b = times[model]["a"], times[model]["b"]
        ratios = [y / x for x, y in zip(a, b)]
        print(f"{model:10} {statistics.median(a):10.2f} {statistics.median(b):10.2f} "
              f"{statistics.median(b) / statistics.median(a):7.4f} "
              f"{min(ratios):12.4f}..{max(ratios):.4f}")


if __name__ == "__main__":
    main()
