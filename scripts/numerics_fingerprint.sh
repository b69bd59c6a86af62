#!/usr/bin/env bash
# The numerics fingerprint of a build: fixed short training runs of one model per attention
# mechanism and residual kind (and a resume), printed as their per-step losses and gradient norms
# (%.9g, metrics.jsonl) and the SHA-256 of the final model's logits on fixed tokens (`attnlab
# forward`, every bit of every logit). A change that is not meant to move results (a refactor, a
# move, a new option left off) must leave this output identical on the same machine:
#
#   scripts/numerics_fingerprint.sh build/release/attnlab > before.txt
#   ... the change, rebuild ...
#   scripts/numerics_fingerprint.sh build/release/attnlab > after.txt && diff before.txt after.txt
#
# Two threads, fixed seeds, the committed test corpus (tests/data). About a minute on 2 cores.
set -euo pipefail
BIN=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
# The split of versions before 2026-12 (pieces), where the binary knows --split, so that
# binaries from before and after the held-out split fingerprint the same data.
split=()
if "$BIN" prepare --help 2>/dev/null | grep -q -- '--split'; then split=(--split pieces); fi
"$BIN" prepare "${inputs[@]}" "${split[@]}" --out "$WORK/data" --vocab 400 >/dev/null
printf '1 2 3 4 5 6 7 8 9 10 11 12\n13 14 15 16 17 18 19 20 21 22 23 24\n' >"$WORK/ids.txt"

base=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"" --set train.steps=12 --set train.warmup=2
      --set train.log_every=1 --set train.eval_every=6 --set train.seed=7 --quiet)
variants=(
  "rope|attn.pos=rope"
  "learned|attn.pos=learned"
  "xsa_goat_sink|attn.pos=goat attn.xsa=on attn.sink=learned"
  "goat_partial|attn.pos=goat attn.goat.layers=[1] attn.goat.other_pos=alibi"
  "xsa_gated|attn.pos=rope attn.xsa=gated"
  "alibi_sink|attn.pos=alibi attn.sink=learned"
  "gqa_swiglu|attn.pos=rope model.kv_heads=2 model.mlp=swiglu model.norm=rmsnorm"
  "attnres_block|attn.pos=rope residual.kind=attnres residual.block_size=2"
  "hyper|attn.pos=rope residual.kind=hyper"
  "mhc|attn.pos=rope residual.kind=mhc"
  "dar_block|attn.pos=rope residual.kind=dar"
  "dar_xsa_goat|attn.pos=goat attn.xsa=on residual.kind=dar residual.block_size=1"
  "bf16|attn.pos=rope attn.xsa=on train.precision=bf16"
  "wide_tiles|attn.pos=alibi attn.xsa=on attn.sink=learned model.d_model=128 model.seq_len=160 train.batch_size=2"
)
fingerprint() {  # NAME RUN_DIR
  echo "== $1"
  sed -nE 's/.*"step":([0-9]+),"loss":([^,]+),"lr":[^,]+,"grad_norm":([^,]+),.*/step \1 loss \2 grad_norm \3/p; s/.*"step":([0-9]+),"val_loss":([^,]+),.*/step \1 val_loss \2/p' \
    "$2/metrics.jsonl"
  "$BIN" forward --checkpoint "$2/model.safetensors" --tokens "$WORK/ids.txt" --out "$WORK/logits.npy" >/dev/null
  echo "logits sha256 $(sha256sum <"$WORK/logits.npy" | cut -c1-64)"
}
for v in "${variants[@]}"; do
  name=${v%%|*}
  sets=()
  for kv in ${v#*|}; do sets+=(--set "$kv"); done
  "$BIN" train "${base[@]}" "${sets[@]}" --set "train.out_dir=\"$WORK/$name\"" >/dev/null
  fingerprint "$name" "$WORK/$name"
done
# A resume: 6 steps, stop with a checkpoint, then on to 12 from it.
"$BIN" train "${base[@]}" --set attn.pos=goat --set attn.xsa=gated --set "train.out_dir=\"$WORK/resume\"" --stop-after 6 >/dev/null
"$BIN" train --resume "$WORK/resume/model.safetensors" --quiet >/dev/null
fingerprint resume "$WORK/resume"
