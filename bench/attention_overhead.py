#!/usr/bin/env python3
"""Training-step cost of each attention option against RoPE, measured alternately in one run.

    python3 bench/attention_overhead.py --attnlab build/release/attnlab [--rounds 3] [--steps 3]
    python3 bench/attention_overhead.py --seq-lens 256 --options rope,xsa-gated,goat

Model: `attnlab bench --preset bench` (L=4 d=256 H=4 B=16 V=8192, LayerNorm, GELU 4x, biases) at
each T of --seq-lens (default 256 and 1024; model.seq_len = T). Options (docs/mechanisms.md §1.2, §2, §3):

    rope        attn.pos = rope                      (the baseline of the ratios)
    alibi       attn.pos = alibi
    xsa-on      attn.pos = rope, attn.xsa = on
    xsa-gated   attn.pos = rope, attn.xsa = gated
    goat        attn.pos = goat                      (R = M = 4, key lane: D_c = 64 − 9 = 55)
    goat+xsa    attn.pos = goat, attn.xsa = on

Each round runs `attnlab bench --json` once per option, each in a fresh process, in the order given
(rope, alibi, ..., then again), so drifting load on a shared machine hits every option alike. The
table gives, per option, the median over rounds of the step's median time, its min-max, and the
median over rounds of time / time(rope) of the same round. An option the engine rejects (an
unimplemented mechanism, an invalid combination) is reported as "unsupported" with the engine's
message, and the others go on.

--in-process instead times all supported options inside one `attnlab bench --variant ...` process per
T (the engine alternates them itself; every model is allocated at once, so it needs the memory of all
of them together: check `attnlab info` first at large T).

Two-thread timings on a shared VM vary by up to 1.5x between runs: quote ratios from one alternating
run together with the load average printed at its start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)

OPTIONS = {
    "rope": ["attn.pos=rope"],
    "alibi": ["attn.pos=alibi"],
    "xsa-on": ["attn.pos=rope", "attn.xsa=on"],
    "xsa-gated": ["attn.pos=rope", "attn.xsa=gated"],
    "goat": ["attn.pos=goat"],
    "goat+xsa": ["attn.pos=goat", "attn.xsa=on"],
}
BASELINE = "rope"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def default_binary():
    for preset in ("release", "ci"):
        path = os.path.join(SOURCE, "build", preset, "attnlab")
        if os.access(path, os.X_OK):
            return path
    return os.path.join(SOURCE, "build", "release", "attnlab")


def base_args(args, T):
    out = ["--preset", args.preset, "--set", f"model.seq_len={T}"]
    if args.batch:
        out += ["--set", f"train.batch_size={args.batch}"]
    for s in args.set:
        out += ["--set", s]
    return out


def engine_error(proc):
    """The engine's message (its last stderr line, 'attnlab: error: ...'), shortened."""
    lines = [l for l in (proc.stderr or "").strip().splitlines() if l.strip()]
    msg = lines[-1] if lines else f"exit status {proc.returncode}"
    return msg.replace("attnlab: error: ", "")[:160]


