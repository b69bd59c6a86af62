"""attnlab.Model: create, save/load, forward (NumPy logits without a copy), loss, generate, errors."""
import threading
import time

import numpy as np
import pytest

import attnlab
from conftest import tiny


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def test_forward_shapes_and_dtype(model):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 512, size=(3, 20))
    logits = model.forward(ids)
    assert logits.shape == (3, 20, 512) and logits.dtype == np.float32
    assert np.all(np.isfinite(logits))
    one = model.forward(ids[1])  # (T,) -> (T, V), the same numbers as row 1 of the batch
    assert one.shape == (20, 512)
    np.testing.assert_allclose(one, logits[1], rtol=0, atol=1e-5)
    assert model.forward(ids[1].tolist()).shape == (20, 512)  # a plain list works too


def test_forward_returns_the_engines_buffer_without_a_copy(model):
    logits = model.forward(np.arange(16).reshape(2, 8))
    # A NumPy array that made its own copy owns its data and has no base; this one views memory it
    # does not own, kept alive by the owner nanobind attached (the capsule holding the vector).
    assert not logits.flags.owndata
    assert logits.base is not None and not isinstance(logits.base, np.ndarray)
    assert logits.flags.c_contiguous and logits.flags.writeable
    # The base chain ends in the capsule: every view shares the one buffer.
    address = logits.__array_interface__["data"][0]
    assert np.shares_memory(logits, logits.reshape(-1))
    view = logits[0]
    assert view.__array_interface__["data"][0] == address
    # Two calls return two buffers (nothing is cached and overwritten behind the caller's back).
    again = model.forward(np.arange(16).reshape(2, 8))
    assert again.__array_interface__["data"][0] != address
    np.testing.assert_array_equal(again, logits)
    del model  # the array keeps its buffer alive without the model
    assert np.isfinite(logits.sum())


def test_loss_matches_the_logits(model):
    rng = np.random.default_rng(1)
    windows = rng.integers(0, 512, size=(2, 17))
    logits = model.forward(windows[:, :-1]).astype(np.float64)
    expected = -np.take_along_axis(log_softmax(logits), windows[:, 1:, None], axis=-1).mean()
    assert model.loss(windows) == pytest.approx(expected, rel=1e-5)
    assert model.loss(windows[:, :-1], windows[:, 1:]) == pytest.approx(expected, rel=1e-5)
    targets = windows[:, 1:].copy()
    targets[:, ::2] = -1  # ignored
    kept = targets >= 0
    expected_kept = -np.take_along_axis(log_softmax(logits), np.maximum(targets, 0)[..., None], axis=-1)[..., 0][kept].mean()
    assert model.loss(windows[:, :-1], targets) == pytest.approx(expected_kept, rel=1e-5)


def test_generate_is_seeded_and_greedy_is_the_argmax(model):
    prompt = np.array([1, 2, 3, 4])
    a = model.generate(prompt, 10, temperature=0.8, top_k=20, seed=5)
    b = model.generate(prompt, 10, temperature=0.8, top_k=20, seed=5)
    assert a.dtype == np.int32 and a.shape == (14,)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:4], prompt)
    greedy = model.generate(prompt, 3, temperature=0)
    expected = list(prompt)
    for _ in range(3):
        expected.append(int(model.forward(np.array(expected))[-1].argmax()))
    assert greedy.tolist() == expected
    seen = []
    streamed = model.generate(prompt, 10, temperature=0, callback=lambda i: seen.append(i) or len(seen) < 4)
    assert streamed.tolist()[4:] == seen and len(seen) == 4


def test_save_load_round_trip(model, tmp_path):
    path = tmp_path / "m.safetensors"
    model.save(path)
    again = attnlab.Model.load(path)
    assert again.num_params == model.num_params and again.vocab_size == 512
    assert again.config == model.config
    ids = np.arange(12).reshape(1, 12)
    np.testing.assert_array_equal(again.forward(ids), model.forward(ids))
    bf16 = attnlab.Model.load(str(path), weights="bf16")
    np.testing.assert_allclose(bf16.forward(ids), model.forward(ids), atol=0.05)
    assert "parameters" in repr(again)


@pytest.mark.parametrize("tokens, message", [
    (np.array([[1, 2, 512]]), r"id 512 .*outside \[0, 512\)"),
    (np.array([[-1, 2]]), r"id -1"),
    (np.array([[0.5, 1.0]]), r"integers"),
    (np.zeros((1, 2, 3), dtype=np.int64), r"shape \(T,\) or \(B, T\)"),
])
def test_bad_tokens_name_the_argument(model, tokens, message):
    with pytest.raises(attnlab.Error, match="Model.forward: tokens.*" + message):
        model.forward(tokens)


def test_errors_name_the_file_and_option(tmp_path):
    with pytest.raises(attnlab.Error, match="nothing.safetensors"):
        attnlab.Model.load(tmp_path / "nothing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(attnlab.Error, match="junk.safetensors"):
        attnlab.Model.load(junk)
    with pytest.raises(attnlab.Error, match="weights"):
        attnlab.Model.load(junk, weights="fp8")
    with pytest.raises(attnlab.Error, match="model.n_head"):
        attnlab.Model(tiny(**{"model.n_head": 5}))
    with pytest.raises(attnlab.Error, match="learned"):
        attnlab.Model(tiny(**{"attn.pos": "learned"})).forward(np.zeros((1, 40), dtype=np.int32))


def test_forward_releases_the_gil():
    """A forward long enough to measure; a Python thread must keep running meanwhile (it could not
    if the engine held the GIL)."""
    model = attnlab.Model(tiny(**{"model.n_layer": 4, "model.d_model": 128, "model.seq_len": 256}))
    ids = np.zeros((4, 256), dtype=np.int32)
    one = 0.0
    while one < 0.2:  # a forward of at least 0.2 s, whatever the machine
        ids = np.concatenate([ids, ids])
        model.forward(ids)  # the first call of a shape also plans the model's workspace for it
        start = time.perf_counter()
        model.forward(ids)
        one = time.perf_counter() - start
    ticks = []
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks.append(time.perf_counter())

    runner = threading.Thread(target=count)
    runner.start()
    time.sleep(0.01)
    start = time.perf_counter()
    for _ in range(3):
        model.forward(ids)
    end = time.perf_counter()
    done.set()
    runner.join()
    during = [t for t in ticks if start <= t <= end]
    # With the GIL held the counter would stall for whole forwards (it gets the GIL only between
    # calls); released, it ticks throughout: count the gaps longer than half a forward.
    gaps = np.diff([start] + during + [end])
    assert len(during) > 100, f"{len(during)} ticks during {end - start:.3f} s"
    assert gaps.max() < 0.5 * one, f"longest gap {gaps.max():.3f} s, one forward {one:.3f} s"
