#!/usr/bin/env bash
# The Python package end to end (CTest: python-package.pytest, label python-package):
#   1. a fresh virtual environment (--system-site-packages: Debian's NumPy, PyTorch, pandas, tqdm,
#      pytest and the safetensors reader stay visible),
#   2. `pip install` of the source tree into it (scikit-build-core builds attnlab._core with CMake;
#      the build directory build/python/ is kept and ccache is used where installed, so a rebuild
#      compiles only what changed),
#   3. pytest on tests/python_package/, from a directory outside the tree (the installed package is
#      what gets imported),
#   4. the example notebook's code (examples/notebook.ipynb): `jupyter nbconvert --execute` where
#      Jupyter is installed, else its code cells run in order as one Python script.
# Usage: tests/python_package/run.sh [SOURCE_DIR]     (ATTNLAB_PY_VENV overrides the venv path)
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
VENV=${ATTNLAB_PY_VENV:-$SRC/build/python/venv}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
seconds() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f s", b - a }'; }

start=$(seconds)
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV"
# The build backend and nanobind at the versions pyproject.toml pins, installed into the venv and
# used without build isolation: an isolated build would put them under a new temporary path each
# time, and the kept CMake build directory would then be configured (and nanobind compiled) afresh.
requires=$("$VENV/bin/python" -c 'import tomllib; print(" ".join(tomllib.load(open("'"$SRC"'/pyproject.toml", "rb"))["build-system"]["requires"]))')
"$VENV/bin/python" -m pip install -q --disable-pip-version-check $requires
echo "python-package: venv with $requires ($(took "$start"))"

start=$(seconds)
if command -v ccache >/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$SRC}
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation "$SRC"
echo "python-package: pip install of $SRC ($(took "$start"))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
start=$(seconds)
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$SRC/tests/python_package"
echo "python-package: pytest ($(took "$start"))"

start=$(seconds)
notebook="$SRC/examples/notebook.ipynb"
export ATTNLAB_SOURCE_DIR="$SRC"
if "$VENV/bin/python" -m jupyter nbconvert --version >/dev/null 2>&1; then
  "$VENV/bin/python" -m jupyter nbconvert --to notebook --execute --output-dir "$work" "$notebook"
else
  "$VENV/bin/python" - "$notebook" > "$work/notebook.py" <<'PYEOF'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
for cell in cells:
    if cell["cell_type"] == "code":
        source = "".join(cell["source"])
        # IPython-only lines (magics, shell escapes) have no meaning in a plain script
        print("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
        print()
PYEOF
  "$VENV/bin/python" "$work/notebook.py"
fi
echo "python-package: examples/notebook.ipynb ($(took "$start"))"
