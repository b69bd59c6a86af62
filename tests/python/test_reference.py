#!/usr/bin/python3
"""Golden test: the C++ engine against the PyTorch reference (reference/attnlab_ref.py).

    /usr/bin/python3 tests/python/test_reference.py <attnlab-binary> <source-dir>

For each tiny config: write a config file, `attnlab init` a checkpoint, check the init against
MECHANISMS.md §1.4, perturb every parameter (so biases, gains and sinks are non-trivial), run
`attnlab grads` on random tokens (and `attnlab forward` on their inputs), and compare loss,
logits and every parameter gradient with the reference run in float64. Prints max differences per
tensor (like llm.c's test_gpt2) and ends with `reference: N passed, M failed`. Exit status 0 iff
everything passed.

Tolerances (the engine is fp32, the reference float64, so the difference is the engine's rounding):
every tensor is compared as max|engine − ref| / max|ref| (normalising by the tensor's largest
entry, not elementwise, because individual gradient entries can be ~0 — e.g. the key-bias entries
without RoPE or sink are structurally zero).
  * logits 2e-5, loss 1e-5 (relative): fp32 unit roundoff is 6e-8; each logit comes out of ~10
    chained reductions of length <= 256 whose rounding grows like sqrt(n)·u ~ 1e-6. torch's own
    fp32 forward lands at 5-6e-7 on these configs (loss 3e-8), so the bounds leave ~30x headroom
    for a different summation order (oneDNN blocking, OpenMP). Measured effect of real bugs on these
    perturbed weights: GELU erf instead of tanh 1.7e-4, LayerNorm eps 1e-6 instead of 1e-5
    3.3e-4, RMSNorm eps 1e-5 instead of 1e-6 1.2e-3, GPT-J RoPE pairing or a wrong base > 0.4.
  * gradients 1e-4: the backward chains twice as many reductions and subtracts nearly equal terms
    (softmax and norm backward, the mean-CE gradient p − onehot), which amplifies relative
    rounding; torch's fp32 autograd lands at 4e-7..1.1e-6 (~100x headroom). This is the "relative
    ~1e-4" of an fp32 engine; a gradient off by 0.1% (e.g. a dropped term in dE) is 1e-3 and fails,
    and so does each bug listed above (2.8e-4 and more on grad.wte).
The reference itself is checked first (self-checks below) so that a shared misreading of the spec
cannot make the two agree.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import traceback

import numpy as np


def ensure_safetensors():
    """CI machines are fresh: install the official reader into this interpreter if it lacks it."""
    try:
        import safetensors  # noqa: F401
        return
    except ImportError:
        pass
    print("safetensors missing: installing it with pip", flush=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--break-system-packages",
           "safetensors"]
    rc = subprocess.call(cmd)
    if rc != 0:
        cmd.remove("--break-system-packages")  # pip < 23 lacks the flag
        rc = subprocess.call(cmd)
    import importlib
    importlib.invalidate_caches()
    import safetensors  # noqa: F401  (fails loudly if the install did not work)


ensure_safetensors()
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

LOGITS_TOL = 2e-5
LOSS_TOL = 1e-5
GRAD_TOL = 1e-4

BASE = {
    "model.n_layer": 2,
    "model.d_model": 64,
    "model.n_head": 4,
    "model.seq_len": 16,
    "model.vocab_size": 97,  # prime: no vector-width multiple, exercises tail handling
}

# name, config overrides, T (≤ seq_len), B
CASES = [
    ("layernorm-gelu-learned",
     {"model.norm": "layernorm", "model.mlp": "gelu", "model.bias": True, "attn.pos": "learned"},
     12, 3),  # T < seq_len: rows T.. of wpe must get exactly zero gradient
    ("rmsnorm-swiglu-rope-gqa2-nobias",
     {"model.norm": "rmsnorm", "model.mlp": "swiglu", "model.bias": False, "attn.pos": "rope",
      "model.kv_heads": 2}, 16, 3),
    ("layernorm-gelu-rope-sink",
     {"model.norm": "layernorm", "model.mlp": "gelu", "model.bias": True, "attn.pos": "rope",
      "attn.sink": "learned"}, 16, 3),
    ("layernorm-nobias-gelu-nope-mqa",
     {"model.norm": "layernorm", "model.mlp": "gelu", "model.bias": False, "attn.pos": "none",
      "model.kv_heads": 1}, 16, 2),
    ("rmsnorm-gelu-alibi-gqa2-sink",
     {"model.norm": "rmsnorm", "model.mlp": "gelu", "model.bias": True, "attn.pos": "alibi",
      "model.kv_heads": 2, "attn.sink": "learned"}, 16, 2),
    # residual kinds (MECHANISMS.md §4, §5; reference/residual_ref.py)
    ("attnres-full", {"attn.pos": "rope", "residual.kind": "attnres"}, 16, 2),
    ("attnres-block2-rmsnorm-swiglu",
     {"model.norm": "rmsnorm", "model.mlp": "swiglu", "attn.pos": "rope", "residual.kind": "attnres",
      "residual.block_size": 2}, 16, 2),
    ("hyper-n2-learned", {"attn.pos": "learned", "residual.kind": "hyper", "residual.streams": 2}, 16, 2),
    ("mhc-n4", {"attn.pos": "rope", "residual.kind": "mhc", "residual.streams": 4}, 16, 2),
    # DAR (MECHANISMS.md §6): the default block form, and Full DAR with self routing and value maps
    ("dar-block2-reciprocal", {"attn.pos": "rope", "residual.kind": "dar", "residual.block_size": 2,
                               "dar.routing": "reciprocal"}, 16, 2),
    ("dar-full-self_kv-sepv", {"attn.pos": "rope", "residual.kind": "dar", "residual.block_size": 1,
                               "dar.routing": "self_kv", "dar.sep_v": True}, 16, 2),
]

# Residual gradients that are (nearly) zero by structure, whatever the weights, at sublayer 1 where
# every stream is e: mHC's residual map mixes n copies of e with rows summing to 1 (exactly zero,
# §5.3 point 3); HC's and mHC's read weights only scale e, which Norm_1 removes up to its ε (zero
# but for ε). The float64 reference gives their tiny true values, the fp32 engine its rounding, so
# they are compared against the scale of the kind's other residual gradients instead of their own.
NEAR_ZERO = {
    "hyper": {"grad.residual.1.m0", "grad.residual.1.w_m"},
    "mhc": {"grad.residual.1.phi_res", "grad.residual.1.alpha_res", "grad.residual.1.b_res",
            "grad.residual.1.phi_pre", "grad.residual.1.alpha_pre", "grad.residual.1.b_pre"},
    # DAR's sublayer 1 reads e alone: its queries get exactly zero gradient, and so does its mix
    # logit without sep_v (R⁰ = R¹ = e) (§1.5).
    "dar": {"grad.residual.1.query0", "grad.residual.1.query1", "grad.residual.1.mix"},
}

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_config(path, cfg):
    with open(path, "w") as f:
        f.write("# written by tests/python/test_reference.py\n")
        for k, v in cfg.items():
            f.write(f"{k} = {toml_value(v)}\n")


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


class Report:
    """Collects per-tensor lines and failures for one case."""

    def __init__(self):
        self.failures = []

    def compare(self, name, got, ref, tol):
        got = np.asarray(got, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if got.shape != ref.shape:
            self.failures.append(f"{name}: shape {list(got.shape)} != reference {list(ref.shape)}")
            print(f"  FAIL {name:42s} shape {list(got.shape)} != reference {list(ref.shape)}")
            return
        if not np.all(np.isfinite(got)):
            self.failures.append(f"{name}: non-finite values")
            print(f"  FAIL {name:42s} non-finite values")
            return
        diff = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        scale = max(float(np.max(np.abs(ref))) if ref.size else 0.0, 1e-12)
        rel = diff / scale
        ok = rel <= tol
        print(f"  {'OK  ' if ok else 'FAIL'} {name:42s} max|diff| {diff:9.2e}  "
              f"max|ref| {scale:9.2e}  rel {rel:9.2e}  (tol {tol:.0e})")
        if not ok:
            self.failures.append(f"{name}: rel {rel:.2e} > {tol:.0e}")

    def check(self, cond, what):
        print(f"  {'OK  ' if cond else 'FAIL'} {what}")
        if not cond:
            self.failures.append(what)


# --------------------------------------------------------------------------------------------------
# reference self-checks (float64): properties the spec states, independent of the engine


def reference_self_checks(R, rep):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    def random_model(cfg):
        m = R.AttnlabGPT({**BASE, **cfg}).double()
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.3)
        return m

    idx = torch.randint(0, BASE["model.vocab_size"], (2, 16), generator=gen)

    # GELU: torch's tanh approximation equals the formula of §1.1.
    h = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    c = math.sqrt(2 / math.pi)
    gelu = 0.5 * h * (1 + torch.tanh(c * (h + 0.044715 * h ** 3)))
    rep.check(torch.allclose(torch.nn.functional.gelu(h, approximate="tanh"), gelu, rtol=0,
                             atol=1e-14), "GELU_tanh matches the formula of §1.1")

    # RoPE: apply_rope equals the scalar formula of §1.2 (pairs (m, m + D_h/2),
    # θ_m = base^(−2m/D)).
    D, T, base = 8, 5, 10000.0
    x = torch.randn(1, 1, T, D, generator=gen, dtype=torch.float64)
    cos, sin = R.rope_tables(T, D, base, dtype=torch.float64)
    got = R.apply_rope(x, cos, sin)
    want = torch.empty_like(x)
    for t in range(T):
        for m in range(D // 2):
            ang = t * base ** (-2.0 * m / D)
            a, b = x[0, 0, t, m].item(), x[0, 0, t, m + D // 2].item()
            want[0, 0, t, m] = a * math.cos(ang) - b * math.sin(ang)
            want[0, 0, t, m + D // 2] = b * math.cos(ang) + a * math.sin(ang)
    rep.check(torch.allclose(got, want, rtol=0, atol=1e-13), "RoPE matches the formula of §1.2")
    # relative-position invariance q̃(t+c)·k̃(s+c) = q̃(t)·k̃(s)
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    cos, sin = R.rope_tables(40, D, base, dtype=torch.float64)
    rq = R.apply_rope(q.expand(40, D), cos, sin)
    rk = R.apply_rope(k.expand(40, D), cos, sin)
    rep.check(abs(float(rq[3] @ rk[1]) - float(rq[33] @ rk[31])) < 1e-12,
              "RoPE: q(t+c)·k(s+c) = q(t)·k(s)")

    # ALiBi slopes: the examples of §1.2.
    rep.check(R.alibi_slopes(4) == [1 / 4, 1 / 16, 1 / 64, 1 / 256], "ALiBi slopes for H = 4")
    want12 = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5]
    rep.check(np.allclose(R.alibi_slopes(12), want12, rtol=1e-15), "ALiBi slopes for H = 12")

    # Sink: s_h = −1e4 reproduces the model without a sink (§1.5).
    sink_cfg = {"attn.pos": "rope", "attn.sink": "learned"}
    m_sink = random_model(sink_cfg)
    m_plain = R.AttnlabGPT({**BASE, "attn.pos": "rope"}).double()
    with torch.no_grad():
        for block in m_sink.blocks:
            block.attn.sink.fill_(-1e4)
        sd = {n: t for n, t in m_sink.state_dict().items() if not n.endswith(".sink")}
        m_plain.load_state_dict(sd)
        d = (m_sink(idx)[0] - m_plain(idx)[0]).abs().max().item()
    rep.check(d < 1e-12, f"sink = -1e4 equals no sink (max diff {d:.1e})")
    # ... and a finite sink changes the output (it is not ignored).
    with torch.no_grad():
        for block in m_sink.blocks:
            block.attn.sink.fill_(1.0)
        d = (m_sink(idx)[0] - m_plain(idx)[0]).abs().max().item()
    rep.check(d > 1e-3, f"sink = 1 changes the logits (max diff {d:.1e})")

    # GQA: query head h reads kv head h // G. A kv_heads=2 model equals the MHA model whose k/v
    # heads h are copies of kv head h // 2.
    m_gqa = random_model({"model.kv_heads": 2, "attn.pos": "rope"})
    m_mha = R.AttnlabGPT({**BASE, "attn.pos": "rope"}).double()
    Dh = BASE["model.d_model"] // BASE["model.n_head"]
    H = BASE["model.n_head"]
    with torch.no_grad():
        sd = dict(m_gqa.state_dict())
        for i in range(BASE["model.n_layer"]):
            for kind in ("weight", "bias"):
                w = sd[f"blocks.{i}.attn.qkv.{kind}"]
                q, k, v = w.split([H * Dh, 2 * Dh, 2 * Dh], dim=-1)
                heads = lambda t: torch.cat([t[..., (h // 2) * Dh:(h // 2 + 1) * Dh]  # noqa: E731
                                             for h in range(H)], dim=-1)
                sd[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([q, heads(k), heads(v)], dim=-1)
        m_mha.load_state_dict(sd)
        d = (m_gqa(idx)[0] - m_mha(idx)[0]).abs().max().item()
    rep.check(d < 1e-12, f"GQA head h reads kv head h // G (max diff {d:.1e})")

    # Causality: changing token t' changes no logit at t < t'.
    m = random_model({"attn.pos": "learned"})
    idx2 = idx.clone()
    idx2[:, 9] = (idx2[:, 9] + 1) % BASE["model.vocab_size"]
    with torch.no_grad():
        a, b = m(idx)[0], m(idx2)[0]
    rep.check(torch.equal(a[:, :9], b[:, :9]) and not torch.equal(a[:, 9:], b[:, 9:]),
              "causality: token 9 affects logits at t >= 9 only")

    # Export: nn.Linear layout and back.
    m = random_model({"model.mlp": "swiglu", "model.norm": "rmsnorm", "attn.pos": "rope"})
    exported = R.export_torch_state_dict(m, dtype=torch.float64)
    lin = torch.nn.Linear(64, 2 * m.config["model.mlp_hidden"], bias=True).double()
    with torch.no_grad():
        lin.weight.copy_(exported["blocks.0.mlp.gate_up.weight"])
        lin.bias.copy_(exported["blocks.0.mlp.gate_up.bias"])
        u = torch.randn(3, 64, generator=gen, dtype=torch.float64)
        d = (lin(u) - m.blocks[0].mlp.gate_up(u)).abs().max().item()
    rep.check(d < 1e-12, f"exported weights load into nn.Linear (max diff {d:.1e})")
    m2 = R.import_torch_state_dict(
        R.AttnlabGPT(m.config).double(), exported)
    with torch.no_grad():
        rep.check(torch.equal(m(idx)[0], m2(idx)[0]), "export -> import round trip is exact")

    # Residual kinds (§4.5, §5.4): HC and mHC at init equal the standard residual (every stream is
    # the standard stream, so the collapsed state is n times it); AttnRes's first input is e; the
    # Sinkhorn rows sum to 1; Block AttnRes with K ≥ 2L is one block (equal for K = 4 and K = 9).
    import residual_ref as RR
    std_model = random_model({"attn.pos": "rope"})
    e = torch.randn(2, 16, 64, generator=gen, dtype=torch.float64)
    subs = [f for block in std_model.blocks for f in block.sublayers()]
    with torch.no_grad():
        base = std_model.residual(e, subs)
        for kind, n in (("hyper", 2), ("hyper", 4), ("mhc", 2), ("mhc", 4)):
            cfg = R.resolve_config({**BASE, "residual.kind": kind, "residual.streams": n})
            wide = RR.make_residual(cfg).double()
            d = ((wide(e, subs) / n - base).abs().max() / base.abs().max()).item()
            # rounding only: the init maps are exact in real arithmetic (rows of Hres and Hpre sum to 1)
            rep.check(d < 1e-12, f"{kind} n={n} at init: collapsed/n equals the standard stream (rel diff {d:.1e})")
        seen = []
        ar = RR.make_residual(R.resolve_config({**BASE, "residual.kind": "attnres"})).double()
        for p in ar.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
        ar(e, [lambda h: (seen.append(h), torch.tanh(h))[1]] + subs[1:])
        rep.check(torch.equal(seen[0], e), "attnres: h_1 = e exactly")
        outs = []
        for K in (4, 9):
            blk = RR.make_residual(R.resolve_config({**BASE, "residual.kind": "attnres",
                                                     "residual.block_size": K})).double()
            blk.load_state_dict(ar.state_dict())
            outs.append(blk(e, subs))
        rep.check(torch.allclose(outs[0], outs[1], rtol=0, atol=1e-14), "attnres: K = 2L and K > 2L agree")
        # DAR (§6.7 point 5): self_kv with g = g_F = +40, τ = −40, b⁰ = 0 and w⁰ = AttnRes's queries is
        # Block AttnRes on stream 0, whatever stream 1's parameters; reciprocal routing is not.
        for K in (1, 2, 3):
            attn = RR.make_residual(R.resolve_config({**BASE, "residual.kind": "attnres",
                                                      "residual.block_size": K})).double()
            for p in attn.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
            for routing in ("self_kv", "reciprocal"):
                dar = RR.make_residual(R.resolve_config({**BASE, "residual.kind": "dar", "residual.block_size": K,
                                                         "dar.routing": routing})).double()
                for name, p in dar.named_parameters():
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
                for name, slot in dar.named_children():
                    slot.query0.copy_(attn.slot(name).query)
                    slot.mix.fill_(40.0)
                    if name != "final":
                        slot.transport.fill_(-40.0)
                        slot.gate0.zero_()
                a, b = attn(e, subs), dar(e, subs)
                d = ((a - b).abs().max() / a.abs().max()).item()
                if routing == "self_kv":
                    rep.check(d < 1e-13, f"dar self_kv K={K} forced to g = 40, τ = −40, b⁰ = 0 is Block AttnRes (rel diff {d:.1e})")
                else:
                    rep.check(d > 1e-4, f"dar reciprocal K={K} under the same forcing is not AttnRes (rel diff {d:.1e})")
        m = RR.sinkhorn(torch.randn(1000, 4, 4, generator=gen, dtype=torch.float64), 20)
        rows = (m.sum(-1) - 1).abs().max().item()
        rep.check(rows < 1e-14, f"Sinkhorn rows sum to 1 (max error {rows:.1e})")

    # torch 2.x: SDPA path equals the hand-written attention.
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        m = random_model({"attn.pos": "rope", "model.kv_heads": 2})
        with torch.no_grad():
            a = m.set_attention_impl("manual")(idx)[0]
            b = m.set_attention_impl("sdpa")(idx)[0]
        d = (a - b).abs().max().item()
        rep.check(d < 1e-10, f"SDPA attention equals manual attention (max diff {d:.1e})")
    else:
        print(f"  skip SDPA check (torch {torch.__version__} has no scaled_dot_product_attention)")


# --------------------------------------------------------------------------------------------------
# engine vs reference


def check_init(R, tensors, cfg, rep):
    """MECHANISMS.md §1.4 on the fresh checkpoint: N(0, 0.02²), residual outputs
    N(0, (0.02/√(2L))²), zero biases and sinks, unit gains. Std within 10% (≥ 4096 samples: the
    std estimate's relative sd is ≤ 1.1%, so 10% is ~9 sigma) and mean within 5 sd of zero."""
    resid = 0.02 / math.sqrt(2 * cfg["model.n_layer"])
    # The residual kind's parameters have deterministic inits (§4.3, §5.2, §5.3): exactly the reference's.
    want = {k: v.numpy() for k, v in R.AttnlabGPT(cfg).double().state_dict().items() if k.startswith("residual.")}
    for name, t in sorted(tensors.items()):
        if name.startswith(("adam.", "grad.")):
            continue
        if name.startswith("residual."):
            d = float(np.max(np.abs(t.astype(np.float64) - want[name])))
            rep.check(d < 1e-6, f"init {name} as the spec says (max diff {d:.1e})")
            continue
        t = t.astype(np.float64)
        if name.endswith(".bias") or name.endswith(".sink"):
            rep.check(np.all(t == 0), f"init {name} = 0")
        elif ".ln" in name or name.startswith("ln_f"):
            rep.check(np.all(t == 1), f"init {name} = 1")
        else:
            std = resid if name.endswith("proj.weight") else 0.02
            if t.size < 4096:
                continue
            s, mu = float(t.std()), float(t.mean())
            ok = abs(s / std - 1) < 0.10 and abs(mu) < 5 * std / math.sqrt(t.size)
            rep.check(ok, f"init {name}: std {s:.5f} (want {std:.5f}), mean {mu:+.1e}")


def perturb(tensors, rng):
    """Every parameter made non-trivial and O(1) in effect: matrices N(0, 1/fan_in) (unit-scale
    activations, attention logits of sd ~1), embeddings N(0, 0.1²) (logit sd ~0.8), gains 1 + N(0,
    0.1²), biases N(0, 0.1²), sinks N(0, 1). Optimizer state is kept as it was."""
    out = {}
    for name, t in tensors.items():
        if name.startswith(("adam.", "grad.")):
            out[name] = t
            continue
        if name.startswith("residual."):  # around the init (identity maps, one-hot reads, ...)
            x = t + rng.normal(0.0, 1.0 / math.sqrt(t.shape[0]), t.shape)
        elif name.endswith(".sink"):
            x = rng.normal(0.0, 1.0, t.shape)
        elif name.endswith(".bias"):
            x = rng.normal(0.0, 0.1, t.shape)
        elif ".ln" in name or name.startswith("ln_f"):
            x = 1.0 + rng.normal(0.0, 0.1, t.shape)
        elif name in ("wte", "wpe"):
            x = rng.normal(0.0, 0.1, t.shape)
        else:
            x = rng.normal(0.0, 1.0 / math.sqrt(t.shape[0]), t.shape)
        out[name] = x.astype(np.float32)
    return out


def run_case(R, binary, workdir, name, overrides, T, B, seed):
    from safetensors import safe_open
    rep = Report()
    cfg = {**BASE, **overrides}
    print(f"[{name}] B={B} T={T} " + " ".join(f"{k}={v}" for k, v in overrides.items()))
    config_path = os.path.join(workdir, "config.toml")
    init_path = os.path.join(workdir, "init.safetensors")
    ckpt_path = os.path.join(workdir, "perturbed.safetensors")
    tokens_path = os.path.join(workdir, "tokens.txt")
    grads_path = os.path.join(workdir, "grads.safetensors")
    inputs_path = os.path.join(workdir, "inputs.txt")
    npy_path = os.path.join(workdir, "logits.npy")
    write_config(config_path, cfg)
    run([binary, "init", "--config", config_path, "--out", init_path])

    tensors, saved_cfg = R.read_checkpoint(init_path)
    for k, v in cfg.items():  # the config written is the config saved
        rep.check(saved_cfg.get(k) == v,
                  f"metadata config {k} = {saved_cfg.get(k)!r} (wrote {v!r})")
    resolved = R.resolve_config(saved_cfg)
    want_hidden = 4 * cfg["model.d_model"] if cfg.get("model.mlp", "gelu") == "gelu" \
        else R.swiglu_hidden(cfg["model.d_model"])
    rep.check(saved_cfg.get("model.mlp_hidden") == want_hidden,
              f"metadata model.mlp_hidden = {saved_cfg.get('model.mlp_hidden')!r} "
              f"(want {want_hidden})")
    # the checkpoint holds exactly the parameters the reference expects
    model = R.AttnlabGPT(resolved)
    R.load_state(model, tensors, init_path)
    check_init(R, tensors, resolved, rep)

    rng = np.random.default_rng(seed)
    with safe_open(init_path, framework="numpy") as f:
        metadata = f.metadata()
    save_file(perturb(tensors, rng), ckpt_path, metadata=metadata)
    ids = rng.integers(0, cfg["model.vocab_size"], size=(B, T + 1))
    with open(tokens_path, "w") as f:
        for row in ids:
            f.write(" ".join(str(int(x)) for x in row) + "\n")
    run([binary, "grads", "--checkpoint", ckpt_path, "--tokens", tokens_path, "--out", grads_path])
    # `attnlab forward` reads every id of a line as input: give it ids[:, :-1]
    with open(inputs_path, "w") as f:
        for row in ids[:, :-1]:
            f.write(" ".join(str(int(x)) for x in row) + "\n")
    run([binary, "forward", "--checkpoint", ckpt_path, "--tokens", inputs_path, "--out", npy_path])

    with safe_open(grads_path, framework="numpy") as f:
        got = {k: f.get_tensor(k) for k in f.keys()}

    model, _ = R.load_attnlab(ckpt_path, dtype=torch.float64)
    ids_t = torch.from_numpy(ids).long()
    logits, loss = model(ids_t[:, :-1], ids_t[:, 1:])
    loss.backward()
    for p in model.parameters():  # unused by this forward (DAR's transport at a block start): gradient 0
        if p.grad is None:
            p.grad = torch.zeros_like(p)

    for key in ["loss", "logits"] + ["grad." + n for n, _ in model.named_parameters()]:
        if key not in got:
            rep.failures.append(f"{key} missing from `attnlab grads` output")
            print(f"  FAIL {key:42s} missing from `attnlab grads` output")
    expected = {"loss", "logits"} | {"grad." + n for n, _ in model.named_parameters()}
    extra = sorted(set(got) - expected)
    rep.check(not extra, f"no unexpected tensors in the grads output ({extra or 'none'})")
    if "loss" in got:
        rep.check(got["loss"].shape == (1,), f"loss shape {list(got['loss'].shape)} == [1]")
        rep.compare("loss", got["loss"].reshape(-1)[:1], loss.detach().reshape(1).numpy(), LOSS_TOL)
    if "logits" in got:
        rep.compare("logits", got["logits"], logits.detach().numpy(), LOGITS_TOL)
    rep.compare("forward logits.npy", np.load(npy_path), logits.detach().numpy(), LOGITS_TOL)
    resid_scale = max([float(np.max(np.abs(p.grad.numpy()))) for n, p in model.named_parameters()
                       if n.startswith("residual.")] + [1e-12])
    near_zero = NEAR_ZERO.get(cfg.get("residual.kind"), set())
    for pname, p in model.named_parameters():
        key = "grad." + pname
        if key not in got:
            continue
        if key in near_zero:
            ref = p.grad.numpy()
            worst = float(np.max(np.abs(got[key] - ref)))
            rep.check(worst <= GRAD_TOL * resid_scale,
                      f"{key} (near zero by structure, max|ref| {np.max(np.abs(ref)):.1e}): max|diff| {worst:.1e} "
                      f"<= {GRAD_TOL:.0e} x {resid_scale:.1e}")
        else:
            rep.compare(key, got[key], p.grad.numpy(), GRAD_TOL)
    if "grad.wpe" in got and T < cfg["model.seq_len"]:
        rep.check(np.all(got["grad.wpe"][T:] == 0),
                  f"grad.wpe rows {T}.. are exactly zero (unused)")
    return rep.failures


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} <attnlab-binary> <source-dir>", file=sys.stderr)
        return 2
    binary, source_dir = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    sys.path.insert(0, os.path.join(source_dir, "reference"))
    import attnlab_ref as R
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    print(f"torch {torch.__version__}, numpy {np.__version__}, engine {binary}")

    passed, failed = 0, 0
    results = []

    print("[reference self-checks]")
    rep = Report()
    try:
        reference_self_checks(R, rep)
        failures = rep.failures
    except Exception:
        traceback.print_exc()
        failures = ["exception"]
    results.append(("reference self-checks", failures))

    if not os.access(binary, os.X_OK):
        results.append(("engine", [f"{binary} is not an executable; build it with "
                                   "`cmake --build build/<preset> --target attnlab`"]))
    else:
        for i, (name, overrides, T, B) in enumerate(CASES):
            with tempfile.TemporaryDirectory(prefix="attnlab_ref_") as workdir:
                try:
                    failures = run_case(R, binary, workdir, name, overrides, T, B, seed=1234 + i)
                except Exception as e:  # one broken case must not hide the others
                    expected = isinstance(e, (AssertionError, R.ReferenceError))
                    print(f"  FAIL {e}" if expected else traceback.format_exc())
                    failures = [str(e).splitlines()[0] if str(e) else type(e).__name__]
            results.append((name, failures))

    for name, failures in results:
        if failures:
            failed += 1
            print(f"FAILED {name}: {len(failures)} problem(s); first: {failures[0]}")
        else:
            passed += 1
    print(f"reference: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
