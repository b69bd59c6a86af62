#!/usr/bin/env python3
"""attnlab against PyTorch on the same model and training step, measured alternately in one run.

    python3 bench/compare_pytorch.py --attnlab build/release/attnlab [--rounds 3] [--steps 12]
    python3 bench/compare_pytorch.py --torch-only          # the PyTorch side alone

Default model: L=4 d=256 H=4 T=256 B=16 V=8192, LayerNorm, GELU 4x, biases, tied embeddings,
learned positions (nanoGPT-style; `--pos rope` or `--config FILE` to change). Each round runs, for
every peer setting, `attnlab bench` and then that setting (attnlab, torch 1, attnlab, torch 2, ...),
each in a fresh process, so drifting machine load hits both sides alike (docs/performance.md pitfall 4).
The ratio of a setting is the median over rounds of attnlab/torch measured back to back. Each
process's peak resident set size (wait4's ru_maxrss) is reported beside it: the largest over rounds.
Long context at B=1: `--seq-len 4096 --batch 1 --pos rope --settings torch2:sdpa`.
Mixed precision: `--precision bf16 --settings torch2:bf16,torch2:compile-bf16` (attnlab with
train.precision = bf16 against the peer's bf16 autocast).
Decoding: `--decode N --checkpoint CKPT --settings torch2:sdpa` times `attnlab sample` (greedy, N
tokens after the prompt "The", its reported decode tokens/s) against the peer's greedy loop with a
static KV cache on a model of the checkpoint's shape (weights random: the speed does not depend on
them); each a fresh process per round, OMP_NUM_THREADS = --threads for attnlab. With `--precision
bf16 --settings torch2:bf16`: `attnlab sample --weights bf16` against the peer's loop under bf16 autocast.

Peer settings (bench/pytorch_peer.py does the timing: median of --steps after --warmup):
  torch2:*    PyPI torch 2.x from `--python2` (default: the `python3` on PATH); installed with pip
              there if missing (`--no-install` to only report it). LD_PRELOAD of tcmalloc when
              installed (+20-40% tokens/s for the SDPA step here: glibc returns freed activations
              to the OS and re-faults them every step, docs/performance.md pitfall 2); nothing else changed.
  torch2-asis:*  the same without tcmalloc (not in the default list).
  torch113:*  Debian's python3-torch 1.13 from /usr/bin/python3, *tuned* for this command only
              (docs/performance.md): LD_PRELOAD=libtcmalloc_minimal.so.4, the OpenMP build of OpenBLAS, and
              OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset (but OPENBLAS_CORETYPE=SkylakeX where
              OpenBLAS 0.3.21 does not recognise an AVX-512 CPU and would fall back to its generic
              SSE3 kernels). This script only reads the system; the packages are a manual step:
                  apt-get install libtcmalloc-minimal4 libopenblas0-openmp
              If the OpenMP OpenBLAS is installed but not the selected alternative
              (update-alternatives --display libblas.so.3-x86_64-linux-gnu), its directory is put
              first on LD_LIBRARY_PATH for the torch command only.
  torch113-asis:*  Debian's torch 1.13 with the environment as is (docs/performance.md's "as installed"
              row; not in the default list).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
PEER = os.path.join(HERE, "pytorch_peer.py")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
TCMALLOC = os.path.join(LIBDIR, "libtcmalloc_minimal.so.4")
OPENBLAS_OPENMP = os.path.join(LIBDIR, "openblas-openmp")

DEFAULT_SETTINGS = ("torch2:eager,torch2:sdpa,torch2:compile,torch2:bf16,"
                    "torch113:eager,torch113:bf16")
LABELS = {
    "eager": "fp32, hand-written attention",
    "sdpa": "fp32, SDPA",
    "compile": "fp32, SDPA + torch.compile",
    "bf16": "bf16 autocast",
    "compile-bf16": "bf16 autocast + torch.compile",
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# environments


AVX512_CORES = ("SkylakeX", "Cooperlake", "SapphireRapids")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_core(python, env):
    """The kernel family ("Core: X") OpenBLAS picks in `python`'s torch under `env`, or None."""
    probe_env = dict(env, OPENBLAS_VERBOSE="2")
    try:
        proc = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True,
                              env=probe_env, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith("Core: "):
            return line.split(":", 1)[1].strip()
    return None


