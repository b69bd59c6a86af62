"""PyTorch interop: attnlab's model as a torch.nn.Module (the reference implementation,
attnlab.torch.reference, written op by op from docs/mechanisms.md) loaded with an engine model's
weights. Needs torch and the safetensors package (`pip install attnlab[torch]`).

    module = attnlab.torch.to_module(model)            # model: an attnlab.Model
    logits, loss = module(ids[:, :-1], ids[:, 1:])      # torch tensors; logits equal the engine's
"""
from __future__ import annotations

import os
import tempfile
from typing import Union

import torch

from .. import _core
from .reference import AttnlabGPT, ReferenceError, export_torch_state_dict, load_attnlab  # noqa: F401

__all__ = ["to_module", "AttnlabGPT", "ReferenceError", "export_torch_state_dict", "load_attnlab"]


def to_module(model: Union[_core.Model, str, os.PathLike], dtype: torch.dtype = torch.float32) -> AttnlabGPT:
    """The reference nn.Module (AttnlabGPT) with the weights of `model` (an attnlab.Model, or the path
    of a checkpoint). Its state_dict has the checkpoint's names and attnlab's [in, out] layout
    (export_torch_state_dict gives nn.Linear's); dtype=torch.float64 for golden comparisons. The
    weights travel through a safetensors file, read by the official reader."""
    if isinstance(model, (str, os.PathLike)):
        return load_attnlab(os.fspath(model), dtype=dtype)[0]
    with tempfile.TemporaryDirectory(prefix="attnlab_torch_") as tmp:
        path = os.path.join(tmp, "model.safetensors")
        model.save(path)
        return load_attnlab(path, dtype=dtype)[0]
