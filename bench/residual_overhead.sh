#!/usr/bin/env bash
# Step time of every residual kind relative to `standard` (docs/mechanisms.md §4–§6), in one process per
# shape with the kinds alternating round by round (`attnlab bench --variant`, ROUNDS rounds of STEPS
# steps each), so that all of them see the same machine load. Shapes: the bench preset (L=4, d=256,
# H=4, T=256, B=16, V=8192) and the same at n_layer = 12. Prints, per shape, each kind's median step
# and its ratio to standard's.
#
#   bench/residual_overhead.sh [ATTNLAB_BINARY=build/release/attnlab] [STEPS=2] [ROUNDS=5] [cpu]
#
# `cpu`: one thread and process CPU time (on a shared, busy machine wall time measures the other
# processes); otherwise wall time with the machine's OpenMP threads. Goals (issue 4): Block AttnRes
# ≤ 5%, mHC n = 4 ≤ 10%; DAR ≤ 10% at n_layer = 4 and ≤ 20% at n_layer = 12.
set -euo pipefail
BIN=${1:-build/release/attnlab}
STEPS=${2:-2}
ROUNDS=${3:-5}
MODE=${4:-wall}
extra=()
if [ "$MODE" = cpu ]; then
  export OMP_NUM_THREADS=1
  extra=(--cpu-time)
fi
for layers in 4 12; do
  echo "### n_layer = $layers"
  "$BIN" bench --preset bench --set model.n_layer=$layers --steps "$STEPS" --rounds "$ROUNDS" --warmup 1 "${extra[@]}" \
    --variant "standard:" \
    --variant "attnres-full:residual.kind=attnres" \
    --variant "attnres-K2:residual.kind=attnres;residual.block_size=2" \
    --variant "attnres-K4:residual.kind=attnres;residual.block_size=4" \
    --variant "hyper-n4:residual.kind=hyper" \
    --variant "mhc-n4:residual.kind=mhc" \
    --variant "dar-block:residual.kind=dar" \
    --variant "dar-full:residual.kind=dar;residual.block_size=1"
  echo
done
