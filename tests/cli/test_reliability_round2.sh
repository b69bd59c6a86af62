#!/usr/bin/env bash
# Reliability, round 2 (issue 28; docs/reliability.md, rows 14 on): checksummed checkpoints, the
# Adam second moment at load, no silent overwrite by `init`, arguments validated where they enter
# with the limit in the message, errors that name their source, and the small things a user sees.
# Usage: test_reliability_round2.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"
BIN=$(realpath "$BIN")  # (one check runs from another directory)

"$BIN" prepare --input "$SRC/tests/data/web_genesis_1-30.txt" --out "$WORK/d" --vocab 400 >/dev/null 2>&1 || bad "prepare"
common=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/d\"")
"$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/run\"" --set train.steps=2 --set train.eval_every=0 --quiet \
  >/dev/null 2>&1 || bad "train"
ck=$WORK/run/model.safetensors

# 1. A bit flipped inside a tensor's data (the header untouched) is named; --skip-checksums loads it.
python3 - "$ck" "$WORK/flipped.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
begin = h["adam.v.wte"]["data_offsets"][0]
b[8 + n + begin + 5] ^= 0x01  # a low mantissa bit: the value stays finite, the loss barely moves
open(dst, "wb").write(b)
PY
expect_error "flipped bit names the file and tensor" "$WORK/flipped.safetensors: tensor 'adam.v.wte' fails its checksum" \
  "$BIN" train --resume "$WORK/flipped.safetensors" --set train.steps=3 --quiet
python3 - "$ck" "$WORK/flipped_w.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
b[8 + n + h["ln_f.weight"]["data_offsets"][0] + 2] ^= 0x10
open(sys.argv[2], "wb").write(b)
PY
for cmd in "eval --data $WORK/d/val.bin --batches 1" "sample --prompt a -n 2 --quiet" "forward --tokens $WORK/d/val.bin --out $WORK/o.npy"; do
  # shellcheck disable=SC2086
  expect_error "flipped weight: ${cmd%% *}" "tensor 'ln_f.weight' fails its checksum" "$BIN" $cmd --checkpoint "$WORK/flipped_w.safetensors"
done
"$BIN" eval --checkpoint "$WORK/flipped_w.safetensors" --data "$WORK/d/val.bin" --batches 1 --skip-checksums >/dev/null 2>&1 \
  && ok "--skip-checksums loads it" || bad "--skip-checksums"
# A file without checksums (an older attnlab's, rewritten by the official writer's rules) loads with a note.
python3 - "$ck" "$WORK/old.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]["checksums.xxh64"]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * ((8 - len(t) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
out=$("$BIN" eval --checkpoint "$WORK/old.safetensors" --data "$WORK/d/val.bin" --batches 1 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'has no tensor checksums' <<<"$out")" = 1 ] && ok "a file without checksums loads with one note" \
  || bad "old file: rc=$rc $out"

