#!/usr/bin/env python3
"""The PyTorch peer of `attnlab bench`: the same model's full training step, timed the same way.

Model (nanoGPT-style, as in docs/mechanisms.md §1 with model.norm = layernorm, model.mlp = gelu):
LayerNorm (eps 1e-5), GELU-tanh MLP 4x, biases, tied embeddings, learned or RoPE positions,
no dropout. Step: forward, mean-CE loss, backward, gradient-norm clipping at --grad-clip (1.0,
attnlab's and nanoGPT's default; 0 = off), AdamW step (decay on 2-D weights, as in nanoGPT),
zero_grad(set_to_none=True). Random tokens, the same batch every step (no data loading).

Settings (--setting, comma-separated; each prints one JSON line):
  eager        fp32, attention written by hand (masked softmax), any torch
  sdpa         fp32, F.scaled_dot_product_attention(is_causal=True)          torch >= 2.0
  compile      sdpa + torch.compile of the model (inductor; needs a C++ compiler)
  bf16         torch.autocast("cpu", bfloat16) around forward + loss; sdpa when available
  compile-bf16 compile + bf16 autocast
Timing: `--warmup` untimed steps (they include torch.compile's compilation), then the median of
`--steps` timed steps; tokens/s = B·T / median step time. Threads: torch.set_num_threads(--threads,
default 2; PyTorch's default on this machine is 1).

  python3 bench/pytorch_peer.py --setting eager,sdpa --steps 12 --warmup 3
  python3 bench/pytorch_peer.py --config configs/small.toml --batch 8 --setting compile

Model FLOPs per token = 6·N_matmul + 6·L·d·(T+1) (forward + backward, causal attention counted for the
pairs it computes; docs/performance.md), where N_matmul counts the weights of every matrix product
including the tied head.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SETTINGS = ("eager", "sdpa", "compile", "bf16", "compile-bf16")


def has_sdpa() -> bool:
    return hasattr(F, "scaled_dot_product_attention")


# --------------------------------------------------------------------------------------------------
# model


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, seq_len, pos, use_sdpa, rope_base=10000.0):
        super().__init__()
        self.n_head, self.head_dim, self.use_sdpa, self.pos = n_head, d // n_head, use_sdpa, pos
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        if not use_sdpa:
            self.register_buffer("mask", torch.ones(seq_len, seq_len, dtype=torch.bool).tril(),
                                 persistent=False)
        if pos == "rope":  # rotate-half, tables in float64 then rounded (docs/mechanisms.md §1.2, §0)
            m = torch.arange(self.head_dim // 2, dtype=torch.float64)
            angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * \
                rope_base ** (-2.0 * m / self.head_dim)[None, :]
            self.register_buffer("cos", angle.cos().float(), persistent=False)
            self.register_buffer("sin", angle.sin().float(), persistent=False)

    def rope(self, x, T):
        cos, sin = self.cos[:T], self.sin[:T]
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.pos == "rope":
            q, k = self.rope(q, T), self.rope(k, T)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


    def step(self, x, t, kc, vc):
        """One token at position t (x: (1, 1, C)); appends its key and value to the caches
        (1, H, seq_len, Dh) and attends over positions 0..t."""
        C = x.shape[-1]
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(1, 1, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(1, 1, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(1, 1, self.n_head, self.head_dim).transpose(1, 2)
        if self.pos == "rope":
            cos, sin = self.cos[t:t + 1], self.sin[t:t + 1]
            half = self.head_dim // 2

            def rot(z):
                z1, z2 = z[..., :half], z[..., half:]
                return torch.cat([z1 * cos - z2 * sin, z2 * cos + z1 * sin], dim=-1)
            q, k = rot(q), rot(k)
        kc[:, :, t:t + 1] = k
        vc[:, :, t:t + 1] = v
        keys, vals = kc[:, :, :t + 1], vc[:, :, :t + 1]
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, keys, vals)
        else:
            att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            y = F.softmax(att, dim=-1) @ vals
        return self.c_proj(y.transpose(1, 2).reshape(1, 1, C))


class Block(nn.Module):
    def __init__(self, d, n_head, seq_len, pos, use_sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = CausalSelfAttention(d, n_head, seq_len, pos, use_sdpa)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    def step(self, x, t, kc, vc):
        x = x + self.attn.step(self.ln_1(x), t, kc, vc)
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, d, n_head, seq_len, vocab, pos, use_sdpa):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d) if pos == "learned" else None
        self.h = nn.ModuleList([Block(d, n_head, seq_len, pos, use_sdpa) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        # init of docs/mechanisms.md §1.4 (speed does not depend on it; kept for sane losses)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


    def step(self, token, t, caches):
        """Logits (vocab,) of the next token after `token` at position t, through the KV caches."""
        x = self.wte(token.view(1, 1))
        if self.wpe is not None:
            x = x + self.wpe.weight[t:t + 1].view(1, 1, -1)
        for block, (kc, vc) in zip(self.h, caches):
            x = block.step(x, t, kc, vc)
        return F.linear(self.ln_f(x), self.wte.weight).view(-1)


def flops_per_token(n_layer, d, seq_len, vocab):
    n_matmul = n_layer * (3 * d * d + d * d + 8 * d * d) + vocab * d
    return 6 * n_matmul + 6 * n_layer * d * (seq_len + 1)


# --------------------------------------------------------------------------------------------------
# environment report


def loaded_libraries():
    """Which BLAS / allocator this process actually mapped (the tuned-1.13 setup is about these)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                base = os.path.basename(path)
                keys = ("blas", "tcmalloc", "jemalloc", "mkl_core", "gomp", "iomp")
                if any(s in base for s in keys):
                    libs.add(path)
    except OSError:
        pass
    return sorted(libs)


