#!/usr/bin/env bash
# The instruments of docs/analysis.md and docs/long-context.md on a real (tiny) run: five models with
# the same seed, data and budget — RoPE, ALiBi, GOAT, XSA (RoPE + attn.xsa=on), DAR (RoPE +
# residual.kind=dar) — then `attnlab analyze` and `attnlab eval --lengths 1,2,4,8 --json` on each,
# and `attnlab task passkey --train` + `--eval --lengths 1,2,4,8 --json` for RoPE, ALiBi and GOAT.
# The headline tables (docs/analysis.md and docs/long-context.md, "Headline numbers") come from one run.
#
# Usage: scripts/instruments_demo.sh OUT_DIR
#   run from the repository root; the tool is $ATTNLAB (default build/release/attnlab).
#   Data: data/heldout if it holds train.bin/val.bin (made by `make demo`), else OUT_DIR/data prepared
#   from tests/data/*.txt with vocabulary 400 (as tests/cli/test_cli.sh does).
#   Budget knobs (environment): STEPS (default 300), TASK_STEPS (default 200), EVAL_TOKENS (default
#   32768), TASK_SAMPLES (default 64), PASSKEY (default "rope alibi goat": the models trained on passkey).
set -euo pipefail
OUT=${1:?usage: scripts/instruments_demo.sh OUT_DIR}
BIN=${ATTNLAB:-build/release/attnlab}
STEPS=${STEPS:-300}
TASK_STEPS=${TASK_STEPS:-200}
EVAL_TOKENS=${EVAL_TOKENS:-32768}
TASK_SAMPLES=${TASK_SAMPLES:-64}
PASSKEY=${PASSKEY:-"rope alibi goat"}
[ -x "$BIN" ] || { echo "instruments_demo.sh: $BIN not found (build it: cmake --build build/release --target attnlab)" >&2; exit 1; }
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

# (a) data
if [ -f data/heldout/train.bin ] && [ -f data/heldout/val.bin ]; then
  DATA=data/heldout
