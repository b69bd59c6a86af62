"""PyTorch reference of attnlab's baseline GPT (MECHANISMS.md §1).

Three jobs:
  * the oracle of the golden test (tests/python/test_reference.py): load an attnlab checkpoint in
    float64 and compute logits, loss and autograd gradients to compare with `attnlab grads`;
  * the users' way to take attnlab weights to PyTorch (`load_attnlab`, `export_torch_state_dict`);
  * a readable statement of the math, written op by op like the C++ kernels, citing the spec.

Works with torch 1.13 (Debian's python3-torch: no scaled_dot_product_attention, so attention is
written by hand) and torch 2.x (may use F.scaled_dot_product_attention when there is no sink).

Parameters are kept in attnlab's layout and under attnlab's names, so `model.state_dict()` keys
are exactly the checkpoint's tensor names: matrices are [in, out] and applied as x @ W
(MECHANISMS.md §0, "vectors are rows"). `export_torch_state_dict` transposes them into
nn.Linear's [out, in].

Command line (see reference/README.md):
  python3 reference/attnlab_ref.py info   CKPT.safetensors
  python3 reference/attnlab_ref.py export CKPT.safetensors OUT.pt
  python3 reference/attnlab_ref.py loss   CKPT.safetensors TOKENS.txt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import residual_ref  # the residual kinds (MECHANISMS.md §4-§5), beside this file

__all__ = [
    "AttnlabGPT",
    "ReferenceError",
    "resolve_config",
    "load_attnlab",
    "read_checkpoint",
    "export_torch_state_dict",
    "import_torch_state_dict",
    "read_tokens",
]

LAYERNORM_EPS = 1e-5  # MECHANISMS.md §1.1, Norms table
RMSNORM_EPS = 1e-6


class ReferenceError(ValueError):
    """A user-facing problem with a checkpoint, config or token file (message says what to do)."""


# --------------------------------------------------------------------------------------------------
# configuration


def swiglu_hidden(d_model: int) -> int:
    """d_ff = 64·ceil(8d/192) (MECHANISMS.md §1.1, MLP): 2048 for d = 768."""
    return 64 * math.ceil(8 * d_model / 192)


# Values this reference implements. Anything else is an error, never silently ignored: a reference
# that quietly drops an unknown mechanism would "agree" with a wrong engine.
_SUPPORTED = {
    "model.norm": ("layernorm", "rmsnorm"),
    "model.mlp": ("gelu", "swiglu"),
    "attn.pos": ("none", "learned", "rope", "alibi"),
    "attn.sink": ("none", "learned"),
    "attn.xsa": ("off",),
    "residual.kind": residual_ref.KINDS,
}
_DEFAULTS = {
    "model.kv_heads": None,  # = n_head
    "model.norm": "layernorm",
    "model.mlp": "gelu",
    "model.mlp_hidden": "auto",
    "model.bias": True,
    "attn.pos": "rope",
    "attn.rope.base": 10000.0,
    "attn.sink": "none",
    "attn.xsa": "off",
    "residual.kind": "standard",
}
_REQUIRED = ("model.n_layer", "model.d_model", "model.n_head", "model.seq_len", "model.vocab_size")


def resolve_config(config: Dict) -> Dict:
    """Flat dotted-key config (as in a checkpoint's metadata["config"]) with defaults filled in
    (MECHANISMS.md §1.6) and checked. "train.*" and other keys are kept but not used."""
    cfg = dict(config)
    missing = [k for k in _REQUIRED if k not in cfg]
    if missing:
        raise ReferenceError(f"config lacks {', '.join(missing)}; a checkpoint written by "
                             "`attnlab init` or `attnlab train` always has them")
    for key, value in _DEFAULTS.items():
        cfg.setdefault(key, value)
    if cfg["model.kv_heads"] is None:
        cfg["model.kv_heads"] = cfg["model.n_head"]
    for key, allowed in _SUPPORTED.items():
        if cfg[key] not in allowed:
            raise ReferenceError(f"{key} = {cfg[key]!r} is not implemented by the PyTorch "
                                 f"reference (it implements {', '.join(allowed)}); use "
                                 "`attnlab forward` for this model")
    d, h, hkv = cfg["model.d_model"], cfg["model.n_head"], cfg["model.kv_heads"]
    if d % h != 0:
        raise ReferenceError(f"model.d_model = {d} is not divisible by model.n_head = {h}")
    if h % hkv != 0:
        raise ReferenceError(f"model.n_head = {h} is not divisible by model.kv_heads = {hkv}")
    if cfg["attn.pos"] == "rope" and (d // h) % 2 != 0:
        raise ReferenceError(f"attn.pos = rope needs an even head dim, got {d // h}")
    residual_ref.resolve(cfg, ReferenceError)
    if cfg["model.mlp_hidden"] in ("auto", None, 0):
        cfg["model.mlp_hidden"] = 4 * d if cfg["model.mlp"] == "gelu" else swiglu_hidden(d)
    return cfg


# --------------------------------------------------------------------------------------------------
# layers, in attnlab's parameter layout


class Dense(nn.Module):
    """y = x W + b with W: [in, out] (attnlab stores matrices [in, out]; nn.Linear is W.T)."""

    def __init__(self, n_in: int, n_out: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):  # x: [..., in] -> [..., out]
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class Norm(nn.Module):
    """LayerNorm (eps 1e-5, biased variance) or RMSNorm (eps 1e-6, no bias): MECHANISMS.md §1.1."""

    def __init__(self, d: int, kind: str, bias: bool):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if (bias and kind == "layernorm") else None

    def forward(self, x):  # x: [B, T, d]
        if self.kind == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, LAYERNORM_EPS)
        r = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + RMSNORM_EPS)
        return x * r * self.weight


def rope_tables(T: int, head_dim: int, base: float, offset: int = 0,
                dtype=torch.float32, device=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of t·θ_m, θ_m = base^(−2m/D_h), m < D_h/2; [T, D_h/2]. Computed in float64 and
    then rounded (MECHANISMS.md §0, Precision)."""
    m = torch.arange(head_dim // 2, dtype=torch.float64)
    theta = float(base) ** (-2.0 * m / head_dim)
    t = torch.arange(offset, offset + T, dtype=torch.float64)
    angle = t[:, None] * theta[None, :]
    return angle.cos().to(dtype=dtype, device=device), angle.sin().to(dtype=dtype, device=device)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE pairing dims (m, m + D_h/2) (MECHANISMS.md §1.2). x: [B, heads, T, D_h]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def alibi_slopes(n_head: int) -> List[float]:
    """ALiBi slopes for H query heads (MECHANISMS.md §1.2): 2^(−8(h+1)/H) for a power of two,
    else the P2 slopes followed by every other slope of 2·P2, keeping the first H − P2."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    p2 = 2 ** int(math.floor(math.log2(n_head)))
    if p2 == n_head:
        return power_of_two(n_head)
    return power_of_two(p2) + power_of_two(2 * p2)[0::2][: n_head - p2]


def _has_sdpa() -> bool:
    return hasattr(F, "scaled_dot_product_attention")


class Attention(nn.Module):
    """Causal multi-head attention with GQA, RoPE/ALiBi and a learned sink
    (MECHANISMS.md §1.1-1.3). qkv columns: q heads, then k heads, then v heads, each head D_h
    contiguous."""

    def __init__(self, cfg: Dict):
        super().__init__()
        d, H, Hkv = cfg["model.d_model"], cfg["model.n_head"], cfg["model.kv_heads"]
        self.n_head, self.kv_heads, self.head_dim = H, Hkv, d // H
        self.pos = cfg["attn.pos"]
        self.rope_base = float(cfg["attn.rope.base"])
        bias = bool(cfg["model.bias"])
        self.qkv = Dense(d, (H + 2 * Hkv) * self.head_dim, bias)
        self.proj = Dense(H * self.head_dim, d, bias)
        self.sink = nn.Parameter(torch.zeros(H)) if cfg["attn.sink"] == "learned" else None
        # "manual" (any torch), "sdpa" (torch 2.x, no sink) or "auto" (sdpa when possible).
        self.impl = "manual"

    def forward(self, u):  # u: [B, T, d] -> [B, T, d]
        B, T, _ = u.shape
        H, Hkv, Dh = self.n_head, self.kv_heads, self.head_dim
        qkv = self.qkv(u)
        q, k, v = qkv.split([H * Dh, Hkv * Dh, Hkv * Dh], dim=-1)
        q = q.view(B, T, H, Dh).transpose(1, 2)  # [B, H, T, Dh]
        k = k.view(B, T, Hkv, Dh).transpose(1, 2)  # [B, Hkv, T, Dh]
        v = v.view(B, T, Hkv, Dh).transpose(1, 2)
        if self.pos == "rope":  # on q and k, never on v
            cos, sin = rope_tables(T, Dh, self.rope_base, dtype=u.dtype, device=u.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if Hkv != H:  # query head h reads kv head h // G: repeat each kv head G times, in order
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        use_sdpa = (self.impl in ("sdpa", "auto") and _has_sdpa() and self.sink is None
                    and self.pos != "alibi")
        if self.impl == "sdpa" and not use_sdpa:
            raise ReferenceError("attention impl 'sdpa' needs torch >= 2.0 and no sink or ALiBi")
        if use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = self._manual(q, k, v)
        y = y.transpose(1, 2).reshape(B, T, H * Dh)
        return self.proj(y)

    def _manual(self, q, k, v):  # [B, H, T, Dh] each -> [B, H, T, Dh]
        T = q.shape[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # ℓ_ij, [B, H, T, T]
        if self.pos == "alibi":  # bias_ij = −m_h (t_i − t_j)
            t = torch.arange(T, device=q.device, dtype=q.dtype)
            slopes = torch.tensor(alibi_slopes(self.n_head), device=q.device, dtype=q.dtype)
            scores = scores - slopes[:, None, None] * (t[:, None] - t[None, :])
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        if self.sink is not None:
            # The sink logit s_h joins the softmax denominator with a zero value (§1.3): softmax
            # over [ℓ_i0..ℓ_iT, s_h] and drop the sink's column.
            sink = self.sink.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
            a = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :T]
        else:
            a = torch.softmax(scores, dim=-1)
        return a @ v


class MLP(nn.Module):
    """gelu: GELU_tanh(u W1 + b1) W2 + b2; swiglu: (SiLU(u W_g) ∘ (u W_u)) W_d
    (MECHANISMS.md §1.1)."""

    def __init__(self, cfg: Dict):
        super().__init__()
        d, hidden, bias = cfg["model.d_model"], cfg["model.mlp_hidden"], bool(cfg["model.bias"])
        self.kind = cfg["model.mlp"]
        if self.kind == "gelu":
            self.fc = Dense(d, hidden, bias)
        else:  # gate_up columns: gate then up
            self.gate_up = Dense(d, 2 * hidden, bias)
        self.proj = Dense(hidden, d, bias)

    def forward(self, u):
        if self.kind == "gelu":
            return self.proj(F.gelu(self.fc(u), approximate="tanh"))
        gate, up = self.gate_up(u).chunk(2, dim=-1)
        return self.proj(F.silu(gate) * up)


class Block(nn.Module):
    """Pre-norm block: x += attn(ln1(x)); x += mlp(ln2(x)) (standard residual, §1.1)."""

    def __init__(self, cfg: Dict):
        super().__init__()
        norm, bias = cfg["model.norm"], bool(cfg["model.bias"])
        self.ln1 = Norm(cfg["model.d_model"], norm, bias)
        self.attn = Attention(cfg)
        self.ln2 = Norm(cfg["model.d_model"], norm, bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def sublayers(self) -> List:
        """F_{2i+1}(h) = attn(ln1(h)) and F_{2i+2}(h) = mlp(ln2(h)): what every residual kind wraps."""
        return [lambda h: self.attn(self.ln1(h)), lambda h: self.mlp(self.ln2(h))]


class AttnlabGPT(nn.Module):
    """attnlab's baseline GPT (MECHANISMS.md §1). Built from a flat dotted-key config dict; its
    state_dict names and shapes are exactly those of an attnlab checkpoint."""

    def __init__(self, config: Dict):
        super().__init__()
        self.config = resolve_config(config)
        cfg = self.config
        d, V = cfg["model.d_model"], cfg["model.vocab_size"]
        self.wte = nn.Parameter(torch.zeros(V, d))
        self.wpe = (nn.Parameter(torch.zeros(cfg["model.seq_len"], d))
                    if cfg["attn.pos"] == "learned" else None)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["model.n_layer"])])
        self.ln_f = Norm(d, cfg["model.norm"], bool(cfg["model.bias"]))
        self.residual = residual_ref.make_residual(cfg)  # parameters residual.{l}.* (none for standard)

    def set_attention_impl(self, impl: str) -> "AttnlabGPT":
        """"manual" (default: hand-written, works everywhere), "sdpa" or "auto" (torch 2.x)."""
        if impl not in ("manual", "sdpa", "auto"):
            raise ReferenceError(f"attention impl {impl!r}: use manual, sdpa or auto")
        for block in self.blocks:
            block.attn.impl = impl
        return self

    def init_weights(self, seed: int = 0) -> "AttnlabGPT":
        """The init of MECHANISMS.md §1.4 (a different RNG than attnlab's, so not bit-equal):
        N(0, 0.02²) for E, P and input matrices; N(0, (0.02/sqrt(2L))²) for residual outputs;
        zero biases and sinks; unit gains."""
        gen = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.config["model.n_layer"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("residual."):
                    continue  # the residual kind's own init (§4.3, §5.2, §5.3), below
                if name.endswith(".bias") or name.endswith(".sink"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f"):
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith("proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
            self.residual.reset_parameters(gen)
        return self

    def forward(self, idx, targets=None):
        """idx: [B, T] token ids -> logits [B, T, V]; loss = mean CE over all B·T targets
        (None without targets)."""
        B, T = idx.shape
        if self.wpe is not None and T > self.wpe.shape[0]:
            raise ReferenceError(f"sequence length {T} exceeds model.seq_len = {self.wpe.shape[0]} "
                                 "with learned positions; pass at most seq_len tokens")
        x = self.wte[idx]
        if self.wpe is not None:
            x = x + self.wpe[:T]
        x = self.residual(x, [f for block in self.blocks for f in block.sublayers()])
        logits = self.ln_f(x) @ self.wte.t()  # tied head: Norm_f(x) Eᵀ
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


# --------------------------------------------------------------------------------------------------
# checkpoints


def _import_safetensors():
    try:
        from safetensors import safe_open  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ReferenceError("the `safetensors` package is missing: install it with "
                             "`python3 -m pip install safetensors` (add --break-system-packages "
                             "for Debian's /usr/bin/python3)") from e
    return safe_open


def read_checkpoint(path: str) -> Tuple[Dict[str, np.ndarray], Dict]:
    """All tensors (as numpy) and the parsed metadata["config"] of an attnlab safetensors file,
    read with the official safetensors package."""
    safe_open = _import_safetensors()
    try:
        with safe_open(path, framework="numpy") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except FileNotFoundError:
        raise ReferenceError(f"file {path}: not found; write one with `attnlab init` or "
                             "`attnlab train`") from None
    except Exception as e:  # safetensors raises its own error types for a damaged header
        raise ReferenceError(f"file {path}: not a readable safetensors file ({e}); "
                             "was it written by attnlab?") from None
    if "config" not in metadata:
        raise ReferenceError(f"file {path}: no metadata[\"config\"]; this is not an attnlab "
                             "checkpoint (write one with `attnlab init`)")
    try:
        config = json.loads(metadata["config"])
    except json.JSONDecodeError as e:
        raise ReferenceError(f"file {path}: metadata[\"config\"] is not JSON ({e})") from None
    return tensors, config


def load_state(model: AttnlabGPT, tensors: Dict[str, np.ndarray], path: str = "<tensors>") -> None:
    """Copy attnlab tensors into the model (cast to its dtype). Every parameter must be present with
    its exact shape; optimizer state ("adam.*") and gradients ("grad.*") are ignored; any other
    extra tensor is an error (it would mean the reference does not model something)."""
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in tensors]
    extra = [n for n in tensors if n not in params and not n.startswith(("adam.", "grad."))]
    if missing or extra:
        raise ReferenceError(f"file {path}: tensors do not match the config: missing "
                             f"{missing or 'none'}, unexpected {extra or 'none'}")
    with torch.no_grad():
        for name, p in params.items():
            t = tensors[name]
            if tuple(t.shape) != tuple(p.shape):
                raise ReferenceError(f"file {path}: {name} has shape {list(t.shape)}, the config "
                                     f"implies {list(p.shape)}")
            p.copy_(torch.from_numpy(np.ascontiguousarray(t)).to(p.dtype))


def load_attnlab(path: str, dtype=torch.float32, device=None) -> Tuple[AttnlabGPT, Dict]:
    """(model, resolved config) from an attnlab checkpoint. dtype=torch.float64 for golden tests."""
    tensors, config = read_checkpoint(path)
    model = AttnlabGPT(config).to(dtype=dtype, device=device)
    load_state(model, tensors, path)
    return model, model.config


# --------------------------------------------------------------------------------------------------
# export to and import from nn.Linear naming


def _is_linear_weight(name: str) -> bool:
    """Matrices applied as x @ W (everything named *.weight with 2 dims except embeddings)."""
    return name.endswith(".weight") and name.startswith("blocks.") and ".ln" not in name


def export_torch_state_dict(model_or_path, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    """A plain state dict in PyTorch's convention: same names, but every linear weight transposed to
    nn.Linear's [out, in] (so `nn.Linear(in, out).weight.copy_(sd[name])`). Embeddings stay [V, d] /
    [seq_len, d] as in nn.Embedding; the LM head is tied to wte (lm_head.weight = wte). The config
    is not included: take it from `load_attnlab(path)[1]`."""
    if isinstance(model_or_path, AttnlabGPT):
        model = model_or_path
    else:
        model, _ = load_attnlab(model_or_path)
    out = {}
    for name, p in model.state_dict().items():
        t = p.detach().to(dtype).cpu()
        out[name] = t.t().contiguous() if _is_linear_weight(name) else t.clone()
    return out


def import_torch_state_dict(model: AttnlabGPT, state: Dict[str, torch.Tensor]) -> AttnlabGPT:
    """Inverse of export_torch_state_dict: load [out, in] weights back into attnlab layout."""
    tensors = {n: (t.t() if _is_linear_weight(n) else t).detach().cpu().numpy()
               for n, t in state.items()}
    load_state(model, tensors)
    return model


# --------------------------------------------------------------------------------------------------
# token files


def read_tokens(path: str) -> torch.Tensor:
    """A token file of `attnlab grads`/`forward`: one sequence of ids per line, all the same length.
    Returns [B, T+1] int64."""
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append([int(x) for x in line.replace(",", " ").split()])
            except ValueError:
                raise ReferenceError(f"file {path}, line {lineno}: token ids must be "
                                     "integers") from None
            if len(rows[-1]) != len(rows[0]):
                raise ReferenceError(f"file {path}, line {lineno}: {len(rows[-1])} ids, line 1 has "
                                     f"{len(rows[0])}; all lines must have the same length")
    if not rows:
        raise ReferenceError(f"file {path}: no token ids")
    return torch.tensor(rows, dtype=torch.int64)


# --------------------------------------------------------------------------------------------------
# command line


def _main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="attnlab checkpoints in PyTorch")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="print the config and parameter shapes")
    p.add_argument("checkpoint")
    p = sub.add_parser("export", help="write a torch state dict (nn.Linear layout) with torch.save")
    p.add_argument("checkpoint")
    p.add_argument("out")
    p = sub.add_parser("loss",
                       help="mean CE of a token file (inputs ids[:, :-1], targets ids[:, 1:])")
    p.add_argument("checkpoint")
    p.add_argument("tokens")
    p.add_argument("--float64", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "info":
            model, cfg = load_attnlab(args.checkpoint)
            print(json.dumps({k: v for k, v in sorted(cfg.items())}, indent=1))
            for name, p in model.named_parameters():
                print(f"{name:40s} {list(p.shape)}")
        elif args.cmd == "export":
            model, cfg = load_attnlab(args.checkpoint)
            torch.save({"state_dict": export_torch_state_dict(model), "config": cfg}, args.out)
            print(f"wrote {args.out}")
        elif args.cmd == "loss":
            model, _ = load_attnlab(args.checkpoint,
                                    dtype=torch.float64 if args.float64 else torch.float32)
            ids = read_tokens(args.tokens)
            with torch.no_grad():
                _, loss = model(ids[:, :-1], ids[:, 1:])
            print(f"{loss.item():.6f}")
    except ReferenceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
