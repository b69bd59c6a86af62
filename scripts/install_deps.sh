#!/usr/bin/env bash
# Installs the Debian packages attnlab needs, only those missing. Runs as root (apt-get) or via sudo.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libdnnl-dev libsentencepiece-dev nlohmann-json3-dev
      libcli11-dev libgtest-dev libgmock-dev python3-numpy python3-torch python3-pip
      diatheke sword-comm-tdavid sword-text-web sword-text-kjv)
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
if ! /usr/bin/python3 -c "import safetensors" 2>/dev/null; then
  echo "attnlab: installing the official safetensors package for /usr/bin/python3"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages safetensors
fi
