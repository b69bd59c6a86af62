"""PyTorch reference of attnlab's residual kinds (docs/mechanisms.md §1.1, §4, §5, §6), imported by
reference.py (attnlab.torch.residual; reference/residual_ref.py runs this file outside the package). Each kind is an nn.Module called as

    x_f = residual(e, sublayers)      # e: [B, T, d]; sublayers: the 2L functions F_l(h) = f_l(Norm_l(h))

returning the input of Norm_f. The math is written as docs/mechanisms.md states it (lists of candidates, the
stream matrices as tensors) and autograd provides the backward, so this is an independent oracle
for the engine's hand-written backward. Parameter names are the engine's: a kind's state_dict keys,
under the model's `residual` attribute, are `residual.{l}.<name>` (l = 1..2L) and
`residual.final.<name>`, with attnlab's shapes (DAR's shared value maps: `residual.value<j>`).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn

KINDS = ("standard", "attnres", "hyper", "mhc", "dar")
RMS_NG_EPS = 1e-6  # RMSNorm without gain (§0)

# §7.2 defaults of the residual keys (block_size: 1 for attnres, filled in by resolve()).
DEFAULTS = {
    "residual.block_size": None,
    "residual.streams": 4,
    "residual.hc.scale_init": 0.01,
    "residual.mhc.sinkhorn_iters": 20,
    "residual.mhc.alpha_init": 0.01,
    "residual.mhc.phi_init": "zero",
    "residual.mhc.home_weight": 0.9,
    "residual.mhc.res_diag": 0.9,
    # DAR (§6.6)
    "dar.routing": "reciprocal",
    "dar.sep_v": False,
    "dar.include_partial": True,
    "dar.init": "parity",
    "dar.tau_init": -6.0,
    "dar.other_b_init": -2.0,
}
DAR_ROUTINGS = ("reciprocal", "self_kv", "cross_v", "fixed_kv")


def resolve(cfg: Dict, error=ValueError) -> None:
    """Fills the residual defaults into a flat config dict (in place) and checks them."""
    for key, value in DEFAULTS.items():
        cfg.setdefault(key, value)
    if cfg["residual.block_size"] is None:
        cfg["residual.block_size"] = 2 if cfg.get("residual.kind") == "dar" else 1
    if int(cfg["residual.block_size"]) < 1:
        raise error(f"residual.block_size = {cfg['residual.block_size']} must be >= 1")
    if int(cfg["residual.streams"]) < 2:
        raise error(f"residual.streams = {cfg['residual.streams']} must be >= 2")
    if cfg["dar.routing"] not in DAR_ROUTINGS:
        raise error(f"dar.routing = {cfg['dar.routing']!r}: use one of {', '.join(DAR_ROUTINGS)}")
    if cfg["dar.init"] not in ("parity", "uniform"):
        raise error(f"dar.init = {cfg['dar.init']!r}: use parity or uniform")
    for key in ("residual.mhc.home_weight", "residual.mhc.res_diag"):
        if not 0 < float(cfg[key]) < 1:
            raise error(f"{key} = {cfg[key]} must be strictly between 0 and 1")


def rms_ng(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm_ng over the last dim: x / sqrt(mean(x²) + 1e-6) (§0)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + RMS_NG_EPS)


def depth_attention(candidates: List[torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    """§4.1: per token, softmax over candidates of w·RMSNorm_ng(C_r), applied to the raw C_r."""
    values = torch.stack(candidates, dim=0)  # [R, B, T, d]
    scores = (rms_ng(values) * w).sum(dim=-1)  # [R, B, T]
    weights = torch.softmax(scores, dim=0)  # max-subtracted inside softmax; no temperature
    return (weights.unsqueeze(-1) * values).sum(dim=0)


def sinkhorn(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """§5.3: M = exp(H̃ − max H̃), then `iters` times columns then rows normalised (sums guarded
    with max(·, 1e-30)). logits: [..., n, n] with [s, u] = [row, column]."""
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(iters):
        m = m / m.sum(dim=-2, keepdim=True).clamp_min(1e-30)  # columns: sum over s
        m = m / m.sum(dim=-1, keepdim=True).clamp_min(1e-30)  # rows: sum over u
    return m


class _Slot(nn.Module):
    """The parameters of one sublayer (or of the read-out): attributes named as in attnlab."""


class Standard(nn.Module):
    """x_l = x_{l−1} + F_l(x_{l−1}) (§1.1). No parameters."""

    def __init__(self, cfg: Dict):
        super().__init__()

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        pass

    def forward(self, e, sublayers: List[Callable]):
        x = e
        for f in sublayers:
            x = x + f(x)
        return x


class _PerSublayer(nn.Module):
    """A kind whose parameters live in children named "1".."2L" (and "final"), so that the model's
    state_dict keys are residual.{l}.<name>."""

    def __init__(self, cfg: Dict, with_final: bool):
        super().__init__()
        self.L2 = 2 * int(cfg["model.n_layer"])
        self.d = int(cfg["model.d_model"])
        names = [str(l) for l in range(1, self.L2 + 1)] + (["final"] if with_final else [])
        for name in names:
            self.add_module(name, _Slot())

    def slot(self, l) -> nn.Module:
        return self._modules[str(l)]


class AttnRes(_PerSublayer):
    """Attention Residuals, Full (K = 1) and Block (§4.2), with the read-out's own query."""

    def __init__(self, cfg: Dict):
        super().__init__(cfg, with_final=True)
        self.K = int(cfg["residual.block_size"])
        for name, slot in self.named_children():
            slot.query = nn.Parameter(torch.zeros(self.d))

    def reset_parameters(self, generator=None) -> None:
        with torch.no_grad():
            for slot in self.children():
                slot.query.zero_()  # uniform depth weights at init (§4.3)

    def forward(self, e, sublayers):
        completed, partial = [e], None
        for l, f in enumerate(sublayers, start=1):
            h = depth_attention(completed + ([partial] if partial is not None else []), self.slot(l).query)
            o = f(h)
            partial = o if partial is None else partial + o
            if l % self.K == 0 or l == self.L2:
                completed.append(partial)
                partial = None
        return depth_attention(completed, self.slot("final").query)


