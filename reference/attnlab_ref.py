"""The PyTorch reference of attnlab's GPT now lives in the Python package as
python/attnlab/torch/reference.py (`attnlab.torch.reference` once `pip install .` has run). This
file runs that same code, without needing the package built, for the golden test
(tests/python/test_reference.py) and the scripts that add reference/ to sys.path:

    python3 reference/attnlab_ref.py info|export|loss ...    # as before (reference/README.md)
"""
import os as _os

_SOURCE = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), _os.pardir, "python", "attnlab", "torch",
                        "reference.py")
with open(_SOURCE) as _f:
    exec(compile(_f.read(), _os.path.normpath(_SOURCE), "exec"))  # noqa: S102 (the moved module, verbatim)