else
  DATA="$OUT/data"
  if [ ! -f "$DATA/val.bin" ]; then
    inputs=()
    for f in tests/data/*.txt; do inputs+=(--input "$f"); done
    log "prepare $DATA from tests/data (vocab 400)"
    "$BIN" prepare "${inputs[@]}" --out "$DATA" --vocab 400 >"$OUT/prepare.log" 2>&1
  fi
fi
VOCAB=$(grep -o '"vocab_size": *[0-9]*' "$DATA/prepare.json" | head -1 | grep -o '[0-9]*$')
log "data $DATA (vocabulary $VOCAB)"

# (b) five models, same seed and budget: the tiny preset (2 layers, d 64, 4 heads) at T_train = 64.
common=(--preset tiny --set model.seq_len=64 --set "model.vocab_size=$VOCAB" --set "data.dir=\"$DATA\""
        --set "train.steps=$STEPS" --set train.warmup=20 --set train.lr=3e-3 --set train.batch_size=8
        --set train.seed=1 --set train.time_limit=0 --set "train.eval_every=$STEPS" --set train.eval_batches=8)
declare -A SETS=(
  [rope]="--set attn.pos=rope"
  [alibi]="--set attn.pos=alibi"
  [goat]="--set attn.pos=goat"
  [xsa]="--set attn.pos=rope --set attn.xsa=on"
  [dar]="--set attn.pos=rope --set residual.kind=dar"
)
MODELS=(rope alibi goat xsa dar)
for m in "${MODELS[@]}"; do
  if [ -f "$OUT/$m/model.safetensors" ]; then log "train $m: exists"; continue; fi
  log "train $m (${SETS[$m]})"
  # shellcheck disable=SC2086
  "$BIN" train "${common[@]}" ${SETS[$m]} --set "train.out_dir=\"$OUT/$m\"" --force --quiet >"$OUT/train_$m.log" 2>&1
  tail -1 "$OUT/train_$m.log"
done

# (c) analyze and length extrapolation on each, passkey on some
for m in "${MODELS[@]}"; do
  CK="$OUT/$m/model.safetensors"
  if [ ! -f "$OUT/analyze_$m/analysis.json" ]; then
  log "analyze $m"
  "$BIN" analyze --checkpoint "$CK" --data "$DATA/val.bin" --out "$OUT/analyze_$m" --sequences 64 >"$OUT/analyze_$m.log" 2>&1
  grep "layer" "$OUT/analyze_$m.log" || true
  fi
  if [ ! -f "$OUT/lengths_$m.json" ]; then
  log "eval --lengths $m"
  "$BIN" eval --checkpoint "$CK" --data "$DATA/val.bin" --lengths 1,2,4,8 --tokens "$EVAL_TOKENS" \
    --json "$OUT/lengths_$m.json" >"$OUT/lengths_$m.log" 2>&1
  fi
done
for m in $PASSKEY; do
  log "task passkey --train $m"
  if [ ! -f "$OUT/passkey_$m/model.safetensors" ]; then
    # shellcheck disable=SC2086
    "$BIN" task passkey --train --preset tiny --set model.seq_len=128 --set model.d_model=128 --set train.batch_size=16 \
      --set "train.steps=$TASK_STEPS" --set train.warmup=20 --set train.lr=3e-3 --set train.seed=1 --set train.time_limit=0 \
      --set "train.eval_every=$TASK_STEPS" ${SETS[$m]} --set "train.out_dir=\"$OUT/passkey_$m\"" --quiet >"$OUT/passkey_train_$m.log" 2>&1
  fi
  [ -f "$OUT/passkey_$m.json" ] && continue
  log "task passkey --eval $m"
  "$BIN" task passkey --eval --checkpoint "$OUT/passkey_$m/model.safetensors" --lengths 1,2,4,8 --samples "$TASK_SAMPLES" \
    --seed 1 --json "$OUT/passkey_$m.json" >"$OUT/passkey_eval_$m.log" 2>&1
done

# one PNG per instrument over all checkpoints (each run also drew its own PNG next to its JSON)
ls_json=(); for m in "${MODELS[@]}"; do ls_json+=("$OUT/lengths_$m.json"); done
pk_json=(); for m in $PASSKEY; do pk_json+=("$OUT/passkey_$m.json"); done
/usr/bin/python3 scripts/plot_long_context.py -o "$OUT/lengths_all.png" "${ls_json[@]}" || true
/usr/bin/python3 scripts/plot_long_context.py -o "$OUT/passkey_all.png" "${pk_json[@]}" || true

# the headline tables
/usr/bin/python3 - "$OUT" "${MODELS[*]}" "$PASSKEY" <<'EOF' | tee "$OUT/headline.md"
import json, os, sys
out, models, pk = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def load(p):
    p = os.path.join(out, p)
    return json.load(open(p)) if os.path.exists(p) else None
f = lambda v, d=3: "n/a" if v is None else ("%.*f" % (d, v))
print("### cos_yv by layer (mean over heads; min..max)\n")
print("| model | " + " | ".join("layer %d" % i for i in range(len(load("analyze_rope/analysis.json")["attention"]["layers"]))) + " | loss |")
print("|---|" + "---:|" * (len(load("analyze_rope/analysis.json")["attention"]["layers"]) + 1))
for m in models:
    a = load("analyze_%s/analysis.json" % m)
    if a is None: continue
    cells = ["%.3f (%.3f..%.3f)" % (l["cos_yv"]["mean"], l["cos_yv"]["min"], l["cos_yv"]["max"]) for l in a["attention"]["layers"]]
    print("| %s | %s | %s |" % (m, " | ".join(cells), f(a.get("loss"))))
print("\n### loss by length (multiples of T_train = 64)\n")
print("| model | 1× | 2× | 4× | 8× | 8×, positions ≥ T_train |")
print("|---|---:|---:|---:|---:|---:|")
for m in models:
    j = load("lengths_%s.json" % m)
    if j is None: continue
    ls = j["lengths"]
    print("| %s | %s | %s |" % (m, " | ".join(f(l["loss"]) for l in ls), f(ls[-1]["loss_beyond_train"])))
print("\n### passkey (T_train = 128), by length\n")
print("| model | strict 1×/2×/4×/8× | per-token accuracy | log p(answer) |")
print("|---|---|---|---|")
for m in pk:
    j = load("passkey_%s.json" % m)
    if j is None: continue
    c = j["cells"]
    print("| %s | %s | %s | %s |" % (m, " / ".join(f(x["strict_accuracy"]) for x in c),
          " / ".join(f(x["token_accuracy"]) for x in c), " / ".join(f(x["answer_logprob"], 1) for x in c)))
EOF
log "done: $OUT/headline.md"
