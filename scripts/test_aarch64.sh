#!/usr/bin/env bash
# The attention kernels' tests on AArch64 (the NEON kernel set), without an ARM machine: builds
# tests/kernels/test_attention.cpp with the Debian cross compiler and runs it under QEMU's user-mode
# emulator. Only the attention kernels and their tests are built (they need nothing but the C++
# library, OpenMP and GoogleTest, which is compiled from Debian's source package here).
#   apt-get install g++-aarch64-linux-gnu qemu-user-static googletest   # once
#   bash scripts/test_aarch64.sh [gtest args...]                        # e.g. --gtest_filter='*Float*'
# Not part of `make test` (it needs the cross tools, and QEMU runs the tests 10-50x slower).
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=aarch64-linux-gnu-g++
QEMU=qemu-aarch64-static
GTEST=/usr/src/googletest/googletest
for tool in "$CXX" "$QEMU"; do
  command -v "$tool" > /dev/null || { echo "test_aarch64.sh: $tool is missing: apt-get install g++-aarch64-linux-gnu qemu-user-static" >&2; exit 2; }
done
[[ -f $GTEST/src/gtest-all.cc ]] || { echo "test_aarch64.sh: $GTEST is missing: apt-get install googletest" >&2; exit 2; }
OUT=build/aarch64
mkdir -p "$OUT"
FLAGS=(-std=c++20 -O2 -fopenmp -Wall -Wextra -Werror -Wno-unknown-pragmas -fno-math-errno -Isrc -Itests -I"$GTEST/include" -I"$GTEST")
[[ $OUT/gtest.o -nt $GTEST/src/gtest-all.cc ]] || "$CXX" -std=c++20 -O1 -I"$GTEST/include" -I"$GTEST" -c "$GTEST/src/gtest-all.cc" -o "$OUT/gtest.o"
[[ $OUT/gtest_main.o -nt $GTEST/src/gtest_main.cc ]] || "$CXX" -std=c++20 -O1 -I"$GTEST/include" -c "$GTEST/src/gtest_main.cc" -o "$OUT/gtest_main.o"
"$CXX" "${FLAGS[@]}" tests/kernels/test_attention.cpp src/kernels/attention.cpp "$OUT/gtest.o" "$OUT/gtest_main.o" \
  -static -o "$OUT/test_attention"
echo "test_aarch64.sh: built $OUT/test_attention ($(file -b "$OUT/test_attention" | cut -d, -f1-2)); running it under $QEMU"
OMP_NUM_THREADS=2 "$QEMU" "$OUT/test_attention" "$@"