class Hyper(_PerSublayer):
    """Hyper-connections (§5.1, §5.2): n streams, expanded from e, collapsed by a sum."""

    def __init__(self, cfg: Dict):
        super().__init__(cfg, with_final=False)
        self.n = int(cfg["residual.streams"])
        self.scale_init = float(cfg["residual.hc.scale_init"])
        n, d = self.n, self.d
        for slot in self.children():
            slot.w_beta = nn.Parameter(torch.zeros(d))
            slot.w_m = nn.Parameter(torch.zeros(d))
            slot.w_r = nn.Parameter(torch.zeros(d, n))
            slot.s_alpha = nn.Parameter(torch.zeros(1))
            slot.s_beta = nn.Parameter(torch.zeros(1))
            slot.beta0 = nn.Parameter(torch.zeros(n))
            slot.m0 = nn.Parameter(torch.zeros(n))
            slot.a0 = nn.Parameter(torch.zeros(n, n))
        self.reset_parameters()

    def reset_parameters(self, generator=None) -> None:
        """§5.2: w = 0, s = scale_init, β0 = 1, m0 = e_{h(l)} with h(l) = (l−1) mod n, A0 = I."""
        with torch.no_grad():
            for l in range(1, self.L2 + 1):
                s = self.slot(l)
                for p in (s.w_beta, s.w_m, s.w_r, s.m0):
                    p.zero_()
                s.s_alpha.fill_(self.scale_init)
                s.s_beta.fill_(self.scale_init)
                s.beta0.fill_(1.0)
                s.m0[(l - 1) % self.n] = 1.0
                s.a0.copy_(torch.eye(self.n, dtype=s.a0.dtype))

    def forward(self, e, sublayers):
        X = e.unsqueeze(-2).expand(*e.shape[:-1], self.n, self.d)  # [B, T, n, d]
        for l, f in enumerate(sublayers, start=1):
            p = self.slot(l)
            Xb = rms_ng(X)
            beta = p.s_beta * torch.tanh(Xb @ p.w_beta) + p.beta0  # [B, T, n] (index u)
            m = p.s_alpha * torch.tanh(Xb @ p.w_m) + p.m0  # [B, T, n] (index s)
            A = p.s_alpha * torch.tanh(Xb @ p.w_r) + p.a0  # [B, T, n(s), n(u)]
            o = f((m.unsqueeze(-1) * X).sum(dim=-2))  # u = Σ_s m_s X_s
            X = beta.unsqueeze(-1) * o.unsqueeze(-2) + torch.einsum("btsu,btsd->btud", A, X)
        return X.sum(dim=-2)


