"""attnlab.compare on a tiny grid (plain Python objects and a DataFrame) and attnlab.analyze."""
import json
import os

import numpy as np
import pytest

import attnlab

GRID = """
name = "tiny python grid"
preset = "tiny"
set = ["data.dir={data}", "model.vocab_size=300", "train.eval_every=0"]
steps = 4
seeds = [1, 2]

[variants.rope]
set = ["attn.pos=rope"]

[variants.xsa]
set = ["attn.pos=rope", "attn.xsa=on"]
"""


def test_compare_a_tiny_grid(corpus, tmp_path):
    out = tmp_path / "grid"
    r = attnlab.compare(GRID.format(data=corpus), out=out, report=False)
    assert r.complete and os.path.exists(r.results_json)
    assert [v["variant"] for v in r.variants] == ["rope", "xsa"]
    rope, xsa = r.variants
    assert rope["baseline"] and not xsa["baseline"]
    assert rope["n"] == xsa["n"] == 2 and len(xsa["val_loss_values"]) == 2
    assert xsa["diff"] == pytest.approx(xsa["val_loss_mean"] - rope["val_loss_mean"])
    json.dumps(r.variants)  # plain Python objects all the way down
    frame = r.frame
    assert list(frame.index) == ["rope", "xsa"]
    assert frame.loc["xsa", "val_loss_mean"] == pytest.approx(xsa["val_loss_mean"])
    assert r.best() in ("rope", "xsa")
    again = attnlab.read_compare_results(r.results_json)
    assert again.variants == r.variants or again.variants[0]["variant"] == "rope"
    # the grid as a file, resumed: nothing left to train
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(GRID.format(data=corpus))
    resumed = attnlab.compare(grid_file, out=out, resume=True, report=False)
    assert resumed.complete and resumed.variants[1]["val_loss_values"] == xsa["val_loss_values"]


def test_compare_errors_name_the_grid(tmp_path):
    with pytest.raises(attnlab.Error, match="no_such_grid.toml"):
        attnlab.compare(tmp_path / "no_such_grid.toml", out=tmp_path / "o")
    with pytest.raises(attnlab.Error, match="grid text.*bogus"):
        attnlab.compare('name = "x"\nbogus = 1\n', out=tmp_path / "o")


def test_analyze_returns_arrays(corpus, tmp_path):
    cfg = attnlab.Config(preset="tiny", **{"model.vocab_size": 300, "attn.xsa": "on", "attn.xsa.layers": [1],
                                           "train.out_dir": str(tmp_path / "run"), "train.steps": 2,
                                           "train.eval_every": 0})
    ck = attnlab.train(cfg, data=corpus, progress=False).checkpoint
    a = attnlab.analyze(ck, os.path.join(corpus, "val.bin"), tmp_path / "analysis", sequences=4, batch_size=2,
                        cka_tokens=64, bootstrap=10)
    assert os.path.exists(a["path"]) and a["seq_len"] == 32
    layers = a["layers"]
    assert isinstance(layers["cos_yv_mean"], np.ndarray) and layers["cos_yv_mean"].shape == (2,)
    np.testing.assert_array_equal(layers["layer"], [0, 1])
    assert np.isnan(layers["cos_zv_mean"][0]) and np.isfinite(layers["cos_zv_mean"][1])  # XSA on layer 1 only
    with pytest.raises(attnlab.Error, match="missing.bin"):
        attnlab.analyze(ck, tmp_path / "missing.bin", tmp_path / "a2")
