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
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "attnlab: installing missing Debian packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