class Mhc(_PerSublayer):
    """Manifold-constrained hyper-connections (§5.1, §5.3)."""

    def __init__(self, cfg: Dict):
        super().__init__(cfg, with_final=False)
        self.n = int(cfg["residual.streams"])
        self.iters = int(cfg["residual.mhc.sinkhorn_iters"])
        self.alpha_init = float(cfg["residual.mhc.alpha_init"])
        self.phi_init = cfg["residual.mhc.phi_init"]
        self.home_weight = float(cfg["residual.mhc.home_weight"])
        self.res_diag = float(cfg["residual.mhc.res_diag"])
        n, nd = self.n, self.n * self.d
        for slot in self.children():
            slot.phi_pre = nn.Parameter(torch.zeros(nd, n))
            slot.phi_post = nn.Parameter(torch.zeros(nd, n))
            slot.phi_res = nn.Parameter(torch.zeros(nd, n * n))
            slot.alpha_pre = nn.Parameter(torch.zeros(1))
            slot.alpha_post = nn.Parameter(torch.zeros(1))
            slot.alpha_res = nn.Parameter(torch.zeros(1))
            slot.b_pre = nn.Parameter(torch.zeros(n))
            slot.b_post = nn.Parameter(torch.zeros(n))
            slot.b_res = nn.Parameter(torch.zeros(n, n))
        self.reset_parameters()

    def reset_parameters(self, generator=None) -> None:
        """§5.3: Φ = 0 (or N(0, 0.02²)), α = alpha_init, bpost = 0, bpre = logit(home_weight) on the
        home stream and logit((1 − home_weight)/(n−1)) elsewhere, bres = ln(res_diag(n−1)/(1−res_diag))·I."""
        n, w, r = self.n, self.home_weight, self.res_diag
        logit = lambda p: math.log(p / (1 - p))  # noqa: E731
        with torch.no_grad():
            for l in range(1, self.L2 + 1):
                s = self.slot(l)
                for phi in (s.phi_pre, s.phi_post, s.phi_res):
                    if self.phi_init == "normal":
                        phi.copy_(torch.randn(phi.shape, generator=generator, dtype=torch.float64) * 0.02)
                    else:
                        phi.zero_()
                for a in (s.alpha_pre, s.alpha_post, s.alpha_res):
                    a.fill_(self.alpha_init)
                s.b_pre.fill_(logit((1 - w) / (n - 1)))
                s.b_pre[(l - 1) % n] = logit(w)
                s.b_post.zero_()
                s.b_res.copy_(torch.eye(n, dtype=s.b_res.dtype) * math.log(r * (n - 1) / (1 - r)))

    def forward(self, e, sublayers):
        n, d = self.n, self.d
        X = e.unsqueeze(-2).expand(*e.shape[:-1], n, d)  # [B, T, n, d]
        for l, f in enumerate(sublayers, start=1):
            p = self.slot(l)
            xh = rms_ng(X.reshape(*X.shape[:-2], n * d))  # over all nd values
            h_pre = torch.sigmoid(p.alpha_pre * (xh @ p.phi_pre) + p.b_pre)
            h_post = 2 * torch.sigmoid(p.alpha_post * (xh @ p.phi_post) + p.b_post)
            logits = p.alpha_res * (xh @ p.phi_res).view(*xh.shape[:-1], n, n) + p.b_res
            h_res = sinkhorn(logits, self.iters)  # [B, T, n(s), n(u)]
            o = f((h_pre.unsqueeze(-1) * X).sum(dim=-2))
            X = torch.einsum("btsu,btud->btsd", h_res, X) + h_post.unsqueeze(-1) * o.unsqueeze(-2)
        return X.sum(dim=-2)


