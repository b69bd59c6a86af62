#!/usr/bin/env bash
# Long-context instruments with the real binary (docs/long-context.md): `attnlab eval --lengths`
# (agreement with `attnlab eval` at T_train, JSON, N/A for learned positions, peak memory at 8×
# against 1×, the PNG next to --json) and `attnlab task passkey|needle|mqar --train/--eval`, plus bad input.
# Usage: test_long_context.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"
# json_num FILE KEY N: the N-th (1-based) number after "KEY": in a pretty-printed JSON file
json_num() { grep -o "\"$2\": [-0-9.e+]*" "$1" | sed -n "${3}p" | awk '{print $2}'; }

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
"$BIN" prepare "${inputs[@]}" --out "$WORK/data" --vocab 400 >"$WORK/prepare.log" 2>&1 || bad "prepare: $(tail -3 "$WORK/prepare.log")"
VAL="$WORK/data/val.bin"
common=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"")
"$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/rope\"" --set train.steps=10 --quiet >"$WORK/train.log" 2>&1 \
  || bad "train: $(tail -3 "$WORK/train.log")"
CK="$WORK/rope/model.safetensors"

# 1×: one block of T_train = 32 tokens is `attnlab eval`'s first window (val.bin starts with BOS).
ref=$("$BIN" eval --checkpoint "$CK" --data "$VAL" --seq-len 32 --batch-size 1 --batches 1 2>&1 | sed -n 's/.*loss \([0-9.]*\),.*/\1/p')
"$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1 --tokens 32 --batch-size 1 --json "$WORK/one.json" >"$WORK/one.log" 2>&1
one=$(json_num "$WORK/one.json" loss 1)
if [ -n "$ref" ] && [ "$(printf '%.4f' "$one")" == "$ref" ]; then ok "--lengths 1 equals attnlab eval at T_train ($ref)"; else bad "1× $one vs eval $ref"; fi

if "$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1,2,4,8 --tokens 2048 --json "$WORK/len.json" >"$WORK/len.log" 2>&1 \
   && grep -q "loss per position bucket" "$WORK/len.log" && [ "$(grep -c '"length":' "$WORK/len.json")" -eq 4 ] \
   && grep -q '"token_budget": 2048' "$WORK/len.json" && grep -q '"blocks": 64' "$WORK/len.json" && grep -q '"blocks": 8,' "$WORK/len.json" \
   && grep -q '"loss_beyond_train": null' "$WORK/len.json" \
   && grep -q '"format": "attnlab-length-eval"' "$WORK/len.json"; then
  ok "eval --lengths 1,2,4,8: table, JSON, the same 2048 tokens at every length"
else
  bad "eval --lengths: $(tail -5 "$WORK/len.log")"
fi
# The PNG next to the JSON (scripts/plot_long_context.py) when Debian's python3-matplotlib is installed,
# a note otherwise; --no-plots writes the JSON only; a failing plot step leaves the JSON and a note.
have_mpl=0
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && have_mpl=1
if [ $have_mpl -eq 1 ]; then
  [ -s "$WORK/len.png" ] && grep -q "wrote $WORK/len.png" "$WORK/len.log" && ok "eval --lengths --json: len.png next to the JSON" \
    || bad "no len.png: $(tail -3 "$WORK/len.log")"
else
  grep -q "^note:" "$WORK/len.log" && ok "eval --lengths --json without matplotlib: a note" || bad "no note: $(tail -3 "$WORK/len.log")"
fi
"$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1,2 --tokens 128 --json "$WORK/np.json" --no-plots >"$WORK/np.log" 2>&1
[ -s "$WORK/np.json" ] && [ ! -e "$WORK/np.png" ] && ! grep -q "^note:" "$WORK/np.log" && ok "eval --lengths --json --no-plots: the JSON only" \
  || bad "--no-plots: $(tail -3 "$WORK/np.log")"
