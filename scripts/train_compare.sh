#!/usr/bin/env bash
# Trains several variants of one configuration at equal tokens (same data order, same seed), then
# evaluates each final checkpoint on the whole validation shard and prints a markdown table.
# For several seeds, error bars, a baseline test and resumable grids use `attnlab compare`
# (docs/compare.md) instead.
#
#   scripts/train_compare.sh OUT_DIR 'name:key=value;key=value' ['name2:...' ...]
#
# The base configuration is `--preset small` with data in data/heldout and no time limit (so every
# variant sees exactly the same tokens); override it with BASE, e.g.
#   BASE="--preset small --set train.steps=320" scripts/train_compare.sh runs/cmp 'rope:' 'xsa:attn.xsa=on'
# Set BIN to use another binary (default build/release/attnlab).
set -euo pipefail
BIN=${BIN:-build/release/attnlab}
BASE=${BASE:---preset small}
DATA=${DATA:-data/heldout}
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR 'name:key=value;...' ..." >&2; exit 2; }
out=$1; shift
mkdir -p "$out"
rows=()
for spec in "$@"; do
  name=${spec%%:*}
  [ "$name" != "$spec" ] && [ -n "$name" ] || { echo "$0: variant '$spec': expected NAME:key=value;key=value" >&2; exit 2; }
  sets=(--set "data.dir=$DATA" --set train.time_limit=0 --set "train.out_dir=$out/$name")
  IFS=';' read -ra kvs <<<"${spec#*:}"
  for kv in "${kvs[@]}"; do [ -n "$kv" ] && sets+=(--set "$kv"); done
  echo "== $name: $BIN train $BASE ${sets[*]}" >&2
  # shellcheck disable=SC2086
  "$BIN" train $BASE "${sets[@]}" --force >"$out/$name.log" 2>&1 || { echo "$name: training failed, see $out/$name.log" >&2; exit 1; }
  ev=$("$BIN" eval --checkpoint "$out/$name/model.safetensors" --data "$DATA/val.bin")
  loss=$(grep -oE 'loss [0-9.]+' <<<"$ev" | head -1 | cut -d' ' -f2)
  ppl=$(grep -oE 'perplexity [0-9.]+' <<<"$ev" | head -1 | cut -d' ' -f2)
  params=$(grep -oE '[0-9]+ parameters' "$out/$name.log" | head -1 | cut -d' ' -f1)
  tps=$(grep -oE '[0-9.]+k? tok/s' "$out/$name.log" | tail -1)
  rows+=("| $name | \`${spec#*:}\` | $params | $loss | $ppl | $tps |")
done
echo "| variant | settings | parameters | val loss (whole shard) | perplexity | last tok/s |"
echo "|---|---|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