class Dar(_PerSublayer):
    """Dual Attention Residuals (§6, this project's reconstruction): two streams with their own
    histories and partial block states; each target stream j reads with keys from stream ks(j) and
    values from vs(j) (§6.2 routing), the two reads are mixed into the unchanged sublayer's input, and
    its output is written into both partials by the transport ρ_l and the gates β^j_l."""

    # (ks(j), vs(j)) for j = 0, 1 (§6.2 routing table)
    ROUTES = {"reciprocal": ((1, 0), (0, 1)), "self_kv": ((0, 0), (1, 1)),
              "cross_v": ((0, 1), (1, 0)), "fixed_kv": ((0, 1), (0, 1))}

    def __init__(self, cfg: Dict):
        super().__init__(cfg, with_final=True)
        self.K = int(cfg["residual.block_size"])
        self.routes = self.ROUTES[cfg["dar.routing"]]
        self.sep_v = bool(cfg["dar.sep_v"])
        self.include_partial = bool(cfg["dar.include_partial"])
        self.parity = cfg["dar.init"] == "parity"
        self.tau_init = float(cfg["dar.tau_init"])
        self.other_b_init = float(cfg["dar.other_b_init"])
        d = self.d
        for name, slot in self.named_children():
            slot.query0 = nn.Parameter(torch.zeros(d))
            slot.query1 = nn.Parameter(torch.zeros(d))
            slot.mix = nn.Parameter(torch.zeros(d))
            if name != "final":
                slot.transport = nn.Parameter(torch.zeros(1))
                slot.gate0 = nn.Parameter(torch.zeros(d))
                slot.gate1 = nn.Parameter(torch.zeros(d))
        if self.sep_v:  # shared by all sublayers and the read-out
            self.value0 = nn.Parameter(torch.zeros(d, d))
            self.value1 = nn.Parameter(torch.zeros(d, d))
        self.reset_parameters()

    def reset_parameters(self, generator=None) -> None:
        """§6.3: w = g = 0, τ = tau_init, W_V = I; parity: b = 0 on the home stream (0 for attention,
        odd l; 1 for the MLP) and other_b_init on the other; uniform: all b = 0."""
        with torch.no_grad():
            for name, slot in self.named_children():
                for p in (slot.query0, slot.query1, slot.mix):
                    p.zero_()
                if name == "final":
                    continue
                slot.transport.fill_(self.tau_init)
                home = 0 if int(name) % 2 == 1 else 1
                for s, gate in enumerate((slot.gate0, slot.gate1)):
                    gate.fill_(self.other_b_init if (self.parity and s != home) else 0.0)
            if self.sep_v:
                for v in (self.value0, self.value1):
                    v.copy_(torch.eye(self.d, dtype=v.dtype))

    def _mix(self, cand, slot) -> torch.Tensor:
        """x = α∘R⁰ + (1−α)∘R¹ with R^j = DepthAttn(keys cand[ks(j)], values cand[vs(j)]; w^j) [·W^j_V]."""
        reads = []
        for j, (ks, vs) in enumerate(self.routes):
            keys, values = torch.stack(cand[ks], dim=0), torch.stack(cand[vs], dim=0)  # [N, B, T, d]
            w = slot.query0 if j == 0 else slot.query1
            a = torch.softmax((rms_ng(keys) * w).sum(dim=-1), dim=0)  # [N, B, T]
            r = (a.unsqueeze(-1) * values).sum(dim=0)
            if self.sep_v:
                r = r @ (self.value0 if j == 0 else self.value1)
            reads.append(r)
        return torch.sigmoid(slot.mix) * reads[0] + torch.sigmoid(-slot.mix) * reads[1]

    def forward(self, e, sublayers):
        H = [[e], [e]]  # history entries of streams 0 and 1; entry 0 = e
        P = None  # partial block states [P⁰, P¹], None = EMPTY
        for l, f in enumerate(sublayers, start=1):
            p = self.slot(l)
            with_partial = P is not None and self.include_partial
            cand = [H[s] + ([P[s]] if with_partial else []) for s in (0, 1)]
            o = f(self._mix(cand, p))
            t = 0.5 * torch.sigmoid(p.transport)
            beta = (2 * torch.sigmoid(p.gate0), 2 * torch.sigmoid(p.gate1))
            if P is None:
                P = [beta[0] * o, beta[1] * o]
            else:  # ρ = [[1−t, t], [t, 1−t]] on the old P⁰, P¹
                P = [(1 - t) * P[0] + t * P[1] + beta[0] * o, (1 - t) * P[1] + t * P[0] + beta[1] * o]
            if l % self.K == 0 or l == self.L2:
                H[0].append(P[0])
                H[1].append(P[1])
                P = None
        return self._mix(H, self.slot("final"))


def make_residual(cfg: Dict) -> nn.Module:
    kind = cfg["residual.kind"]
    return {"standard": Standard, "attnres": AttnRes, "hyper": Hyper, "mhc": Mhc, "dar": Dar}[kind](cfg)
