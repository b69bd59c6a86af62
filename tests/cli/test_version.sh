#!/usr/bin/env bash
# One version number: project(VERSION) in CMakeLists.txt reaches `attnlab --version`, the metadata of
# every checkpoint (attnlab_version) and the README's status line.
# Usage: test_version.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"
check() { if [ "$2" = "$3" ]; then echo "PASS: $1"; pass=$((pass + 1)); else echo "FAIL: $1: '$2' != '$3'"; fail=$((fail + 1)); fi; }

cmake_version=$(sed -n 's/^project(attnlab VERSION \([0-9.]*\) .*/\1/p' "$SRC/CMakeLists.txt")
check "CMakeLists.txt has a version" "$([ -n "$cmake_version" ] && echo yes)" yes
check "attnlab --version" "$("$BIN" --version)" "attnlab $cmake_version"
readme_version=$(sed -n 's/^\*\*Status (\([0-9.]*\))\.\*\*.*/\1/p' "$SRC/README.md")
check "README status line" "$readme_version" "$cmake_version"
if "$BIN" init --preset tiny --out "$WORK/m.safetensors" >/dev/null 2>&1; then
  # the safetensors header: 8-byte length, then JSON with __metadata__
  meta=$(head -c 65536 "$WORK/m.safetensors" | tail -c +9 | grep -ao '"attnlab_version":"[^"]*"' | head -1)
  check "checkpoint metadata" "$meta" "\"attnlab_version\":\"$cmake_version\""
else
  check "attnlab init" failed ok
fi
finish
