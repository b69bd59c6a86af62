"""attnlab.torch.to_module: the reference nn.Module with an engine model's weights gives the engine's
logits, for every attention option and residual kind of the golden test (tests/python/test_reference.py
CASES: norms, MLPs, positions, sinks, GQA, XSA, GOAT, QK-norm, AttnRes, HC, mHC, DAR).

The weights are perturbed first (the golden test's perturbation) so that zero-initialised pieces (biases,
sinks, XSA gates, GOAT's prior) are exercised, and travel engine -> safetensors -> engine -> module.
Tolerance: the golden test's LOGITS_TOL (2e-5 of max|logit|; its docstring derives it): the engine is
fp32, the module runs in float64.
"""
import importlib.util
import json
import os
import zlib

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save_file

import attnlab
import attnlab.torch
from conftest import SOURCE_DIR

_spec = importlib.util.spec_from_file_location(
    "golden_reference_test", os.path.join(SOURCE_DIR, "tests", "python", "test_reference.py"))
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def test_every_option_of_the_golden_test_is_covered():
    kinds = {o.get("residual.kind", "standard") for _, o, _, _ in golden.CASES}
    positions = {o.get("attn.pos") for _, o, _, _ in golden.CASES}
    assert kinds == {"standard", "attnres", "hyper", "mhc", "dar"}
    assert positions >= {"learned", "rope", "none", "alibi", "goat"}
    assert any(o.get("attn.xsa") == "gated" for _, o, _, _ in golden.CASES)


@pytest.mark.parametrize("name, overrides, T, B", golden.CASES, ids=[c[0] for c in golden.CASES])
def test_module_logits_equal_the_engines(tmp_path, name, overrides, T, B):
    seed = 1234 + zlib.crc32(name.encode()) % 100000
    config = attnlab.Config(**golden.BASE, **overrides)
    init = tmp_path / "init.safetensors"
    attnlab.Model(config, seed=seed).save(init)
    with safe_open(str(init), framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        # The perturbed tensors are not the bytes the checksums were made of: drop them (the file
        # then loads as one without checksums, with a note; docs/checkpoint-format.md).
        metadata = {k: v for k, v in f.metadata().items() if k != "checksums.xxh64"}
    rng = np.random.default_rng(seed)
    perturbed = tmp_path / "perturbed.safetensors"
    save_file(golden.perturb(tensors, rng), str(perturbed), metadata=metadata)
    model = attnlab.Model.load(perturbed)

    module = attnlab.torch.to_module(model, dtype=torch.float64)
    assert isinstance(module, torch.nn.Module)
    assert sum(p.numel() for p in module.parameters()) == model.num_params
    ids = rng.integers(0, golden.BASE["model.vocab_size"], size=(B, T + 1))
    engine = model.forward(ids[:, :-1])
    with torch.no_grad():
        logits, loss = module(torch.from_numpy(ids[:, :-1]).long(), torch.from_numpy(ids[:, 1:]).long())
    ref = logits.numpy()
    rel = np.abs(engine - ref).max() / np.abs(ref).max()
    assert rel <= golden.LOGITS_TOL, f"{name}: max|engine - module| / max|module| = {rel:.2e}"
    assert model.loss(ids) == pytest.approx(loss.item(), rel=golden.LOSS_TOL)


def test_to_module_from_a_path_and_in_float32(tmp_path):
    model = attnlab.Model(attnlab.Config(preset="tiny"), seed=3)
    path = tmp_path / "m.safetensors"
    model.save(path)
    module = attnlab.torch.to_module(path)
    assert next(module.parameters()).dtype == torch.float32
    ids = np.arange(10)[None, :]
    with torch.no_grad():
        logits, _ = module(torch.from_numpy(ids))
    np.testing.assert_allclose(logits.numpy(), model.forward(ids), atol=1e-4)
    assert json.loads(json.dumps(module.config))["model.n_layer"] == 2