def make_optimizer(model, kind):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    tries = {"auto": ("fused", "foreach", "default"), "fused": ("fused",),
             "foreach": ("foreach",), "default": ("default",)}[kind]
    for k in tries:
        try:
            extra = {"fused": {"fused": True}, "foreach": {"foreach": True}, "default": {}}[k]
            return torch.optim.AdamW(groups, **kwargs, **extra), k
        except (TypeError, RuntimeError, ValueError):
            continue
    raise SystemExit(f"AdamW variant {kind!r} is not available in torch {torch.__version__}")


# --------------------------------------------------------------------------------------------------
# one setting


def run_setting(setting, args):
    torch.manual_seed(0)
    sdpa = setting != "eager" and has_sdpa()
    if setting in ("sdpa", "compile", "compile-bf16") and not has_sdpa():
        return {"setting": setting, "skipped": f"torch {torch.__version__} has no SDPA"}
    if setting.startswith("compile") and not hasattr(torch, "compile"):
        return {"setting": setting, "skipped": f"torch {torch.__version__} has no torch.compile"}
    model = GPT(args.n_layer, args.d_model, args.n_head, args.seq_len, args.vocab, args.pos, sdpa)
    opt, opt_kind = make_optimizer(model, args.adamw)
    fwd = model
    if setting.startswith("compile"):
        fwd = torch.compile(model)
    bf16 = setting.endswith("bf16")
    idx = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))

    def step():
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = fwd(idx, targets)
        else:
            loss = fwd(idx, targets)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    try:
        for _ in range(args.warmup):
            step()
    except Exception as e:  # torch.compile can fail on a machine without a working toolchain
        first = str(e).splitlines()[0][:200] if str(e) else ""
        return {"setting": setting, "skipped": f"{type(e).__name__}: {first}"}
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    tokens = args.batch * args.seq_len
    fpt = flops_per_token(args.n_layer, args.d_model, args.seq_len, args.vocab)
    return {
        "setting": setting,
        "tokens_per_s": tokens / med,
        "ms_per_step_median": med * 1e3,
        "ms_per_step_min": min(times) * 1e3,
        "ms_per_step_mean": statistics.mean(times) * 1e3,
        "gflops": fpt * tokens / med / 1e9,
        "warmup_s": warmup_s,
        "final_loss": float(loss.detach()),
        "attention": "sdpa" if sdpa else "manual",
        "autocast": "bf16" if bf16 else "none",
        "adamw": opt_kind,
    }


