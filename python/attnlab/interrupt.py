"""Ctrl-C during a training: stop cleanly after the current step, with a checkpoint (the CLI's rule).

The engine blocks SIGINT in the thread that trains and in its workers and takes it in a thread of
its own (include/attnlab/trainer.h). In a plain `python` process that is enough. In a notebook the
kernel has other Python threads, and the signal can land in one of them: Python's C-level handler
then only marks it for the main thread, which is busy inside the engine. So for the duration of the
call this module also (1) points Python's signal wakeup fd at a pipe read by a relay thread, which
calls request_train_stop() as soon as the byte arrives, and (2) installs a SIGINT handler that does
the same when Python code next runs on the main thread; a second Ctrl-C seen there raises
KeyboardInterrupt (from the next callback), to stop at once without a checkpoint.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

from . import _core

_WAKE = 0  # the byte that ends the relay thread (no signal has number 0)


def _relay(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
            continue
        if not data or _WAKE in data:
            return
        if signal.SIGINT in data or signal.SIGTERM in data:
            _core.request_train_stop()


@contextlib.contextmanager
def stop_on_interrupt():
    """Within the block, Ctrl-C stops the running training cleanly (see the module's docstring).
    Outside the main thread signals are not Python's to take: the block changes nothing there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = [0]

    def on_sigint(signum, frame):
        seen[0] += 1
        if seen[0] > 1:
            raise KeyboardInterrupt
        _core.request_train_stop()

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    old_handler = signal.signal(signal.SIGINT, on_sigint)
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    relay = threading.Thread(target=_relay, args=(read_fd,), name="attnlab-interrupt", daemon=True)
    relay.start()
    try:
        yield
        # A signal that arrived while the engine ran has its Python handler pending: run it while
        # ours is installed, so that a clean stop is not followed by a KeyboardInterrupt.
        _core._check_signals()
    finally:
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGINT, old_handler)
        os.write(write_fd, bytes([_WAKE]))
        relay.join()
        os.close(read_fd)
        os.close(write_fd)
