"""PyTorch reference of attnlab's GPT (docs/mechanisms.md §1), with XSA (§2) and GOAT (§3).

Three jobs:
  * the oracle of the golden test (tests/python/test_reference.py): load an attnlab checkpoint in
    float64 and compute logits, loss and autograd gradients to compare with `attnlab grads`;
  * the users' way to take attnlab weights to PyTorch (`load_attnlab`, `export_torch_state_dict`);
  * a readable statement of the math, written op by op like the C++ kernels, citing docs/mechanisms.md.

Works with torch 1.13 (Debian's python3-torch: no scaled_dot_product_attention, so attention is
written by hand) and torch 2.x (may use F.scaled_dot_product_attention when there is no sink; ALiBi
and GOAT biases go in as a float mask).

Parameters are kept in attnlab's layout and under attnlab's names, so `model.state_dict()` keys
are exactly the checkpoint's tensor names: matrices are [in, out] and applied as x @ W
(docs/mechanisms.md §0, "vectors are rows"). `export_torch_state_dict` transposes them into
nn.Linear's [out, in].

It lives in the package as attnlab.torch.reference (attnlab.torch.to_module gives an engine Model
as this module); reference/attnlab_ref.py runs this same file for the golden test and old scripts.

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

# The residual kinds (docs/mechanisms.md §4-§5), beside this file: attnlab.torch.residual in the
# package; reference/residual_ref.py when reference/attnlab_ref.py runs this file outside it.
if __package__:
    from . import residual as residual_ref
else:
    import residual_ref

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

LAYERNORM_EPS = 1e-5  # docs/mechanisms.md §1.1, Norms table
RMSNORM_EPS = 1e-6


class ReferenceError(ValueError):
    """A user-facing problem with a checkpoint, config or token file (message says what to do)."""


# --------------------------------------------------------------------------------------------------
# configuration


def swiglu_hidden(d_model: int) -> int:
    """d_ff = 64·ceil(8d/192) (docs/mechanisms.md §1.1, MLP): 2048 for d = 768."""
    return 64 * math.ceil(8 * d_model / 192)


# Values this reference implements. Anything else is an error, never silently ignored: a reference
# that quietly drops an unknown mechanism would "agree" with a wrong engine.
_SUPPORTED = {
    "model.norm": ("layernorm", "rmsnorm"),
    "model.mlp": ("gelu", "swiglu"),
    "attn.pos": ("none", "learned", "rope", "alibi", "goat"),
    "attn.sink": ("none", "learned"),
    "attn.xsa": ("off", "on", "gated"),
    "attn.qk_norm": ("off", "on"),
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
    "attn.qk_norm": "off",
    "residual.kind": "standard",
}
# Defaults of the keys that exist only when their mechanism is on (docs/mechanisms.md §2.5, §3.9); set
# while it is off, they are an error, as in the engine (§7.2, Validation).
_XSA_DEFAULTS = {"attn.xsa.layers": "all"}
_GOAT_DEFAULTS = {
    "attn.goat.pos_rank": 4,
    "attn.goat.abs_rank": 4,
    "attn.goat.pos_base": 10000.0,
    "attn.goat.abs_base": 10000.0,
    "attn.goat.key_bias": True,
    "attn.goat.train_len": None,  # = model.seq_len
    "attn.goat.init": "seeded",
    "attn.goat.init_std": 1e-3,
    "attn.goat.layers": "all",
    "attn.goat.other_pos": "rope",
}
_GOAT_CHOICES = {"attn.goat.init": ("seeded", "uniform"),
                 "attn.goat.other_pos": ("none", "rope", "alibi")}
_REQUIRED = ("model.n_layer", "model.d_model", "model.n_head", "model.seq_len", "model.vocab_size")


def resolve_config(config: Dict) -> Dict:
    """Flat dotted-key config (as in a checkpoint's metadata["config"]) with defaults filled in
    (docs/mechanisms.md §1.6) and checked. "train.*" and other keys are kept but not used."""
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
    _resolve_attention(cfg)
    residual_ref.resolve(cfg, ReferenceError)
    if cfg["model.mlp_hidden"] in ("auto", None, 0):
        cfg["model.mlp_hidden"] = 4 * d if cfg["model.mlp"] == "gelu" else swiglu_hidden(d)
    return cfg


def parse_layers(key: str, value, n_layer: int) -> List[int]:
    """A layer-list key (attn.xsa.layers, attn.goat.layers): "all" or a non-empty list of distinct
    0-based layer indices (a JSON list in a checkpoint; "[0, 2]" as a string is accepted too).
    Returns the layers, sorted."""
    if isinstance(value, str):
        if value.strip() == "all":
            return list(range(n_layer))
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ReferenceError(f"{key} = {value!r}: use \"all\" or a list of layer indices such "
                                 "as [0, 2]") from None
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ReferenceError(f"{key} = {value!r}: use \"all\" or a list of layer indices such as "
                             "[0, 2]")
    if not value or len(set(value)) != len(value):  # as the engine: "all", or distinct layers
        raise ReferenceError(f"{key} = {list(value)}: use \"all\" or a non-empty list of "
                             "distinct layer indices")
    bad = [i for i in value if not 0 <= i < n_layer]
    if bad:
        raise ReferenceError(f"{key} = {list(value)}: layer {bad[0]} is outside [0, "
                             f"{n_layer}) (model.n_layer = {n_layer}; layers are 0-based)")
    return sorted(value)


def _resolve_attention(cfg: Dict) -> None:
    """Defaults and checks of the attn.xsa.* and attn.goat.* keys (docs/mechanisms.md §2.5, §3.9,
    §7.2), in place."""
    L = cfg["model.n_layer"]
    d, h = cfg["model.d_model"], cfg["model.n_head"]
    head_dim = d // h
    for keys, active, why in ((_XSA_DEFAULTS, cfg["attn.xsa"] != "off", "attn.xsa is off"),
                              (_GOAT_DEFAULTS, cfg["attn.pos"] == "goat", "attn.pos is not goat")):
        for key in keys:
            if not active and key in cfg:
                raise ReferenceError(f"{key} is set but has no effect because {why}; remove it")
    known = set(_XSA_DEFAULTS) | set(_GOAT_DEFAULTS)
    for key in cfg:
        if key.startswith(("attn.xsa.", "attn.goat.")) and key not in known:
            raise ReferenceError(f"unknown configuration key {key!r} (docs/mechanisms.md §7.2 lists "
                                 f"{', '.join(sorted(known))})")
    if cfg["attn.xsa"] != "off":
        for key, value in _XSA_DEFAULTS.items():
            cfg.setdefault(key, value)
        parse_layers("attn.xsa.layers", cfg["attn.xsa.layers"], L)
    uses_rope = cfg["attn.pos"] == "rope"
    if cfg["attn.pos"] == "goat":
        for key, value in _GOAT_DEFAULTS.items():
            cfg.setdefault(key, value)
        if cfg["attn.goat.train_len"] in (None, 0):
            cfg["attn.goat.train_len"] = cfg["model.seq_len"]
        for key, allowed in _GOAT_CHOICES.items():
            if cfg[key] not in allowed:
                raise ReferenceError(f"{key} = {cfg[key]!r}: use one of {', '.join(allowed)}")
        for key in ("attn.goat.pos_rank", "attn.goat.abs_rank", "attn.goat.train_len"):
            v = cfg[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < (1 if "train" in key else 0):
                raise ReferenceError(f"{key} = {v!r}: must be an integer >= "
                                     f"{1 if 'train' in key else 0}")
        for key in ("attn.goat.pos_base", "attn.goat.abs_base", "attn.goat.init_std"):
            v = cfg[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or \
                    not (v >= 0 if key.endswith("init_std") else v > 0):
                raise ReferenceError(f"{key} = {v!r}: must be a "
                                     f"{'non-negative' if key.endswith('init_std') else 'positive'}"
                                     " number")
        if not isinstance(cfg["attn.goat.key_bias"], bool):
            raise ReferenceError(f"attn.goat.key_bias = {cfg['attn.goat.key_bias']!r}: must be "
                                 "true or false")
        lanes = 2 * cfg["attn.goat.pos_rank"] + int(cfg["attn.goat.key_bias"])
        if head_dim - lanes < 1:
            raise ReferenceError(
                f"attn.goat: head dim {head_dim} (model.d_model / model.n_head) leaves no content "
                f"dims after 2·pos_rank + key_bias = {lanes} prior lanes (docs/mechanisms.md §3.1); "
                "lower attn.goat.pos_rank or widen the heads")
        goat_layers = parse_layers("attn.goat.layers", cfg["attn.goat.layers"], L)
        uses_rope = cfg["attn.goat.other_pos"] == "rope" and len(goat_layers) < L
    if uses_rope and head_dim % 2 != 0:
        raise ReferenceError(f"attn.pos = rope needs an even head dim, got {head_dim}")
    if cfg["attn.qk_norm"] == "on" and all(layer_attention(cfg, i)[0] == "goat" for i in range(L)):
        raise ReferenceError("attn.qk_norm = on has no effect because every layer is a GOAT layer "
                             "(docs/mechanisms.md §1.8)")


def layer_attention(cfg: Dict, layer: int) -> Tuple[str, str]:
    """(positional scheme, XSA mode) of one layer of a resolved config: GOAT layers use "goat",
    the others attn.goat.other_pos (§7.1); XSA is "off" outside attn.xsa.layers."""
    L = cfg["model.n_layer"]
    pos = cfg["attn.pos"]
    if pos == "goat" and layer not in parse_layers("attn.goat.layers", cfg["attn.goat.layers"], L):
        pos = cfg["attn.goat.other_pos"]
    xsa = cfg["attn.xsa"]
    if xsa != "off" and layer not in parse_layers("attn.xsa.layers", cfg["attn.xsa.layers"], L):
        xsa = "off"
    return pos, xsa


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
    """LayerNorm (eps 1e-5, biased variance) or RMSNorm (eps 1e-6, no bias): docs/mechanisms.md §1.1."""

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
    then rounded (docs/mechanisms.md §0, Precision)."""
    m = torch.arange(head_dim // 2, dtype=torch.float64)
    theta = float(base) ** (-2.0 * m / head_dim)
    t = torch.arange(offset, offset + T, dtype=torch.float64)
    angle = t[:, None] * theta[None, :]
    return angle.cos().to(dtype=dtype, device=device), angle.sin().to(dtype=dtype, device=device)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE pairing dims (m, m + D_h/2) (docs/mechanisms.md §1.2). x: [B, heads, T, D_h]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def alibi_slopes(n_head: int) -> List[float]:
    """ALiBi slopes for H query heads (docs/mechanisms.md §1.2): 2^(−8(h+1)/H) for a power of two,
    else the P2 slopes followed by every other slope of 2·P2, keeping the first H − P2."""
    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    p2 = 2 ** int(math.floor(math.log2(n_head)))
    if p2 == n_head:
        return power_of_two(n_head)
    return power_of_two(p2) + power_of_two(2 * p2)[0::2][: n_head - p2]


def _has_sdpa() -> bool:
    return hasattr(F, "scaled_dot_product_attention")


def softplus_inverse(y: float) -> float:
    """softplus⁻¹(y) = log(expm1(y)) (docs/mechanisms.md §0)."""
    return math.log(math.expm1(y))


XSA_EPS = 1e-12  # floor of ‖v‖ (docs/mechanisms.md §2.3)
GOAT_HIDDEN = 4  # width of GOAT's sink MLP: min(2(2M+2), 4) = 4 for every M (§3.3)


def exclusive_self_attention(y, v, gamma=None):
    """XSA (docs/mechanisms.md §2.1): remove from each head's output its component along the token's own
    value, z = y − γ (y·v̂) v̂ with v̂ = v / max(‖v‖, 1e-12); γ = 1 (mode on) or tanh(a) (gated:
    gamma = tanh(a), [H]). y: [B, H, T, D_h]; v: [B, H, T, D_h], the value of KV head κ(h) at the
    same position (unrotated: RoPE never touches v)."""
    vhat = v / v.norm(dim=-1, keepdim=True).clamp_min(XSA_EPS)
    c = (y * vhat).sum(dim=-1, keepdim=True)
    if gamma is None:
        return y - c * vhat
    return y - gamma.view(1, -1, 1, 1) * c * vhat


class GoatPrior(nn.Module):
    """GOAT's learned log-prior (docs/mechanisms.md §3) of one layer, per KV head κ, in the explicit
    relative form of §3.4, with Δ_ij = t_i − t_j:

        Π^κ_ij = Σ_r (A_κr cos(ω_r Δ_ij) + B_κr sin(ω_r Δ_ij)) + U_κ(j) − softplus(ρ_κ)·Δ_ij
        U_κ(j) = gain_κ·u(j) + bump_κ·[t_j = 0],   u(j) = w2 · SiLU(W1 φ(t_j) + b1) + b2

    U and the recency term exist only with key_bias. Parameters (attnlab names): A, B [H_kv, R];
    with key_bias W1 [4, 2M+2] (applied as W1 φ), b1 [4], w2 [4], b2 [1], gain, bump, rho [H_kv].
    Constants (ω, ω′, φ) are computed in float64 and then rounded (§0, Precision)."""

    def __init__(self, cfg: Dict):
        super().__init__()
        Hkv = cfg["model.kv_heads"]
        self.pos_rank, self.abs_rank = cfg["attn.goat.pos_rank"], cfg["attn.goat.abs_rank"]
        self.pos_base = float(cfg["attn.goat.pos_base"])
        self.abs_base = float(cfg["attn.goat.abs_base"])
        self.key_bias = bool(cfg["attn.goat.key_bias"])
        self.train_len = int(cfg["attn.goat.train_len"])  # τ, fixed (§3.2)
        self.init_kind, self.init_std = cfg["attn.goat.init"], float(cfg["attn.goat.init_std"])
        R, M = self.pos_rank, self.abs_rank
        self.A = nn.Parameter(torch.zeros(Hkv, R))  # λ_sym
        self.B = nn.Parameter(torch.zeros(Hkv, R))  # λ_asym
        if self.key_bias:
            self.W1 = nn.Parameter(torch.zeros(GOAT_HIDDEN, 2 * M + 2))
            self.b1 = nn.Parameter(torch.zeros(GOAT_HIDDEN))
            self.w2 = nn.Parameter(torch.zeros(GOAT_HIDDEN))
            self.b2 = nn.Parameter(torch.zeros(1))  # dead without a sink (§3.5); kept for fidelity
            self.gain = nn.Parameter(torch.ones(Hkv))
            self.bump = nn.Parameter(torch.zeros(Hkv))
            self.rho = nn.Parameter(torch.zeros(Hkv))  # recency slope softplus(ρ)

    @staticmethod
    def lanes(cfg: Dict) -> int:
        """Prior lanes per head, 2R + key_bias: the head dims GOAT takes from q and k (§3.1)."""
        return 2 * cfg["attn.goat.pos_rank"] + int(bool(cfg["attn.goat.key_bias"]))

    def frequencies(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """ω_r = pos_base^(−r/max(R−1,1)) [R] and ω′_m = abs_base^(−m/max(M−1,1)) [M], float64."""
        R, M = self.pos_rank, self.abs_rank
        r = torch.arange(R, dtype=torch.float64)
        m = torch.arange(M, dtype=torch.float64)
        return self.pos_base ** (-r / max(R - 1, 1)), self.abs_base ** (-m / max(M - 1, 1))

    def features(self, t: torch.Tensor) -> torch.Tensor:
        """φ(t) = [cos(ω′t), sin(ω′t), t/τ, log1p(t)/log1p(τ)] for positions t: [T, 2M+2], float64."""
        _, omega_abs = self.frequencies()
        t = t.to(torch.float64)
        angle = t[:, None] * omega_abs[None, :]
        tau = float(self.train_len)
        return torch.cat([angle.cos(), angle.sin(), (t / tau)[:, None],
                          (torch.log1p(t) / math.log1p(tau))[:, None]], dim=1)

    def key_profile(self, t: torch.Tensor, dtype, device=None) -> torch.Tensor:
        """U_κ(j) for key positions t: [H_kv, T] (key_bias only)."""
        phi = self.features(t).to(dtype=dtype, device=device)
        u = F.silu(phi @ self.W1.t() + self.b1) @ self.w2 + self.b2  # [T], shared by the heads
        first = (t == 0).to(dtype=dtype, device=device)  # the BOS bump: absolute position 0
        return self.gain[:, None] * u[None, :] + self.bump[:, None] * first[None, :]

    def bias(self, T: int, offset: int = 0, dtype=torch.float32, device=None) -> torch.Tensor:
        """Π^κ_ij for t_i = offset + i, t_j = offset + j: [H_kv, T, T]. Defined for every (i, j);
        the caller masks j > i."""
        t = torch.arange(offset, offset + T, dtype=torch.float64)
        delta = t[:, None] - t[None, :]
        omega, _ = self.frequencies()
        angle = omega[:, None, None] * delta[None]  # [R, T, T]
        cos = angle.cos().to(dtype=dtype, device=device)
        sin = angle.sin().to(dtype=dtype, device=device)
        prior = (torch.einsum("kr,rij->kij", self.A, cos)
                 + torch.einsum("kr,rij->kij", self.B, sin))
        if self.key_bias:
            prior = (prior + self.key_profile(t, dtype, device)[:, None, :]
                     - F.softplus(self.rho)[:, None, None] * delta.to(dtype=dtype, device=device))
        return prior

    def trick_logits(self, q_c, k_c, head_dim: int, offset: int = 0):
        """The official concatenation form (§3.4, "Concatenation trick"), kept as the second
        statement of the math that the self-checks compare with `bias`: q_tot·k_tot/sqrt(D_h) with
        q_tot = sqrt(D_h)[q_c/sqrt(D_c), A∘C_i + B∘S_i, A∘S_i − B∘C_i, 1] and
        k_tot = [k_c, C_j, S_j, U(j) + softplus(ρ)·t_j]. It has the KEY form of the recency term, so
        it equals the explicit logits plus softplus(ρ_κ)·t_i. q_c: [B, H, T, D_c],
        k_c: [B, H_kv, T, D_c] -> [B, H, T, T] (unmasked)."""
        B, H, T, Dc = q_c.shape
        Hkv = k_c.shape[1]
        dtype, device = q_c.dtype, q_c.device
        t = torch.arange(offset, offset + T, dtype=torch.float64)
        omega, _ = self.frequencies()
        angle = t[:, None] * omega[None, :]
        C = angle.cos().to(dtype=dtype, device=device)  # [T, R]
        S = angle.sin().to(dtype=dtype, device=device)
        A = self.A.repeat_interleave(H // Hkv, dim=0)[None, :, None, :]  # [1, H, 1, R]
        Bs = self.B.repeat_interleave(H // Hkv, dim=0)[None, :, None, :]
        q_parts = [q_c / math.sqrt(Dc), (A * C + Bs * S).expand(B, H, T, -1),
                   (A * S - Bs * C).expand(B, H, T, -1)]
        k_parts = [k_c, C.expand(B, Hkv, T, -1), S.expand(B, Hkv, T, -1)]
        if self.key_bias:
            q_parts.append(torch.ones(B, H, T, 1, dtype=dtype, device=device))
            lane = (self.key_profile(t, dtype, device)
                    + F.softplus(self.rho)[:, None] * t.to(dtype=dtype, device=device)[None, :])
            k_parts.append(lane[None, :, :, None].expand(B, Hkv, T, 1))
        q_tot = math.sqrt(head_dim) * torch.cat(q_parts, dim=-1)
        k_tot = torch.cat(k_parts, dim=-1).repeat_interleave(H // Hkv, dim=1)
        assert q_tot.shape[-1] == head_dim and k_tot.shape[-1] == head_dim
        return (q_tot @ k_tot.transpose(-2, -1)) / math.sqrt(head_dim)

    def init_(self, gen: torch.Generator) -> None:
        """attn.goat.init (docs/mechanisms.md §3.6). seeded: A ~ N(0, 0.01²), B = 0, W1, w2 ~
        N(0, init_std²), b1 = b2 = 0, gain 1, bump 0, ρ = softplus⁻¹(ALiBi slopes of H_kv heads).
        uniform: A = B = 0, W1 ~ N(0, init_std²), w2 = b1 = b2 = 0, gain 1, bump 0, ρ = −30."""
        def normal(p, std):
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
        seeded = self.init_kind == "seeded"
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
            if seeded:
                normal(self.A, 0.01)
            if self.key_bias:
                normal(self.W1, self.init_std)
                if seeded:
                    normal(self.w2, self.init_std)
                    slopes = alibi_slopes(self.rho.shape[0])
                    self.rho.copy_(torch.tensor([softplus_inverse(m) for m in slopes],
                                                dtype=torch.float64))
                else:
                    self.rho.fill_(-30.0)
                self.gain.fill_(1.0)


class Attention(nn.Module):
    """Causal multi-head attention of layer `layer` (docs/mechanisms.md §1.1-1.3) with GQA, RoPE or
    ALiBi, a learned sink, XSA (§2) and GOAT (§3). qkv columns: q heads, then k heads, then v heads,
    each head contiguous; on GOAT layers the q and k heads have D_c = D_h − (2R + key_bias) columns
    (content only, §3.1) and the v heads keep D_h."""

    def __init__(self, cfg: Dict, layer: int = 0):
        super().__init__()
        d, H, Hkv = cfg["model.d_model"], cfg["model.n_head"], cfg["model.kv_heads"]
        self.n_head, self.kv_heads, self.head_dim = H, Hkv, d // H
        self.pos, self.xsa = layer_attention(cfg, layer)  # GOAT layers: "goat", else other_pos
        self.rope_base = float(cfg["attn.rope.base"])
        # q/k width per head: content dims only on GOAT layers; the prior never enters q or k here.
        self.qk_dim = self.head_dim - (GoatPrior.lanes(cfg) if self.pos == "goat" else 0)
        bias = bool(cfg["model.bias"])
        self.qkv = Dense(d, (H + Hkv) * self.qk_dim + Hkv * self.head_dim, bias)
        self.proj = Dense(H * self.head_dim, d, bias)
        self.sink = nn.Parameter(torch.zeros(H)) if cfg["attn.sink"] == "learned" else None
        # XSA gate a (γ = tanh(a)): zero-init, so a gated layer starts as "off" (§2.1).
        self.xsa_gate = nn.Parameter(torch.zeros(H)) if self.xsa == "gated" else None
        self.goat = GoatPrior(cfg) if self.pos == "goat" else None
        # QK-norm (§1.8): RMSNorm of each q and k head with a gain shared by the heads, before
        # RoPE; not on GOAT layers, whose q/k carry the prior's lanes.
        qk_norm = cfg["attn.qk_norm"] == "on" and self.pos != "goat"
        self.q_norm = Norm(self.head_dim, "rmsnorm", False) if qk_norm else None
        self.k_norm = Norm(self.head_dim, "rmsnorm", False) if qk_norm else None
        # "manual" (any torch), "sdpa" (torch 2.x, no sink) or "auto" (sdpa when possible).
        self.impl = "manual"

    def init_mechanisms_(self, gen: torch.Generator) -> None:
        """XSA gates 0 (§2.1) and GOAT's prior init (§3.6)."""
        with torch.no_grad():
            if self.xsa_gate is not None:
                self.xsa_gate.zero_()
        if self.goat is not None:
            self.goat.init_(gen)

    def position_bias(self, T: int, dtype, device=None) -> Optional[torch.Tensor]:
        """Additive logit bias of the query heads, [H, T, T] (entries j > i unused): ALiBi's
        −m_h(t_i − t_j) (§1.2) or GOAT's Π^κ(h) (§3.4); None for the other schemes."""
        if self.pos == "alibi":
            t = torch.arange(T, device=device, dtype=dtype)
            slopes = torch.tensor(alibi_slopes(self.n_head), device=device, dtype=dtype)
            return -slopes[:, None, None] * (t[:, None] - t[None, :])
        if self.pos == "goat":
            prior = self.goat.bias(T, dtype=dtype, device=device)  # [H_kv, T, T]
            return prior.repeat_interleave(self.n_head // self.kv_heads, dim=0)
        return None

    def forward(self, u, trace: Optional[Dict] = None):  # u: [B, T, d] -> [B, T, d]
        """trace (a dict, for the self-checks) receives q, k, v (per query head), y and z, and with
        the manual path the masked logits and the probabilities."""
        B, T, _ = u.shape
        H, Hkv, Dh, Dq = self.n_head, self.kv_heads, self.head_dim, self.qk_dim
        q, k, v = self.qkv(u).split([H * Dq, Hkv * Dq, Hkv * Dh], dim=-1)
        q = q.view(B, T, H, Dq).transpose(1, 2)  # [B, H, T, Dq]
        k = k.view(B, T, Hkv, Dq).transpose(1, 2)  # [B, Hkv, T, Dq]
        v = v.view(B, T, Hkv, Dh).transpose(1, 2)  # [B, Hkv, T, Dh]
        if self.q_norm is not None:  # §1.8: normalize, then rotate
            q, k = self.q_norm(q), self.k_norm(k)
        if self.pos == "rope":  # on q and k, never on v
            cos, sin = rope_tables(T, Dh, self.rope_base, dtype=u.dtype, device=u.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if Hkv != H:  # query head h reads kv head h // G: repeat each kv head G times, in order
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        bias = self.position_bias(T, u.dtype, u.device)
        use_sdpa = self.impl in ("sdpa", "auto") and _has_sdpa() and self.sink is None
        if self.impl == "sdpa" and not use_sdpa:
            raise ReferenceError("attention impl 'sdpa' needs torch >= 2.0 and no sink")
        if use_sdpa and bias is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif use_sdpa:  # the positional bias as a float mask; the default scale is 1/sqrt(Dq)
            causal = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias.masked_fill(~causal, float("-inf")))
        else:
            y = self._manual(q, k, v, bias, trace)
        z = y
        if self.xsa != "off":  # per head, before the concat and W_o (§2.1)
            gamma = torch.tanh(self.xsa_gate) if self.xsa_gate is not None else None
            z = exclusive_self_attention(y, v, gamma)
        if trace is not None:
            trace.update(q=q, k=k, v=v, y=y, z=z)
        return self.proj(z.transpose(1, 2).reshape(B, T, H * Dh))

    def _manual(self, q, k, v, bias, trace=None):  # q, k: [B, H, T, Dq]; v: [B, H, T, Dh]
        T = q.shape[2]
        # ℓ_ij; the content scale is 1/sqrt(D_c) on GOAT layers, and the prior is not scaled (§3.4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, T, T]
        if bias is not None:
            scores = scores + bias
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        if self.sink is not None:
            # The sink logit s_h joins the softmax denominator with a zero value (§1.3): softmax
            # over [ℓ_i0..ℓ_iT, s_h] and drop the sink's column. GOAT's relative recency form
            # leaves it unchanged (§3.4).
            sink = self.sink.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:3], 1)
            a = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :T]
        else:
            a = torch.softmax(scores, dim=-1)
        if trace is not None:
            trace.update(logits=scores, probs=a)
        return a @ v


class MLP(nn.Module):
    """gelu: GELU_tanh(u W1 + b1) W2 + b2; swiglu: (SiLU(u W_g) ∘ (u W_u)) W_d
    (docs/mechanisms.md §1.1)."""

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

    def __init__(self, cfg: Dict, layer: int = 0):
        super().__init__()
        norm, bias = cfg["model.norm"], bool(cfg["model.bias"])
        self.ln1 = Norm(cfg["model.d_model"], norm, bias)
        self.attn = Attention(cfg, layer)
        self.ln2 = Norm(cfg["model.d_model"], norm, bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def sublayers(self) -> List:
        """F_{2i+1}(h) = attn(ln1(h)) and F_{2i+2}(h) = mlp(ln2(h)): what every residual kind wraps."""
        return [lambda h: self.attn(self.ln1(h)), lambda h: self.mlp(self.ln2(h))]


class AttnlabGPT(nn.Module):
    """attnlab's GPT (docs/mechanisms.md §1-3). Built from a flat dotted-key config dict; its
    state_dict names and shapes are exactly those of an attnlab checkpoint."""

    def __init__(self, config: Dict):
        super().__init__()
        self.config = resolve_config(config)
        cfg = self.config
        d, V = cfg["model.d_model"], cfg["model.vocab_size"]
        self.wte = nn.Parameter(torch.zeros(V, d))
        self.wpe = (nn.Parameter(torch.zeros(cfg["model.seq_len"], d))
                    if cfg["attn.pos"] == "learned" else None)
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg["model.n_layer"])])
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
        """The init of docs/mechanisms.md §1.4 (a different RNG than attnlab's, so not bit-equal):
        N(0, 0.02²) for E, P and input matrices; N(0, (0.02/sqrt(2L))²) for residual outputs;
        zero biases and sinks; unit gains; zero XSA gates (§2.1) and GOAT's attn.goat.init (§3.6)."""
        gen = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.config["model.n_layer"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("residual."):
                    continue  # the residual kind's own init (§4.3, §5.2, §5.3), below
                if name.endswith(".bias") or name.endswith(".sink"):
                    p.zero_()
                elif ".ln" in name or name.startswith("ln_f") or name.endswith("_norm.weight"):
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith("proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)
            self.residual.reset_parameters(gen)
        for block in self.blocks:  # XSA gates and GOAT priors have their own init (§2.1, §3.6)
            block.attn.init_mechanisms_(gen)
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
