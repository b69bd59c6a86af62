"""attnlab: train, evaluate and compare transformer language models with new attention mechanisms
(XSA, GOAT, DAR, ...) from Python, on the C++ engine (docs/python.md).

    import attnlab
    cfg = attnlab.Config(preset="tiny", **{"attn.xsa": "on"})
    result = attnlab.train(cfg, data=batches)          # an iterable of NumPy token batches, or a prepared dir
    model = attnlab.Model.load(result.checkpoint)
    logits = model.forward(tokens)                      # np.ndarray (B, T, V), no copy

Errors of the engine raise attnlab.Error with a message naming the option or file.
"""
from ._core import (  # noqa: F401  (the bound C++ API)
    Config,
    Error,
    Model,
    Tokenizer,
    TrainResult,
    __version__,
    kernel_info,
    library_version,
    prepare,
    read_token_file,
    request_train_stop,
    threads,
    write_compare_report,
)
from ._core import analyze  # noqa: F401
from .comparing import CompareResult, compare, read_compare_results  # noqa: F401
from .training import train  # noqa: F401

__all__ = [
    "Config", "Model", "Tokenizer", "Error", "TrainResult", "CompareResult",
    "train", "compare", "read_compare_results", "write_compare_report", "analyze", "prepare",
    "read_token_file", "request_train_stop", "kernel_info", "library_version", "threads", "__version__",
]
