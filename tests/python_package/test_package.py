"""The package itself: the generated type stubs, docstrings, the version, the kernel set."""
import os

import attnlab
import attnlab._core


def test_type_stubs_are_installed_and_describe_the_api():
    here = os.path.dirname(attnlab.__file__)
    stub = os.path.join(here, "_core.pyi")
    assert os.path.exists(stub) and os.path.exists(os.path.join(here, "py.typed"))
    text = open(stub).read()
    for name in ("class Config", "class Model", "def forward", "def generate", "def prepare", "def analyze",
                 "def request_train_stop", "class Tokenizer"):
        assert name in text, name


def test_docstrings_explain():
    assert "no copy" in attnlab.Model.forward.__doc__
    assert "preset" in attnlab.Config.__doc__
    assert "Ctrl-C" in attnlab.train.__doc__
    assert "DataFrame" in attnlab.CompareResult.frame.__doc__


def test_version_and_machine():
    assert attnlab.__version__ == attnlab.library_version()
    k = attnlab.kernel_info()
    assert k["attention_kernels"] in k["available"]
    assert attnlab.threads() >= 1