def run_one(args, T, sets):
    """One `attnlab bench --json` process: (ms per step, tokens/s) or raises RuntimeError(message)."""
    cmd = [args.attnlab, "bench"] + base_args(args, T) + \
        [x for s in sets for x in ("--set", s)] + \
        ["--steps", str(args.steps), "--warmup", str(args.warmup), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(engine_error(proc))
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            res = json.loads(line)
            return float(res["ms_per_step_median"]), float(res["tokens_per_s"])
    raise RuntimeError(f"no JSON in the output of {' '.join(cmd)}")


def supported(args, T, sets):
    """Whether the engine accepts the configuration (`attnlab info` resolves and builds it)."""
    cmd = [args.attnlab, "info"] + base_args(args, T) + [x for s in sets for x in ("--set", s)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    return None if proc.returncode == 0 else engine_error(proc)


def measure_processes(args, T, names):
    """Alternating rounds, one process per (round, option). Returns {name: [(ms, tok/s) per round]}
    and {name: error} for the rejected ones."""
    times = {n: [] for n in names}
    errors = {}
    for r in range(args.rounds):
        for n in names:
            if n in errors:
                continue
            try:
                ms, tps = run_one(args, T, OPTIONS[n])
            except RuntimeError as e:
                errors[n] = str(e)
                log(f"  T={T} round {r + 1} {n}: unsupported ({e})")
                continue
            except subprocess.TimeoutExpired:
                errors[n] = f"timed out after {args.timeout} s"
                log(f"  T={T} round {r + 1} {n}: timed out")
                continue
            times[n].append((ms, tps))
            log(f"  T={T} round {r + 1} {n}: {ms:.1f} ms/step  (load {load_average()})")
    return times, errors


def measure_in_process(args, T, names):
    """All supported options in one `attnlab bench --variant` run (the engine alternates them)."""
    errors = {}
    for n in names:
        err = supported(args, T, OPTIONS[n])
        if err:
            errors[n] = err
            log(f"  T={T} {n}: unsupported ({err})")
    ok = [n for n in names if n not in errors]
    times = {n: [] for n in names}
    if not ok:
        return times, errors
    cmd = [args.attnlab, "bench"] + base_args(args, T) + \
        [x for n in ok for x in ("--variant", f"{n}:{';'.join(OPTIONS[n])}")] + \
        ["--rounds", str(args.rounds), "--steps", str(args.steps), "--warmup", str(args.warmup),
         "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout * len(ok))
    if proc.returncode != 0:
        raise SystemExit(f"attnlab bench --variant failed: {engine_error(proc)}")
    line = [l for l in proc.stdout.strip().splitlines() if l.startswith(("[", "{"))][-1]
    res = json.loads(line)
    for rec in res if isinstance(res, list) else [res]:
        # one median over all rounds per variant: reported as a single "round"
        times[rec["name"]].append((float(rec["ms_per_step_median"]), float(rec["tokens_per_s"])))
    return times, errors


def table(T, names, times, errors, rounds_label):
    base = times.get(BASELINE) or []
    print(f"\nT = {T} ({rounds_label})\n")
    print("| option | median step (ms) | min–max (ms) | tokens/s | ratio vs rope |")
    print("|---|---|---|---|---|")
    for n in names:
        if n in errors and not times[n]:
            print(f"| {n} | unsupported | — | — | {errors[n]} |")
            continue
        ms = [x[0] for x in times[n]]
        tps = [x[1] for x in times[n]]
        if not ms:
            print(f"| {n} | no data | — | — | — |")
            continue
        # ratios of the same round (back to back), then their median
        pairs = [a[0] / b[0] for a, b in zip(times[n], base)]
        ratio = f"{statistics.median(pairs):.3f}" if pairs else "— (no rope baseline)"
        print(f"| {n} | {statistics.median(ms):.1f} | {min(ms):.1f}–{max(ms):.1f} | "
              f"{statistics.median(tps):.0f} | {ratio} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attnlab", default=default_binary(), help="engine binary (default: %(default)s)")
    ap.add_argument("--options", default=",".join(OPTIONS),
                    help=f"comma-separated, from {', '.join(OPTIONS)} (default: all)")
    ap.add_argument("--seq-lens", default="256,1024", help="T values (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=16, help="train.batch_size (default: %(default)s)")
    ap.add_argument("--preset", default="bench", help="attnlab preset (default: %(default)s)")
    ap.add_argument("--set", action="append", default=[],
                    help="extra key=value for every option (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run (median)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per attnlab process")
    ap.add_argument("--in-process", action="store_true",
                    help="one `attnlab bench --variant` process per T (all models in memory at once)")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.options.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        ap.error(f"unknown option {unknown[0]!r}; choose from {', '.join(OPTIONS)}")
    if BASELINE in names:  # the baseline runs first in every round
        names.remove(BASELINE)
        names.insert(0, BASELINE)
    if not os.access(args.attnlab, os.X_OK):
        ap.error(f"{args.attnlab} is not an executable; build it with "
                 "`cmake --preset release && cmake --build build/release --target attnlab`")
    seq_lens = [int(x) for x in args.seq_lens.split(",") if x.strip()]

    start_load, t0 = load_average(), time.time()
    results = []
    for T in seq_lens:
        log(f"T = {T}: {', '.join(names)}")
        measure = measure_in_process if args.in_process else measure_processes
        times, errors = measure(args, T, names)
        results.append((T, times, errors))
    mode = ("one `attnlab bench --variant` process, engine-alternated" if args.in_process
            else "one process per option and round, alternating")
    print(f"attention options vs rope: `attnlab bench --preset {args.preset}` B={args.batch}, "
          f"{args.rounds} rounds x median of {args.steps} steps after {args.warmup} warmup, {mode}; "
          f"load average {start_load} at start, {load_average()} at end; "
          f"{time.time() - t0:.0f} s; {args.attnlab}")
    for T, times, errors in results:
        table(T, names, times, errors, f"{args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
