"""attnlab.train: the engine's training loop (include/attnlab/trainer.h) fed from Python."""
from __future__ import annotations

import copy
import os
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from . import _core
from .interrupt import stop_on_interrupt

StepCallback = Callable[[int, float, float], Optional[bool]]


class _Batches:
    """The user's iterable of token batches as the (inputs, targets) function the engine calls once
    per micro-batch. A batch is an integer array (B, T + 1) of windows (inputs its first T ids,
    targets its last T) or a pair (inputs, targets) of (B, T) arrays; B = train.batch_size and
    T = model.seq_len. An iterable that can be iterated again (a list, a dataset) starts over when it
    runs out; an iterator that runs out is an error naming the batch."""

    def __init__(self, data: Iterable, B: int, T: int, V: int, what: str):
        self.data, self.B, self.T, self.V, self.what = data, B, T, V, what
        self.iterator = iter(data)
        self.restartable = self.iterator is not data
        self.count = 0

    def _ids(self, array: Any, shape: tuple, name: str, allow_negative: bool) -> np.ndarray:
        a = np.asarray(array)
        if a.dtype.kind not in "iu":
            raise _core.Error(f"{self.what}, batch {self.count}: {name} must hold integer token ids, "
                              f"got dtype {a.dtype}")
        if a.shape != shape:
            raise _core.Error(f"{self.what}, batch {self.count}: {name} has shape {a.shape}; expected {shape} "
                              f"(train.batch_size = {self.B}, model.seq_len = {self.T})")
        lo = a.min() if a.size else 0
        hi = a.max() if a.size else 0
        if hi >= self.V or (lo < 0 and not allow_negative):
            bad = hi if hi >= self.V else lo
            raise _core.Error(f"{self.what}, batch {self.count}: {name} holds id {bad}, outside "
                              f"[0, {self.V}) (model.vocab_size = {self.V})")
        return np.ascontiguousarray(a, dtype=np.int32)

    def __call__(self):
        try:
            batch = next(self.iterator)
        except StopIteration:
            if not self.restartable or self.count == 0:
                raise _core.Error(f"{self.what}: the iterator ended after {self.count} batches; training needs "
                                  "train.steps × train.grad_accum of them (pass a list or another iterable "
                                  "that can be iterated again, or a longer iterator)") from None
            self.iterator = iter(self.data)
            return self()
        self.count += 1
        if isinstance(batch, (tuple, list)) and len(batch) == 2:
            return (self._ids(batch[0], (self.B, self.T), "inputs", False),
                    self._ids(batch[1], (self.B, self.T), "targets", True))
        windows = self._ids(batch, (self.B, self.T + 1), "the batch (windows of T + 1 ids)", False)
        return np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="step", desc="train")


def train(config: _core.Config,
          data: Union[None, str, os.PathLike, Iterable] = None,
          callback: Optional[StepCallback] = None,
          on_eval: Optional[Callable[[int, float], Any]] = None,
          validation: Optional[Iterable] = None,
          progress: bool = True,
          resume: Optional[Union[str, os.PathLike]] = None,
          stop_after: Optional[int] = None,
          force: bool = False) -> _core.TrainResult:
    """Trains a model of `config` and returns a TrainResult (its `checkpoint` loads with Model.load).

    data: None trains on the config's data.dir; a directory prepared with attnlab.prepare (or
      `attnlab prepare`) sets data.dir (validation on its val.bin, exact resume); any iterable of
      NumPy token batches — arrays (B, T + 1) of windows or pairs (inputs, targets) of (B, T) with
      B = train.batch_size and T = model.seq_len — feeds the loop directly (a list is cycled).
    callback(step, loss, tokens_per_s): after every optimizer step; returning False stops the run
      after this step, with a checkpoint. on_eval(step, val_loss): after every validation.
    validation: an iterable of batches for validation when data is an iterable (none: no validation).
    progress: a tqdm progress bar when tqdm is installed.
    resume: a checkpoint of this run to continue exactly from; stop_after: stop, with a checkpoint,
      after this many steps of this call; force: a fresh run may delete an earlier run's
      checkpoints in train.out_dir.

    The engine computes with the GIL released. Ctrl-C (or the notebook's interrupt) stops the run
    after the current step with a checkpoint, and the result has interrupted = True
    (attnlab.interrupt explains how; a second Ctrl-C stops at once, without one).
    """
    batches = val_batches = None
    describe = "Python batches"
    if data is not None and (isinstance(data, (str, os.PathLike))):
        if not os.path.isdir(data):
            raise _core.Error(f"data: {os.fspath(data)} is not a directory; give a directory prepared with "
                              "attnlab.prepare, or an iterable of token batches")
        config = copy.copy(config).set("data.dir", os.fspath(data))  # the caller's Config stays as it was
    elif data is not None:
        B, T, V = config["train.batch_size"], config["model.seq_len"], config["model.vocab_size"]
        batches = _Batches(data, B, T, V, "data")
        describe = f"Python batches ({type(data).__name__})"
        if validation is not None:
            val_batches = _Batches(validation, B, T, V, "validation")
    elif validation is not None:
        raise _core.Error("validation: only with data given as an iterable of batches "
                          "(a prepared data.dir validates on its val.bin)")
    total = int(config["train.steps"])
    bar = _progress_bar(total, progress)

    def on_step(step: int, loss: float, tokens_per_s: float) -> None:
        if bar is not None:
            bar.n = step
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            bar.refresh()
        if callback is not None and callback(step, loss, tokens_per_s) is False:
            _core.request_train_stop()

    try:
        with stop_on_interrupt():
            result = _core._train(config, batches, val_batches, describe,
                                  os.fspath(resume) if resume is not None else "",
                                  -1 if stop_after is None else int(stop_after), force, on_step, on_eval)
    finally:
        if bar is not None:
            bar.close()
    return result
