"""The PyTorch reference of attnlab's residual kinds now lives in the Python package as
python/attnlab/torch/residual.py (`attnlab.torch.residual`). This file runs that same code for
reference/attnlab_ref.py and the tests that add reference/ to sys.path."""
import os as _os

_SOURCE = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), _os.pardir, "python", "attnlab", "torch",
                        "residual.py")
with open(_SOURCE) as _f:
    exec(compile(_f.read(), _os.path.normpath(_SOURCE), "exec"))  # noqa: S102 (the moved module, verbatim)
