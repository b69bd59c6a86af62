#!/usr/bin/env bash
# The installed library, checked the way a user meets it: install the build of a preset into a
# temporary prefix, build examples/ against that prefix alone (find_package(attnlab)), and run the
# example (train from memory, save and reload, generate, prepare the committed test corpus, a
# two-variant compare on it). Exits non-zero on any failure.
#   scripts/example_check.sh [BUILD_DIR]   (default build/ci; it must be configured and built)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$SRC/build/ci}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
JOBS=${JOBS:-2}

echo "== install $BUILD into $WORK/prefix"
cmake --build "$BUILD" -j "$JOBS" --target attnlab_lib attnlab >/dev/null
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
# The installed headers must stand alone: none of them may reach into src/.
if grep -rnE '#include "(core|kernels|model|data|train|eval|cli|api)/' "$WORK/prefix/include/attnlab"; then
  echo "example_check: an installed header includes an internal one" >&2
  exit 1
fi

echo "== build examples/ against the prefix"
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
cmake -S "$SRC/examples" -B "$WORK/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/prefix" >/dev/null
cmake --build "$WORK/build" -j "$JOBS" >/dev/null

echo "== the installed tool runs"
"$WORK/prefix/bin/attnlab" --version

echo "== run the example"
"$WORK/build/train_and_compare" "$WORK/runs" "$SRC"/tests/data/*.txt