def with_tcmalloc(env, who, notes):
    if os.path.exists(TCMALLOC):
        env["LD_PRELOAD"] = (TCMALLOC + " " + env["LD_PRELOAD"]).strip() \
            if env.get("LD_PRELOAD") else TCMALLOC
        notes.append(f"{who}: LD_PRELOAD={TCMALLOC}")
    else:
        notes.append(f"{who}: WARNING {TCMALLOC} missing (apt-get install "
                     "libtcmalloc-minimal4): running with glibc malloc, which re-faults big "
                     "blocks each step")
    return env


def torch113_env(python, notes):
    """The tuned environment of docs/performance.md for Debian's torch 1.13, for its command only."""
    env = dict(os.environ)
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in env:
            notes.append(f"torch113: {var}={env[var]} unset for the torch 1.13 command only "
                         "(it forces OpenBLAS's half-speed AVX2 kernels; docs/performance.md pitfall 1)")
            del env[var]
    with_tcmalloc(env, "torch113", notes)
    selected = os.path.realpath(os.path.join(LIBDIR, "libblas.so.3"))
    if "openblas-openmp" in selected:
        notes.append("torch113: the OpenMP OpenBLAS is the selected libblas.so.3 alternative")
    elif os.path.exists(os.path.join(OPENBLAS_OPENMP, "libblas.so.3")):
        env["LD_LIBRARY_PATH"] = OPENBLAS_OPENMP + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        notes.append(f"torch113: libblas.so.3 selects {selected}; "
                     f"LD_LIBRARY_PATH={OPENBLAS_OPENMP} for the torch 1.13 command only")
    else:
        notes.append(f"torch113: WARNING the OpenMP OpenBLAS is not installed (libblas.so.3 is "
                     f"{selected}); pthread OpenBLAS and torch's OpenMP fight over 2 cores "
                     "(docs/performance.md pitfall 3). Install: apt-get install libopenblas0-openmp")
    # Unsetting OPENBLAS_CORETYPE lets OpenBLAS pick kernels from the CPU model. 0.3.21 does not
    # know every AVX-512 CPU: on Intel family 6 model 207 it falls back to the generic SSE3
    # "Prescott" kernels (9-13 GFLOP/s for a 4096x256x1024 GEMM against 40-77 with SkylakeX,
    # measured on a loaded machine). Ask it, and name the AVX-512 kernels where it guessed worse.
    core = openblas_core(python, env)
    if core is None:
        notes.append("torch113: could not read the OpenBLAS core (OPENBLAS_VERBOSE=2 printed none)")
    elif core not in AVX512_CORES and "avx512f" in cpu_flags():
        env["OPENBLAS_CORETYPE"] = "SkylakeX"
        notes.append(f"torch113: OpenBLAS detected core {core} on this AVX-512 CPU; "
                     "OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernels) for the torch 1.13 "
                     "command only")
    else:
        notes.append(f"torch113: OpenBLAS uses its {core} kernels")
    return env