def run_decode(setting, args):
    """Greedy decoding of one sequence with a static KV cache (preallocated to seq_len, written in
    place): a 1-token prompt, then args.decode - 1 tokens, each one step through the model. One
    untimed pass first (warm-up), then the timed one; tokens/s and ms/token of the decode steps."""
    if setting not in ("eager", "sdpa", "bf16"):
        return {"setting": setting, "skipped": "decode is timed for eager, sdpa and bf16 only"}
    if setting == "sdpa" and not has_sdpa():
        return {"setting": setting, "skipped": f"torch {torch.__version__} has no SDPA"}
    n = args.decode
    if n < 2 or n > args.seq_len:
        raise SystemExit(f"--decode {n}: must be in [2, seq_len = {args.seq_len}]")
    torch.manual_seed(0)
    model = GPT(args.n_layer, args.d_model, args.n_head, args.seq_len, args.vocab, args.pos,
                setting != "eager" and has_sdpa()).eval()
    head_dim = args.d_model // args.n_head

    def generate():
        caches = [(torch.zeros(1, args.n_head, args.seq_len, head_dim),
                   torch.zeros(1, args.n_head, args.seq_len, head_dim)) for _ in range(args.n_layer)]
        token = torch.zeros((), dtype=torch.long)
        t0 = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=setting == "bf16"):
            token = model.step(token, 0, caches).argmax()  # the prompt's one token
            t1 = time.perf_counter()
            for t in range(1, n):
                token = model.step(token, t, caches).argmax()
        return t1 - t0, time.perf_counter() - t1

    generate()
    prefill_s, decode_s = generate()
    return {
        "setting": setting,
        "mode": "decode",
        "tokens_per_s": (n - 1) / decode_s,
        "ms_per_token": decode_s / (n - 1) * 1e3,
        "decode_tokens": n - 1,
        "prefill_ms": prefill_s * 1e3,
        "attention": "sdpa" if setting != "eager" and has_sdpa() else "manual",
        "autocast": "bf16" if setting == "bf16" else "none",
    }


def read_config(path):
    """model.* keys of an attnlab config file (TOML with dotted keys or [model] tables)."""
    import tomllib
    with open(path, "rb") as f:
        data = tomllib.load(f)

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, prefix + k + "."))
            else:
                out[prefix + k] = v
        return out
    return flat(data)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="attnlab config file; its model.* keys set the model")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--pos", choices=("learned", "rope"), default="learned")
    ap.add_argument("--setting", default="eager", help=",".join(SETTINGS) + " or all")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="global norm clip; 0 = off")
    ap.add_argument("--adamw", choices=("auto", "fused", "foreach", "default"), default="auto",
                    help="auto: fused if this torch has it on CPU, else foreach")
    ap.add_argument("--label", default="", help="free text copied into the JSON (e.g. 'tuned')")
    ap.add_argument("--decode", type=int, default=0,
                    help="time greedy decoding of this many tokens (one sequence, KV cache) "
                         "instead of the training step")
    args = ap.parse_args(argv)
    if args.config:
        cfg = read_config(args.config)
        cfg.setdefault("attn.pos", "rope")  # attnlab's default (docs/mechanisms.md §1.6)
        for key, attr in (("model.n_layer", "n_layer"), ("model.d_model", "d_model"),
                          ("model.n_head", "n_head"), ("model.seq_len", "seq_len"),
                          ("model.vocab_size", "vocab"), ("attn.pos", "pos"),
                          ("train.batch_size", "batch"), ("train.grad_clip", "grad_clip")):
            if key in cfg:
                setattr(args, attr, cfg[key])
        unsupported = {k: cfg[k] for k, ok in (("model.norm", "layernorm"), ("model.mlp", "gelu"),
                                                ("attn.sink", "none"), ("model.bias", True))
                       if k in cfg and cfg[k] != ok}
        if cfg.get("model.kv_heads", args.n_head) != args.n_head:
            unsupported["model.kv_heads"] = cfg["model.kv_heads"]
        if args.pos not in ("learned", "rope") or unsupported:
            raise SystemExit(f"config {args.config}: the PyTorch peer is nanoGPT-style "
                             "(layernorm, gelu, bias, MHA, learned or rope positions); "
                             f"unsupported: {unsupported or {'attn.pos': args.pos}}")
    settings = SETTINGS if args.setting == "all" else tuple(args.setting.split(","))
    for s in settings:
        if s not in SETTINGS:
            raise SystemExit(f"--setting {s}: use one of {', '.join(SETTINGS)} or all")
    torch.set_num_threads(args.threads)
    env = {
        "engine": "pytorch",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "executable": sys.executable,
        "threads": torch.get_num_threads(),
        "label": args.label,
        "model": {"n_layer": args.n_layer, "d_model": args.d_model, "n_head": args.n_head,
                  "seq_len": args.seq_len, "batch": args.batch, "vocab": args.vocab,
                  "pos": args.pos},
        "steps": args.steps,
        "warmup": args.warmup,
        "grad_clip": args.grad_clip,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "LD_PRELOAD": os.environ.get("LD_PRELOAD"),
    }
    for s in settings:
        result = run_decode(s, args) if args.decode else run_setting(s, args)
        result.update(env)
        result["libraries"] = loaded_libraries()
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
