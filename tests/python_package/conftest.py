"""Shared fixtures of the Python package's tests (tests/python_package/run.sh runs them against the
package installed with `pip install .`)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import attnlab

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def tiny(**overrides) -> attnlab.Config:
    """The tiny preset (configs/tiny.toml: 2 layers, d 64, T 32, V 512, B 4) with overrides."""
    return attnlab.Config(preset="tiny", **overrides)


@pytest.fixture
def config(tmp_path) -> attnlab.Config:
    return tiny(**{"train.out_dir": str(tmp_path / "run"), "train.steps": 6, "train.eval_every": 0})


@pytest.fixture
def model() -> attnlab.Model:
    return attnlab.Model(tiny(), seed=7)


def random_batches(n: int, B: int = 4, T: int = 32, V: int = 512, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, V, size=(B, T + 1)) for _ in range(n)]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> str:
    """A small prepared corpus (attnlab.prepare on generated text: words from a made-up lexicon,
    documents separated by blank lines), for the tests that need data.dir."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(3)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pu", "ar", "en"]
    words = ["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(300)]
    text = []
    for _ in range(400):  # documents
        sentences = [" ".join(rng.choice(words, size=rng.integers(5, 14))).capitalize() + "."
                     for _ in range(rng.integers(2, 6))]
        text.append(" ".join(sentences))
    src = root / "text.txt"
    src.write_text("\n\n".join(text) + "\n")
    out = attnlab.prepare([src], root / "data", vocab_size=300, val_fraction=0.1)
    return out
