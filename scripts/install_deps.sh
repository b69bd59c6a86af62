#!/usr/bin/env bash
# Installs the Debian (and one PyPI) packages attnlab needs, only those missing. Runs as root
# (apt-get) or via sudo.
#
#   scripts/install_deps.sh demo   what `make demo` runs: the compiler, CMake, the libraries the
#                                  engine links, the SWORD texts of the default corpus,
#                                  matplotlib for `attnlab analyze`'s plots, and OpenMPI (the
#                                  library and mpirun: `mpirun -np N attnlab compare`,
#                                  docs/distributed.md)
#   scripts/install_deps.sh test   the above, plus what `make test` alone needs: GoogleTest, and
#                                  Python with NumPy, PyTorch (the float64 reference) and the
#                                  official safetensors reader (the interop tests), and Debian's
#                                  chromium (loads `attnlab compare`'s report.html headless), and for
#                                  the Python package's test (tests/python_package/run.sh) venv,
#                                  Python's headers, pytest, pandas, tqdm and ccache, and SciPy
#                                  (scripts/claims_table.py and its test, tests/python/test_claims_table.py)
#   scripts/install_deps.sh fuzz   what scripts/fuzz_smoke.sh needs: the `demo` packages, clang with
#                                  libFuzzer and the sanitizer runtimes (libclang-rt-14-dev, only a
#                                  Recommends of clang) and LLVM's OpenMP (clang's -fopenmp)
#
# Every package is named here: a machine that has only git and make gets all of them (checked on a
# fresh Debian bookworm root). Debian's oneDNN CMake package needs OpenCL's (a Recommends of
# libdnnl-dev, not a Depends), so ocl-icd-opencl-dev is named explicitly: --no-install-recommends
# would otherwise leave `find_package(dnnl)` failing.
set -euo pipefail
what=${1:-demo}
demo=(build-essential cmake ninja-build pkg-config libdnnl-dev ocl-icd-opencl-dev libsentencepiece-dev zlib1g-dev libxxhash-dev
      nlohmann-json3-dev libcli11-dev diatheke sword-comm-tdavid sword-text-web sword-text-kjv
      python3-matplotlib libopenmpi-dev openmpi-bin)
tests=(libgtest-dev libgmock-dev python3 python3-numpy python3-torch python3-pip chromium
       python3-venv python3-dev python3-pytest python3-pandas python3-tqdm ccache python3-scipy)
fuzz=(clang libclang-rt-14-dev libomp-dev)
case "$what" in
  demo) pkgs=("${demo[@]}") ;;
  test) pkgs=("${demo[@]}" "${tests[@]}") ;;
  fuzz) pkgs=("${demo[@]}" "${fuzz[@]}") ;;
  *) echo "usage: $0 demo|test|fuzz" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "attnlab: installing missing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The official safetensors reader (PyPI) for Debian's python3, used by the interop tests: the proof
# that our checkpoints load in the reference implementation of the format.
if [ "$what" = test ] && ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  echo "attnlab: installing the official safetensors package for /usr/bin/python3"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages safetensors
fi
