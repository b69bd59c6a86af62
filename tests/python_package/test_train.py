"""attnlab.train: from an in-memory iterable and a prepared directory, callbacks, stopping, Ctrl-C."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import attnlab
from conftest import random_batches, tiny


def test_train_from_an_in_memory_iterable(config):
    steps, evals = [], []
    result = attnlab.train(config, data=random_batches(3), callback=lambda s, l, t: steps.append((s, l)),
                           validation=random_batches(2, seed=9), on_eval=lambda s, v: evals.append((s, v)))
    assert result.steps == 6 and not result.interrupted
    assert [s for s, _ in steps] == [1, 2, 3, 4, 5, 6]
    assert result.losses.shape == (6,) and np.all(np.isfinite(result.losses))
    np.testing.assert_allclose(result.losses, [l for _, l in steps])
    assert result.losses[0] == pytest.approx(np.log(512), rel=0.05)  # GPT-2 init: about uniform
    assert evals and np.isfinite(result.val_loss)
    model = attnlab.Model.load(result.checkpoint)
    assert model.config["train.steps"] == 6


def test_the_same_batches_give_the_same_losses(tmp_path):
    def run(name, data):
        cfg = tiny(**{"train.out_dir": str(tmp_path / name), "train.steps": 4, "train.eval_every": 0})
        return attnlab.train(cfg, data=data, progress=False).losses
    windows = random_batches(4, seed=2)
    pairs = [(w[:, :-1], w[:, 1:]) for w in windows]
    np.testing.assert_array_equal(run("a", windows), run("b", iter(pairs)))
    assert not np.array_equal(run("c", windows), run("d", random_batches(4, seed=3)))


def test_callback_returning_false_stops_with_a_checkpoint(config):
    result = attnlab.train(config, data=random_batches(2), callback=lambda s, l, t: s < 2)
    assert result.interrupted and result.steps == 2
    assert os.path.exists(result.checkpoint)
    resumed = attnlab.train(config, data=random_batches(2), resume=result.checkpoint)
    assert resumed.steps == 6 and resumed.steps_this_run == 4


@pytest.mark.parametrize("batch, message", [
    (np.zeros((4, 32), dtype=np.int64), r"shape \(4, 32\); expected \(4, 33\)"),
    (np.full((4, 33), 512), r"id 512, outside \[0, 512\)"),
    (np.zeros((4, 33), dtype=np.float32), r"integer token ids"),
    ((np.zeros((4, 32), dtype=np.int32), np.zeros((3, 32), dtype=np.int32)), r"targets has shape \(3, 32\)"),
])
def test_bad_batches_name_the_batch(config, batch, message):
    with pytest.raises(attnlab.Error, match=r"data, batch 1: .*" + message):
        attnlab.train(config, data=[batch])


def test_an_exhausted_iterator_is_an_error(config):
    with pytest.raises(attnlab.Error, match="iterator ended after 2 batches"):
        attnlab.train(config, data=iter(random_batches(2)))


def test_a_python_exception_in_the_data_passes_through(config):
    def batches():
        yield random_batches(1)[0]
        raise RuntimeError("my data broke")
    with pytest.raises(RuntimeError, match="my data broke"):
        attnlab.train(config, data=batches())


def test_train_on_a_prepared_directory(corpus, tmp_path):
    cfg = tiny(**{"train.out_dir": str(tmp_path / "run"), "train.steps": 4, "train.eval_every": 2,
                  "model.vocab_size": 300})
    result = attnlab.train(cfg, data=corpus)
    assert result.steps == 4 and np.isfinite(result.val_loss)
    tok = attnlab.Tokenizer(corpus)
    ids = tok.encode("Kalo mine rusa.")
    assert ids.dtype == np.int32 and len(ids) > 0 and tok.decode(ids) == "Kalo mine rusa."
    assert tok.decode([]) == ""
    with pytest.raises(attnlab.Error, match="not a directory"):
        attnlab.train(cfg, data=str(tmp_path / "nowhere"))
    with pytest.raises(attnlab.Error, match="tokenizer.model"):
        attnlab.Tokenizer(tmp_path)


CTRL_C_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading
    import numpy as np
    import attnlab
    deliver = sys.argv[2]
    other = threading.Thread(target=threading.Event().wait, daemon=True)  # a notebook kernel's other threads
    other.start()
    def on_step(step, loss, tps):
        if step == 3:
            if deliver == "process":
                os.kill(os.getpid(), signal.SIGINT)
            else:  # the signal lands in another Python thread, as it may in Jupyter
                signal.pthread_kill(other.ident, signal.SIGINT)
    cfg = attnlab.Config(preset="tiny", **{"train.out_dir": sys.argv[1], "train.steps": 400, "train.eval_every": 0})
    rng = np.random.default_rng(0)
    r = attnlab.train(cfg, data=[rng.integers(0, 512, size=(4, 33)) for _ in range(4)], callback=on_step, progress=False)
    print("RESULT", r.steps, r.interrupted, os.path.exists(r.checkpoint))
""")


@pytest.mark.parametrize("deliver", ["process", "other-thread"])
def test_ctrl_c_stops_cleanly_with_a_checkpoint(tmp_path, deliver):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run"), deliver], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][0].split()
    steps, interrupted, exists = int(line[1]), line[2] == "True", line[3] == "True"
    assert interrupted and exists and 3 <= steps < 10, proc.stdout
    assert "KeyboardInterrupt" not in proc.stderr