out=$("$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1,2 --tokens 128 --json "$WORK/ns.json" --plot-script "$WORK/missing.py" 2>&1)
[ $? -eq 0 ] && [ -s "$WORK/ns.json" ] && grep -q "^note:" <<<"$out" && ok "a failing plot step leaves the JSON and a note" || bad "failing plot: $out"
"$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 32tok,0.5 --tokens 64 >"$WORK/abs.log" 2>&1 && grep -q "^ *16 " "$WORK/abs.log" \
  && ok "absolute (32tok) and fractional (0.5) lengths" || bad "lengths 32tok,0.5: $(cat "$WORK/abs.log")"

# Peak memory: 8× within a factor 8 of 1× (the process's peak RSS; the same budget of 8·256 tokens).
"$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1 --tokens 2048 --json "$WORK/m1.json" >/dev/null 2>&1
"$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 8 --tokens 2048 --json "$WORK/m8.json" >/dev/null 2>&1
r1=$(json_num "$WORK/m1.json" peak_rss_bytes 1)
r8=$(json_num "$WORK/m8.json" peak_rss_bytes 1)
if [ -n "$r1" ] && [ -n "$r8" ] && [ "$r8" -le $((8 * r1)) ]; then ok "peak RSS at 8× ($r8) <= 8 × 1× ($r1)"; else bad "peak RSS 8× $r8 vs 1× $r1"; fi

"$BIN" init --preset tiny --set model.vocab_size=400 --set attn.pos=learned --out "$WORK/learned.safetensors" >/dev/null 2>&1
if "$BIN" eval --checkpoint "$WORK/learned.safetensors" --data "$VAL" --lengths 1,2 --tokens 128 --json "$WORK/l.json" >"$WORK/l.log" 2>&1 \
   && grep -q "N/A" "$WORK/l.log" && grep -q '"applicable": false' "$WORK/l.json"; then
  ok "learned positions: N/A beyond T_train"
else
  bad "learned N/A: $(tail -3 "$WORK/l.log")"
fi
expect_error "fractional token count" "not a whole number" "$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 0.3
expect_error "--json without --lengths" "need --lengths" "$BIN" eval --checkpoint "$CK" --data "$VAL" --json "$WORK/x.json"
expect_error "budget below the longest length" "smaller than the longest" "$BIN" eval --checkpoint "$CK" --data "$VAL" --lengths 1,8 --tokens 100

# Tasks: train a few steps through the training loop, evaluate at 1× and 2× T_train.
task_common=(--preset tiny --set model.seq_len=80 --set train.steps=4 --set train.eval_every=2 --quiet)
for t in passkey needle mqar; do
  extra=()
  [ "$t" == mqar ] && extra=(--keys 16 --kv-pairs 6)
  evextra=("${extra[@]}")
  [ "$t" == needle ] && evextra=(--depths 0.2,0.8)
  if "$BIN" task $t --train "${task_common[@]}" "${extra[@]}" --set "train.out_dir=\"$WORK/$t\"" >"$WORK/$t.log" 2>&1 \
     && grep -q '"val_loss"' "$WORK/$t/metrics.jsonl" \
     && "$BIN" task $t --eval "${evextra[@]}" --checkpoint "$WORK/$t/model.safetensors" --lengths 1,2 --samples 6 \
          --json "$WORK/$t.json" >"$WORK/$t.eval" 2>&1; then
    cells=$(grep -c '"strict_accuracy"' "$WORK/$t.json")
    want=2
    [ "$t" == needle ] && want=4
    [ "$cells" -eq $want ] && ok "task $t: train, eval ($cells cells)" || bad "task $t: $cells cells, want $want"
    if [ $have_mpl -eq 1 ]; then
      [ -s "$WORK/$t.png" ] && ok "task $t --eval --json: $t.png next to the JSON" || bad "task $t: no $t.png: $(tail -3 "$WORK/$t.eval")"
    fi
  else
    bad "task $t: $(tail -3 "$WORK/$t.log") $(tail -3 "$WORK/$t.eval" 2>/dev/null)"
  fi
done
# Exact resume of a task run: steps 3 and 4 replayed from step 2's checkpoint give the same losses.
# (A resume keeps metrics.jsonl up to the resumed step, so step 4 is read before and after it.)
R="$WORK/resume"
step4() { grep '"step":4,"loss"' "$R/metrics.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
if "$BIN" task mqar --train --keys 16 --kv-pairs 6 --preset tiny --set model.seq_len=80 --set train.steps=4 --set train.ckpt_every=2 \
     --set train.eval_every=0 --set "train.out_dir=\"$R\"" --quiet >"$WORK/r.log" 2>&1 \
   && l1=$(step4) \
   && "$BIN" task mqar --train --keys 16 --kv-pairs 6 --resume "$R/step_000002.safetensors" --quiet >>"$WORK/r.log" 2>&1; then
  l2=$(step4)
  n=$(grep -c '"step":4,"loss"' "$R/metrics.jsonl")
  [ "$n" -eq 1 ] && [ -n "$l1" ] && [ "$l1" == "$l2" ] && ok "task resume is exact (step 4 loss $l1 before and after)" || bad "task resume: $n lines, '$l1' vs '$l2'"
else
  bad "task resume: $(tail -3 "$WORK/r.log")"
fi

a=$("$BIN" task passkey --eval --checkpoint "$WORK/passkey/model.safetensors" --lengths 1 --samples 5 --seed 3 | tail -1)
b=$("$BIN" task passkey --eval --checkpoint "$WORK/passkey/model.safetensors" --lengths 1 --samples 5 --seed 3 | tail -1)
[ "${a% *}" == "${b% *}" ] && ok "task eval is deterministic for a seed" || bad "task eval differs: '$a' vs '$b'"
expect_error "task on a text checkpoint" "vocabulary" "$BIN" task passkey --eval --checkpoint "$CK" --lengths 1
expect_error "task needs --train or --eval" "exactly one of --train and --eval" "$BIN" task passkey --preset tiny
expect_error "sequence too short for passkey" "model.seq_len must be at least 67" "$BIN" task passkey --train --preset tiny --quiet
expect_error "--depths on passkey" "needle task only" "$BIN" task passkey --eval --checkpoint "$WORK/passkey/model.safetensors" --depths 0.5

finish
