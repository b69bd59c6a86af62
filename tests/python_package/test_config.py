"""attnlab.Config: presets, TOML files and text, keyword overrides, resolved values, errors."""
import copy

import pytest

import attnlab


def test_preset_and_overrides_resolve():
    cfg = attnlab.Config(preset="tiny", **{"model.n_layer": 3, "attn.xsa": "on"})
    assert cfg["model.n_layer"] == 3
    assert cfg.get("attn.xsa") == "on"
    assert cfg["model.d_model"] == 64  # from the preset
    assert cfg["train.lr"] == pytest.approx(1e-3)


def test_tables_and_value_types():
    cfg = attnlab.Config(preset="tiny", model={"n_layer": 1, "bias": False}, attn={"pos": "rope"},
                         train={"lr": 3e-3, "out_dir": "runs/x"})
    assert cfg["model.n_layer"] == 1 and cfg["model.bias"] is False
    assert cfg["attn.pos"] == "rope" and cfg["train.out_dir"] == "runs/x"
    assert cfg["train.lr"] == pytest.approx(3e-3)
    cfg.set("attn.xsa", "on").set("attn.xsa.layers", [0])
    assert cfg["attn.xsa.layers"] == [0]


def test_file_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nn_layer = 5\nd_model = 32\nn_head = 2\n")
    cfg = attnlab.Config(preset="tiny", file=path, **{"model.n_layer": 4})
    assert (cfg["model.n_layer"], cfg["model.d_model"]) == (4, 32)
    assert attnlab.Config(text="model.n_layer = 7")["model.n_layer"] == 7


def test_repr_shows_resolved_values():
    text = repr(attnlab.Config(preset="tiny", **{"model.n_layer": 3}))
    assert text.startswith("attnlab.Config(")
    assert "model.n_layer = 3" in text
    assert "model.vocab_size = 512" in text  # a value from the preset
    assert "does not resolve" in repr(attnlab.Config(**{"model.n_layer": -1}))


def test_equality_copy_and_dict():
    a = attnlab.Config(preset="tiny")
    b = attnlab.Config(text="model.n_layer = 2").set("model.d_model", 64)
    assert a == copy.copy(a)
    assert (a == attnlab.Config(preset="small")) is False
    d = a.to_dict()
    assert d["model.n_layer"] == 2 and "train.steps" in d
    assert a != 3  # not a Config: not equal, no error


@pytest.mark.parametrize("overrides, named", [
    ({"model.n_layer": -1}, "model.n_layer"),
    ({"model.no_such_key": 1}, "model.no_such_key"),
    ({"attn.pos": "sideways"}, "attn.pos"),
    ({"model.n_layer": object()}, "model.n_layer"),
])
def test_errors_name_the_option(overrides, named):
    with pytest.raises(attnlab.Error, match=named.replace(".", r"\.")):
        attnlab.Config(preset="tiny", **overrides).resolve()


def test_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(attnlab.Error, match="missing.toml"):
        attnlab.Config(file=missing)
    bad = tmp_path / "bad.toml"
    bad.write_text("model.n_layer = 2\nmodel.n_head = [\n")
    with pytest.raises(attnlab.Error, match=r"bad\.toml"):
        attnlab.Config(file=bad).resolve()
    with pytest.raises(attnlab.Error, match="preset"):
        attnlab.Config(preset="huge")


def test_error_is_an_exception_class():
    assert issubclass(attnlab.Error, Exception)