def ensure_torch(python, install, notes):
    """True if `python` imports torch >= 2; pip-installs it when missing unless install=False."""
    probe = [python, "-c", "import sys, torch; "
             "sys.exit(0 if int(torch.__version__.split('.')[0]) >= 2 else 3)"]
    rc = subprocess.call(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if rc == 0:
        return True
    if rc == 3:
        notes.append(f"torch2: {python} has torch < 2; torch2 rows skipped")
        return False
    if not install:
        notes.append(f"torch2: {python} has no torch; install with `{python} -m pip install torch` "
                     "(or drop --no-install); torch2 rows skipped")
        return False
    log(f"torch2: {python} has no torch: running `{python} -m pip install torch`")
    if subprocess.call([python, "-m", "pip", "install", "torch"]) != 0 or \
            subprocess.call(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
        notes.append(f"torch2: pip install torch into {python} failed; torch2 rows skipped")
        return False
    notes.append(f"torch2: installed torch into {python} with pip")
    return True


# --------------------------------------------------------------------------------------------------
# runs


def model_config(args):
    return {
        "model.n_layer": args.n_layer, "model.d_model": args.d_model, "model.n_head": args.n_head,
        "model.seq_len": args.seq_len, "model.vocab_size": args.vocab,
        "model.norm": "layernorm", "model.mlp": "gelu", "model.bias": True, "attn.pos": args.pos,
        args.batch_key: args.batch,
    }


def write_toml(path, cfg):
    with open(path, "w") as f:
        f.write("# written by bench/compare_pytorch.py\n")
        for k, v in cfg.items():
            val = ("true" if v else "false") if isinstance(v, bool) else \
                (repr(v) if isinstance(v, (int, float)) else json.dumps(v))
            f.write(f"{k} = {val}\n")


def last_json(stdout):
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in the output")


class Child:
    """What a finished child process left: returncode, stdout, stderr, peak_rss (bytes)."""

    def __init__(self, returncode, stdout, stderr, peak_rss):
        self.returncode, self.stdout, self.stderr, self.peak_rss = returncode, stdout, stderr, peak_rss


def run_child(cmd, env, timeout):
    """Runs cmd and waits for it with wait4, which also gives the child's own peak resident set
    size (ru_maxrss: its largest RSS over its life, in KiB on Linux; the child alone, not its
    children). Killed after `timeout` seconds (subprocess.TimeoutExpired)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        killed = []
        timer = threading.Timer(timeout, lambda: (killed.append(True), proc.kill()))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if killed:
            raise subprocess.TimeoutExpired(cmd, timeout)
        out.seek(0)
        err.seek(0)
        child = Child(proc.returncode, out.read().decode(errors="replace"),
                      err.read().decode(errors="replace"), usage.ru_maxrss * 1024)
    return child


def run_attnlab(args, config_path):
    cmd = [args.attnlab, "bench", "--config", config_path, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--json", "--set", f"train.precision={args.precision}"]
    proc = run_child(cmd, None, args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-500:]}")
    result = last_json(proc.stdout)
    result["peak_rss_bytes"] = proc.peak_rss
    return result


def checkpoint_model(path):
    """The model.* / attn.* keys of an attnlab checkpoint (the config in its safetensors header)."""
    import struct
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    return json.loads(header.get("__metadata__", {}).get("config", "{}"))


def apply_checkpoint_model(args):
    cfg = checkpoint_model(args.checkpoint)
    for key, attr in (("model.n_layer", "n_layer"), ("model.d_model", "d_model"),
                      ("model.n_head", "n_head"), ("model.seq_len", "seq_len"),
                      ("model.vocab_size", "vocab"), ("attn.pos", "pos")):
        if key not in cfg:
            raise SystemExit(f"--checkpoint {args.checkpoint}: no {key} in its config")
        setattr(args, attr, cfg[key])
    unsupported = {k: cfg.get(k) for k, ok in (("model.norm", "layernorm"), ("model.mlp", "gelu"),
                                               ("attn.sink", "none"), ("model.bias", True),
                                               ("model.kv_heads", args.n_head),
                                               ("residual.kind", "standard"), ("attn.xsa", "off"))
                   if cfg.get(k, ok) != ok}
    if args.pos not in ("learned", "rope") or unsupported:
        raise SystemExit(f"--checkpoint {args.checkpoint}: the PyTorch peer is nanoGPT-style "
                         "(layernorm, gelu, bias, MHA, standard residual, learned or rope "
                         f"positions); this model has {unsupported or {'attn.pos': args.pos}}")


def run_attnlab_decode(args):
    cmd = [args.attnlab, "sample", "--checkpoint", args.checkpoint, "--prompt", "The", "-n",
           str(args.decode), "--temperature", "0"] + (["--weights", "bf16"] if args.precision == "bf16" else [])
    proc = run_child(cmd, dict(os.environ, OMP_NUM_THREADS=str(args.threads)), args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-500:]}")
    m = re.search(r"decode: (\d+) tokens in ([0-9.]+) ms \(([0-9.]+) tokens/s", proc.stderr)
    if not m:
        raise ValueError(f"no decode speed in the output of {' '.join(cmd)}: {proc.stderr[-300:]}")
    return {"tokens_per_s": float(m.group(3)), "decode_tokens": int(m.group(1)),
            "ms_per_token": float(m.group(2)) / int(m.group(1)), "peak_rss_bytes": proc.peak_rss}


def run_peer(args, python, env, setting, config_path):
    cmd = [python, PEER, "--setting", setting, "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--threads", str(args.threads)]
    if args.decode:
        cmd += ["--decode", str(args.decode)]
    if args.config:
        cmd += ["--config", config_path]  # its model.* and train.batch_size keys
    else:
        cmd += ["--n-layer", str(args.n_layer), "--d-model", str(args.d_model), "--n-head",
                str(args.n_head), "--seq-len", str(args.seq_len), "--batch", str(args.batch),
                "--vocab", str(args.vocab), "--pos", args.pos]
    proc = run_child(cmd, env, args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-500:]}")
    result = last_json(proc.stdout)
    result["peak_rss_bytes"] = proc.peak_rss
    if "skipped" in result:
        raise RuntimeError(f"skipped: {result['skipped']}")
    return result


def fmt_k(x):
    return "n/a" if x is None else (f"{x / 1000:.2f}k" if x >= 1000 else f"{x:.0f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnlab", help="the attnlab binary (default: build/{release,ci}/attnlab)")
    ap.add_argument("--torch-only", action="store_true", help="measure the PyTorch side alone")
    ap.add_argument("--config", help="an attnlab config file used by both sides (model.* keys)")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--pos", choices=("learned", "rope"), default="learned")
    ap.add_argument("--batch-key", default="train.batch_size",
                    help="config key that sets attnlab bench's batch size")
    ap.add_argument("--settings", default=DEFAULT_SETTINGS,
                    help="comma list of <peer>:<s>, peer in torch2, torch2-asis, torch113, "
                         "torch113-asis, "
                         "<s> in eager, sdpa, compile, bf16, compile-bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="attnlab's train.precision, or with --decode its `sample --weights` (the "
                         "peer's is its setting: bf16 = autocast)")
    ap.add_argument("--python2", default=shutil.which("python3") or "python3",
                    help="interpreter with PyPI torch 2.x (default: python3 on PATH)")
    ap.add_argument("--python113", default="/usr/bin/python3",
                    help="interpreter with Debian's torch 1.13")
    ap.add_argument("--no-install", action="store_true", help="never pip install torch")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per process")
    ap.add_argument("--json-out", help="also write every measurement here (JSON)")
    ap.add_argument("--decode", type=int, default=0,
                    help="time greedy decoding of N tokens instead of training (needs --checkpoint)")
    ap.add_argument("--checkpoint", help="attnlab checkpoint for --decode (sets the model's shape)")
    args = ap.parse_args(argv)
    if args.decode:
        if not args.checkpoint or args.config:
            raise SystemExit("--decode needs --checkpoint (the model's shape comes from it) and no --config")
        if args.decode < 2:
            raise SystemExit(f"--decode {args.decode}: decode at least 2 tokens")
        apply_checkpoint_model(args)
        if args.decode + 8 > args.seq_len:
            raise SystemExit(f"--decode {args.decode}: the prompt and the tokens must fit in "
                             f"model.seq_len = {args.seq_len}")

    notes = []
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    for s in settings:
        kind, _, name = s.partition(":")
        if kind not in ("torch2", "torch2-asis", "torch113", "torch113-asis") or \
                name not in LABELS:
            raise SystemExit(f"--settings {s}: use torch2:<s>, torch2-asis:<s>, torch113:<s> or "
                             f"torch113-asis:<s> with <s> in {', '.join(LABELS)}")

    if not args.torch_only:
        if not args.attnlab:
            for cand in ("build/release/attnlab", "build/ci/attnlab"):
                if os.access(os.path.join(SOURCE, cand), os.X_OK):
                    args.attnlab = os.path.join(SOURCE, cand)
                    break
        if not args.attnlab or not os.access(args.attnlab, os.X_OK):
            raise SystemExit("no attnlab binary: build it (cmake --build --preset release --target "
                             "attnlab) and pass --attnlab PATH, or use --torch-only")

    kinds = {s.partition(":")[0] for s in settings}
    envs = {"torch2": None, "torch2-asis": dict(os.environ), "torch113": None,
            "torch113-asis": dict(os.environ)}
    pythons = {"torch2": args.python2, "torch2-asis": args.python2, "torch113": args.python113,
               "torch113-asis": args.python113}
    if "torch2" in kinds:
        envs["torch2"] = with_tcmalloc(dict(os.environ), "torch2", notes)
    if "torch113" in kinds:
        envs["torch113"] = torch113_env(args.python113, notes)
    if kinds & {"torch2", "torch2-asis"} and \
            not ensure_torch(args.python2, not args.no_install, notes):
        settings = [s for s in settings if not s.startswith("torch2")]
    if not settings:
        raise SystemExit("no PyTorch setting left to run: " + "; ".join(notes))

    tmp = tempfile.mkdtemp(prefix="attnlab_cmp_")
    config_path = args.config or os.path.join(tmp, "bench.toml")
    if not args.config:
        write_toml(config_path, model_config(args))

    load = os.getloadavg()
    log(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 vCPUs; busy machines "
        "skew both sides, the alternation keeps the ratio fair)")
    for n in notes:
        log("note: " + n)

    records = []  # dicts: round, setting, side, tokens_per_s, raw
    failures = {}
    for r in range(args.rounds):
        for s in settings:
            kind, _, name = s.partition(":")
            pair = {}
            for side in (["attnlab"] if not args.torch_only else []) + ["torch"]:
                t0 = time.time()
                try:
                    if side == "attnlab":
                        res = run_attnlab_decode(args) if args.decode else run_attnlab(args, config_path)
                    else:
                        res = run_peer(args, pythons[kind], envs[kind], name, config_path)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    failures.setdefault((s, side), str(e))
                    log(f"round {r + 1} {s:18s} {side:7s} FAILED: {str(e)[:300]}")
                    continue
                tps = float(res["tokens_per_s"])
                pair[side] = tps
                records.append({"round": r + 1, "setting": s, "side": side, "tokens_per_s": tps,
                                "result": res})
                log(f"round {r + 1} {s:18s} {side:7s} {tps:9.0f} tok/s  ({time.time() - t0:.0f} s)")
            if "attnlab" in pair and "torch" in pair:
                records.append({"round": r + 1, "setting": s, "side": "ratio",
                                "tokens_per_s": pair["attnlab"] / pair["torch"]})

    # ---------------------------------------------------------------- table
    def values(s, side):
        return [x["tokens_per_s"] for x in records if x["setting"] == s and x["side"] == side]

    model = (f"L={args.n_layer} d={args.d_model} H={args.n_head} T={args.seq_len} B={args.batch} "
             f"V={args.vocab} pos={args.pos}" if not args.config else f"config {args.config}")
    if args.decode:
        model = model.replace(f" B={args.batch}", "")
    if args.decode:
        print(f"\n### attnlab vs PyTorch, greedy decoding tokens/s ({model}; checkpoint "
              f"{args.checkpoint}; {args.decode} tokens, one sequence; {args.threads} threads; "
              f"{args.rounds} alternating rounds)\n")
    else:
        print(f"\n### attnlab ({args.precision}) vs PyTorch, training step tokens/s ({model}; {args.threads} threads; "
              f"median of {args.steps} steps after {args.warmup} warmup, {args.rounds} alternating "
              f"rounds)\n")
    print("| peer | setting | torch tok/s (median, min–max) | attnlab tok/s | attnlab / torch "
          "| peak RSS torch / attnlab (MB, largest) |")
    print("|---|---|---|---|---|---|")
    for s in settings:
        kind, _, name = s.partition(":")
        tv, av, rv = values(s, "torch"), values(s, "attnlab"), values(s, "ratio")
        versions = {x["result"].get("torch") for x in records
                    if x["setting"] == s and x["side"] == "torch"}
        peer = (f"torch {'/'.join(sorted(v for v in versions if v))}" if versions else kind) + \
            {"torch2": " +tcmalloc", "torch113": " tuned",
             "torch113-asis": " as installed"}.get(kind, "")
        if tv:
            trange = f"{fmt_k(statistics.median(tv))} ({fmt_k(min(tv))}–{fmt_k(max(tv))})"
        else:
            trange = f"failed: {failures.get((s, 'torch'), '?')[:80]}"
        aval = fmt_k(statistics.median(av)) if av else ("—" if args.torch_only else "failed")
        ratio = f"{statistics.median(rv):.2f}×" if rv else "—"

        def rss(side):
            v = [x["result"].get("peak_rss_bytes", 0) for x in records
                 if x["setting"] == s and x["side"] == side]
            return f"{max(v) / 1e6:.0f}" if v else "—"
        print(f"| {peer} | {LABELS[name]} | {trange} | {aval} | {ratio} | {rss('torch')} / {rss('attnlab')} |")
    print()
    for n in notes:
        print(f"- {n}")
    load = os.getloadavg()
    print(f"- load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"model": model, "records": records,
                       "failures": {f"{k[0]}/{k[1]}": v for k, v in failures.items()},
                       "notes": notes}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