# 2. A negative Adam second moment (checksums recomputed, so the value itself must be refused).
python3 - "$ck" "$WORK/negv.safetensors" <<'PY'
import json, struct, sys
sys.path.insert(0, "")
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
at = 8 + n + h["adam.v.ln_f.weight"]["data_offsets"][0]
b[at:at + 4] = struct.pack("<f", -1.0)
# drop the checksums: what the value check must catch alone
del h["__metadata__"]["checksums.xxh64"]
t = json.dumps(h, separators=(",", ":")).encode()
t += b" " * ((8 - len(t) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PY
expect_error "adam.v = -1 is refused at load" "$WORK/negv.safetensors: tensor 'adam.v.ln_f.weight' holds a negative value" \
  "$BIN" train --resume "$WORK/negv.safetensors" --set train.steps=3 --quiet

# 5. `init --out` over an existing checkpoint needs --force.
cp "$ck" "$WORK/keep.safetensors"
expect_error "init over a checkpoint needs --force" "--out $WORK/keep.safetensors: a file is already there; pass --force" \
  "$BIN" init --preset tiny --out "$WORK/keep.safetensors"
cmp -s "$ck" "$WORK/keep.safetensors" && ok "the checkpoint is untouched" || bad "init replaced the checkpoint"
"$BIN" init --preset tiny --out "$WORK/keep.safetensors" --force >/dev/null 2>&1 && ! cmp -s "$ck" "$WORK/keep.safetensors" \
  && ok "init --force replaces it" || bad "init --force"

# 3. Arguments validated where they enter, with the limit in the message (and no 300-digit range).
V=$WORK/d/val.bin
expect_arg() {  # NAME PATTERN CMD...: exit 1, PATTERN on stderr, and no CLI11 "not in range" text
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$pattern" <<<"$err" && ! grep -q "not in range\|179769" <<<"$err"; then ok "$name"
  else bad "$name (rc=$rc, stderr: $err)"; fi
}
expect_arg "compare --stop-after-runs -1" "--stop-after-runs: must be ≥ 1, got -1" "$BIN" compare "$WORK/none.toml" --stop-after-runs -1
expect_arg "compare --stop-after-steps 0" "--stop-after-steps: must be ≥ 1, got 0" "$BIN" compare "$WORK/none.toml" --stop-after-steps 0
expect_arg "task mqar --keys -5" "--keys: must be ≥ 0 (0 = the default), got -5" "$BIN" task mqar --eval --checkpoint "$ck" --keys -5
expect_arg "task mqar --queries -1" "--queries: must be ≥ 0 (0 = the default), got -1" "$BIN" task mqar --eval --checkpoint "$ck" --queries -1
expect_arg "task --samples 0" "--samples: must be ≥ 1, got 0" "$BIN" task passkey --eval --checkpoint "$ck" --samples 0
expect_arg "sample --seed -1" "--seed: must be a whole number in [0, 2^64 - 1], got '-1'" "$BIN" sample --checkpoint "$ck" --prompt a --seed -1
expect_arg "eval --lengths \"\"" "--lengths: must not be empty" "$BIN" eval --checkpoint "$ck" --data "$V" --lengths ""
expect_arg "eval --batch-size 0" "--batch-size: must be ≥ 1, got 0" "$BIN" eval --checkpoint "$ck" --data "$V" --batch-size 0
expect_arg "analyze --sequences 0" "--sequences: must be ≥ 1, got 0" "$BIN" analyze --checkpoint "$ck" --data "$V" --out "$WORK/an" --sequences 0
expect_arg "bench --steps 0" "--steps: must be ≥ 1, got 0" "$BIN" bench --preset tiny --steps 0
expect_arg "prepare --vocab 5" "--vocab: must be in [260, 65536], got 5" "$BIN" prepare --input "$SRC/tests/data/web_genesis_1-30.txt" --out "$WORK/p" --vocab 5
expect_arg "eval --lengths 1000000000" "1000000000': 32000000000 tokens (× T_train = 32) is too long: at most 2^30" \
  "$BIN" eval --checkpoint "$ck" --data "$V" --lengths 1000000000
# prepare --val-fraction: the help and the check say the same interval.
help=$("$BIN" prepare --help 2>&1)
expect_arg "prepare --val-fraction 0" "must be in (0, 0.5]" "$BIN" prepare --input "$SRC/tests/data/web_genesis_1-30.txt" --out "$WORK/p" --val-fraction 0
grep -qF "(0, 0.5]" <<<"$help" && ! grep -qF "[0 - 0.5]" <<<"$help" && ok "prepare --help gives the same interval" || bad "prepare --help: $(grep -F val-fraction <<<"$help")"

# 4. Every error names its source.
printf '[]' >"$WORK/array.json"; printf 'null' >"$WORK/null.json"
expect_error "report on []" "results file $WORK/array.json: is a JSON array, not the object" "$BIN" report "$WORK/array.json"
expect_error "report on null" "results file $WORK/null.json: is a JSON null, not the object" "$BIN" report "$WORK/null.json"
printf '{"schema": "attnlab.compare", "version": 1, "runs": [{"id": "a"' >"$WORK/trunc.json"
expect_error "report on a truncated results.json" "results file $WORK/trunc.json, line 1, column 64: not valid JSON" "$BIN" report "$WORK/trunc.json"
err=$("$BIN" report "$WORK/trunc.json" 2>&1)
grep -q "ends early" <<<"$err" && ! grep -q "json.exception" <<<"$err" && ok "truncated: says so, no parser prefix" || bad "truncated: $err"
printf '{"schema": "attnlab.compare", "version": 1, "x": 1e999}' >"$WORK/huge_number.json"  # fuzz_results' first finding
expect_error "report on a number beyond double" "results file $WORK/huge_number.json: not valid JSON (number overflow parsing '1e999')" \
  "$BIN" report "$WORK/huge_number.json"
# fuzz_results' second finding: a document whose curve has fewer y than x values (read past the end).
"$BIN" report "$SRC/fuzz/corpus/results/series_lengths.json" --out "$WORK/sl.html" >/dev/null 2>&1
rc=$?
[ $rc -le 1 ] && ok "report on unequal series lengths ends cleanly (exit $rc)" || bad "report on unequal series: exit $rc"
# fuzz_results' third finding: a nested key removed (a run without "curve", a summary row without
# "val_loss", ...) was a read of freed memory through nlohmann's const operator[] (src/core/json.h).
# Every key of the fixture's first run, first summary row and grid, removed one at a time, and each
# array there emptied: `report` either draws the page or stops with an error naming the file, never
# a crash (under ASan, never a bad read).
mkdir -p "$WORK/nested"
python3 - "$SRC/tests/data/compare_results.json" "$WORK/nested" <<'PY'
import copy, json, sys
doc = json.load(open(sys.argv[1]))
n = 0
def emit(d):
    global n
    json.dump(d, open(f"{sys.argv[2]}/{n:03d}.json", "w")); n += 1
for path in (("runs", 0), ("summary", 0), ("grid",)):
    node = doc
    for p in path: node = node[p]
    for key in list(node):
        d = copy.deepcopy(doc); t = d
        for p in path: t = t[p]
        del t[key]; emit(d)
        if isinstance(node[key], (list, dict)):
            d = copy.deepcopy(doc); t = d
            for p in path: t = t[p]
            t[key] = type(node[key])(); emit(d)
PY
crashed="" unnamed="" tried=0
for f in "$WORK"/nested/*.json; do
  tried=$((tried + 1))
  err=$("$BIN" report "$f" --out "$WORK/nested.html" 2>&1 >/dev/null)
  rc=$?
  [ $rc -le 1 ] || crashed+=" $(basename "$f"):exit$rc"
  [ $rc -eq 1 ] && ! grep -qF "results file $f" <<<"$err" && unnamed+=" $(basename "$f")"
done
check "report on $tried documents with a nested key removed or emptied: no crash" '[ $tried -gt 40 ] && [ -z "$crashed" ]'
[ -n "$crashed" ] && echo "crashed:$crashed"
check "... and every error names the file" '[ -z "$unnamed" ]'
[ -n "$unnamed" ] && echo "errors without the file's name:$unnamed"
expect_error "analyze --sequences 2000000000" "--sequences 2000000000 needs 264.0 GB (2000000000 windows of 33 tokens)" \
  "$BIN" analyze --checkpoint "$ck" --data "$V" --out "$WORK/an" --sequences 2000000000
expect_error "prepare --input /dev/zero" "prepare input /dev/zero: holds a NUL byte at offset 0: not a text file" \
  "$BIN" prepare --input /dev/zero --out "$WORK/pz"
expect_error "--set model.n_head=3 is blamed on --set" \
  "--set model.n_head=3: model.d_model = 64 (preset tiny:3) is not divisible by model.n_head = 3 (--set model.n_head=3)" \
  "$BIN" info --preset tiny --set model.n_head=3
cat >"$WORK/lengths0.toml" <<TOML
preset = "tiny"
set = ["model.vocab_size=400", "data.dir=$WORK/d"]
steps = 2
lengths = "0"
[variants.rope]
set = ["attn.pos=rope"]
TOML
expect_error "grid lengths = \"0\" names the grid line" "$WORK/lengths0.toml:4: lengths entry '0': expected a positive" \
  "$BIN" compare "$WORK/lengths0.toml" --out "$WORK/l0"
# Binary bytes given as a config or a grid are escaped, never echoed raw.
printf 'model.n_layer = \x1b[31mred\x07\n' >"$WORK/bin1.toml"
printf '\x7fELF\x02\x01\x01\x00\x1b]0;owned\x07\n' >"$WORK/bin2.toml"
for f in bin1 bin2; do
  for cmd in "info --config" "compare"; do
    err=$("$BIN" $cmd "$WORK/$f.toml" 2>&1 >/dev/null)
    rc=$?
    want='\x1b'; [ $f = bin2 ] && want='\x7fELF'
    [ "$f $cmd" = "bin1 compare" ] && want="unknown grid key 'model.n_layer'"
    if [ $rc -eq 1 ] && grep -qF "$WORK/$f.toml:1" <<<"$err" && grep -qF "$want" <<<"$err" && ! grep -q $'\x1b' <<<"$err" \
       && ! grep -q $'\x07' <<<"$err"; then ok "$cmd $f: escaped"; else bad "$cmd $f: rc=$rc $(cat -v <<<"$err")"; fi
  done
done

# 7. Small things a user sees.
# Perplexity with %g: a model whose logits are huge (wte × 1000) has a loss whose exp has 180+ digits.
python3 - "$ck" "$WORK/huge.safetensors" <<'PY'
import json, struct, sys, array
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
lo, hi = h["wte"]["data_offsets"]
w = array.array("f", bytes(b[8 + n + lo:8 + n + hi]))
for i in range(len(w)):
    w[i] *= 30.0
b[8 + n + lo:8 + n + hi] = w.tobytes()
open(sys.argv[2], "wb").write(b)
PY
out=$("$BIN" eval --checkpoint "$WORK/huge.safetensors" --data "$V" --batches 1 --skip-checksums 2>&1)
ppl=$(sed -n 's/.*perplexity \([^ ]*\)$/\1/p' <<<"$out")
[ -n "$ppl" ] && [ ${#ppl} -le 12 ] && ok "perplexity printed with %g ($ppl)" || bad "perplexity: $out"
# The resume hint names the grid's path; a stopped run keeps model.safetensors and one step file.
cat >"$WORK/g.toml" <<TOML
preset = "tiny"
set = ["model.vocab_size=400", "data.dir=$WORK/d", "train.eval_every=0"]
steps = 6
ckpt_every = 1
[variants.rope]
set = ["attn.pos=rope"]
TOML
out=$("$BIN" compare "$WORK/g.toml" --out "$WORK/gout" --stop-after-steps 3 --quiet 2>&1)
rc=$?
[ $rc -eq 3 ] && grep -qF "continue with \`attnlab compare $WORK/g.toml --out $WORK/gout --resume\`" <<<"$out" \
  && ok "the resume hint names the grid" || bad "resume hint: rc=$rc $out"
run_dir=$(ls -d "$WORK"/gout/runs/* 2>/dev/null | head -1)
kept=$(cd "$run_dir" 2>/dev/null && ls *.safetensors | tr '\n' ' ')
[ "$kept" = "model.safetensors step_000003.safetensors " ] && ok "a stopped run keeps model + the newest step file" \
  || bad "checkpoints kept after a stop: '$kept'"
# `report` writes next to results.json by default, wherever it is run from.
mkdir -p "$WORK/rep" "$WORK/elsewhere"
cp "$SRC/tests/data/compare_results.json" "$WORK/rep/results.json"
(cd "$WORK/elsewhere" && "$BIN" report "$WORK/rep/results.json" >/dev/null 2>&1)
[ -s "$WORK/rep/report.html" ] && [ ! -e "$WORK/elsewhere/report.html" ] && ok "report writes beside results.json" \
  || bad "report default path"
# sample warns when the context passes T_train under positions that do not extrapolate (tiny: rope, 32).
err=$("$BIN" sample --checkpoint "$ck" --prompt a -n 40 --quiet 2>&1 >/dev/null)
grep -q "beyond model.seq_len = 32 .* attn.pos = rope does not extrapolate" <<<"$err" && ok "sample warns beyond T_train" \
  || bad "sample warning: $err"
err=$("$BIN" sample --checkpoint "$ck" --prompt a -n 5 --quiet 2>&1 >/dev/null)
! grep -q "extrapolate" <<<"$err" && ok "no warning within T_train" || bad "warning within T_train: $err"
# --help shows every default.
h=$("$BIN" eval --help 2>&1)
grep -q -- "--batch-size INT:(≥ 1)=8 " <<<"$h" && grep -q -- "--bos INT:(≥ 0)=1 " <<<"$h" && grep -q -- "--weights TEXT:{fp32,bf16}=fp32" <<<"$h" && ok "--help shows defaults" || bad "eval --help: $h"
# analyze --bootstrap 0 on a DAR model still draws rescue_gain.png (without error bars).
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/dar\"" --set train.steps=2 --set train.eval_every=0 \
    --set residual.kind=dar --quiet >/dev/null 2>&1 || bad "train dar"
  "$BIN" analyze --checkpoint "$WORK/dar/model.safetensors" --data "$V" --sequences 4 --bootstrap 0 --out "$WORK/dar_an" \
    >"$WORK/dar_an.log" 2>&1
  [ -s "$WORK/dar_an/rescue_gain.png" ] && ok "analyze --bootstrap 0 draws rescue_gain.png" \
    || bad "rescue_gain.png missing: $(tail -5 "$WORK/dar_an.log")"
else
  echo "SKIP: rescue_gain.png (no matplotlib for /usr/bin/python3)"
fi

# 6. Long work shows progress with an ETA, stops on Ctrl-C with exit 3, and absurd sizes are refused first.
err=$("$BIN" analyze --checkpoint "$ck" --data "$V" --out "$WORK/an6" --sequences 8 --batch-size 4 --no-plots 2>&1 >/dev/null)
grep -q "^analyze: 8/8 windows (100%), ETA 0:00" <<<"$err" && ok "analyze shows progress" || bad "analyze progress: $err"
err=$("$BIN" eval --checkpoint "$ck" --data "$V" --lengths 1,2 --tokens 256 2>&1 >/dev/null)
grep -q "^length 64: 256/512 tokens (50%), ETA\|^length 64: 512/512 tokens (100%), ETA 0:00" <<<"$err" && ok "eval --lengths shows progress" \
  || bad "eval --lengths progress: $err"
"$BIN" task passkey --train --preset tiny --set model.seq_len=72 --set "train.out_dir=\"$WORK/pk\"" --set train.steps=2 --set train.eval_every=0 \
  --quiet >/dev/null 2>&1 || bad "task passkey --train"
err=$("$BIN" task passkey --eval --checkpoint "$WORK/pk/model.safetensors" --lengths 1,2 --samples 16 2>&1 >/dev/null)
grep -q "^passkey at 144 tokens: 32/32 samples (100%), ETA 0:00" <<<"$err" && ok "task --eval shows progress" || bad "task --eval progress: $err"
expect_error "an absurd task length is refused with the memory figure" "needs" \
  "$BIN" task passkey --eval --checkpoint "$WORK/pk/model.safetensors" --lengths 100000000tok --samples 1
err=$("$BIN" task passkey --eval --checkpoint "$WORK/pk/model.safetensors" --lengths 100000000tok --samples 1 2>&1)
grep -q "evaluating at 100000000 tokens needs [0-9.]* GB (the KV cache" <<<"$err" && ok "… naming the bytes" || bad "absurd length: $err"
# SIGINT to background job PID, as Ctrl-C would (a binary that ignores it is killed after 20 s: rc 137).
interrupt() {
  local pid=$1
  kill -INT "$pid"
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  wait "$pid"
}
# Ctrl-C: a long task evaluation stops at its next batch with exit 3 and says what to do.
"$BIN" task passkey --eval --checkpoint "$WORK/pk/model.safetensors" --lengths 8 --samples 1000000 >/dev/null 2>"$WORK/int.err" &
pid=$!
for _ in $(seq 1 200); do grep -q "samples" "$WORK/int.err" 2>/dev/null && break; sleep 0.05; done
interrupt $pid
rc=$?
[ $rc -eq 3 ] && grep -q "attnlab: interrupted (signal 2) at passkey at 576 tokens, [0-9]* of 1000000 samples done; nothing was written" "$WORK/int.err" \
  && ok "task --eval: Ctrl-C exits 3 with a hint" || bad "task --eval Ctrl-C: rc=$rc $(tail -2 "$WORK/int.err")"
# sample streams its text as it is generated, and Ctrl-C stops it with exit 3.
"$BIN" sample --checkpoint "$ck" --prompt "In the beginning" -n 1000000 --quiet >"$WORK/stream.out" 2>"$WORK/stream.err" &
pid=$!
for _ in $(seq 1 200); do [ "$(wc -c <"$WORK/stream.out")" -gt 40 ] && break; sleep 0.05; done
size=$(wc -c <"$WORK/stream.out")
interrupt $pid
rc=$?
[ "$size" -gt 40 ] && ok "sample streams its text ($size bytes before the end)" || bad "sample did not stream ($size bytes)"
[ $rc -eq 3 ] && grep -q "interrupted after [0-9]* of 1000000 tokens" "$WORK/stream.err" && ok "sample: Ctrl-C exits 3" \
  || bad "sample Ctrl-C: rc=$rc $(cat "$WORK/stream.err")"
# A short sample's streamed text is the text of all its ids (as before streaming).
out=$("$BIN" sample --checkpoint "$ck" --prompt "In the beginning" -n 150 --seed 3 --quiet --temperature 0.8 2>/dev/null)
[ -n "$out" ] && [ "$(wc -l <<<"$out")" -ge 1 ] && ok "sample -n 150 prints its text" || bad "sample -n 150: '$out'"

finish
