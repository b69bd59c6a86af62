#!/usr/bin/env bash
# Fetches oneDNN 3.2.0, CPU only, GNU OpenMP threading (the runtime the rest of attnlab uses), as
# Intel publishes it on PyPI (onednn-cpu-gomp / onednn-devel-cpu-gomp 2023.2.0: the library, and its
# headers and CMake package). The wheels are only downloaded, checked against the hashes below, and
# unpacked into third_party/onednn (git-ignored); nothing is installed into any Python. The default
# build uses Debian's libdnnl-dev (2.6) instead; this one is opt-in, for measuring it:
#
#   scripts/fetch_onednn.sh [DEST]     (default third_party/onednn; a no-op once DEST is complete)
#   cmake --preset release -DATTNLAB_ONEDNN_DIR=third_party/onednn
#
# (docs/performance.md, "The GEMM library": the same speed as 2.6 on an AVX512-BF16 CPU.)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-third_party/onednn}
version=2023.2.0
stamp="$dest/.attnlab-onednn-$version"
[ -f "$stamp" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/requirements.txt" <<REQ
onednn-cpu-gomp==$version --hash=sha256:2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb
onednn-devel-cpu-gomp==$version --hash=sha256:9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284
REQ
echo "attnlab: fetching oneDNN 3.2.0 (PyPI onednn-cpu-gomp $version, 39 MB) into $dest"
python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$tmp/requirements.txt" -d "$tmp/wheels"
rm -rf "$dest"
mkdir -p "$dest"
# A wheel is a zip; each keeps its files under <name>-<version>.data/data/{lib,include}: one prefix.
python3 - "$tmp/wheels" "$dest" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            parts = pathlib.PurePosixPath(info.filename).parts
            if len(parts) < 4 or not parts[0].endswith(".data") or parts[1] != "data" or info.is_dir():
                continue
            out = dest.joinpath(*parts[2:])
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            if (info.external_attr >> 16) & 0o111:
                out.chmod(0o755)
PY
# The wheel holds libdnnl.so, .so.3 and .so.3.2 as three copies (zip has no links): keep one.
ln -sf libdnnl.so.3.2 "$dest/lib/libdnnl.so.3"
ln -sf libdnnl.so.3 "$dest/lib/libdnnl.so"
test -f "$dest/lib/cmake/dnnl/dnnl-config.cmake" && test -f "$dest/include/oneapi/dnnl/dnnl.hpp"
touch "$stamp"
