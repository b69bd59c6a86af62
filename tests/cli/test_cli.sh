#!/usr/bin/env bash
# End-to-end: prepare → train → eval → forward → sample → grads with the real binary on the small
# committed corpus, and bad input that must fail with a clear message (exit 1, no crash).
# Usage: test_cli.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
if "$BIN" prepare "${inputs[@]}" --out "$WORK/data" --vocab 400 >"$WORK/prepare.log" 2>&1 \
   && [ -s "$WORK/data/train.bin" ] && [ -s "$WORK/data/val.bin" ] && [ -s "$WORK/data/tokenizer.model" ]; then
  ok prepare
else
  bad "prepare: $(tail -5 "$WORK/prepare.log")"
fi

common=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"" --set "train.out_dir=\"$WORK/run\"")
if "$BIN" train "${common[@]}" --set train.steps=30 --set train.ckpt_every=10 >"$WORK/train.log" 2>&1 \
   && [ -f "$WORK/run/model.safetensors" ] && [ -f "$WORK/run/step_000010.safetensors" ] && grep -q "val loss" "$WORK/train.log" \
   && grep -q "tok/s" "$WORK/train.log" && grep -q '"val_loss"' "$WORK/run/metrics.jsonl"; then
  ok train
else
  bad "train: $(tail -5 "$WORK/train.log")"
fi
ls "$WORK/run" | grep -q '\.tmp' && bad "train left a temporary file" || ok "no temporary files left"

CK="$WORK/run/model.safetensors"
out=$("$BIN" eval --checkpoint "$CK" --data "$WORK/data/val.bin" 2>&1)
grep -q "perplexity" <<<"$out" && ok eval || bad "eval: $out"

printf '1 2 3 4 5\n6 7 8 9 10\n' >"$WORK/ids.txt"
if "$BIN" forward --checkpoint "$CK" --tokens "$WORK/ids.txt" --out "$WORK/logits.npy" >/dev/null 2>&1; then
  size=$(stat -c %s "$WORK/logits.npy")
  # 128-byte header + 2*5*320 floats
  [ "$size" -eq $((128 + 2 * 5 * 400 * 4)) ] && ok forward || bad "forward: logits.npy has $size bytes"
else
  bad forward
fi
out=$("$BIN" sample --checkpoint "$CK" --prompt "In the beginning" -n 20 --seed 3 2>"$WORK/sample.err")
[ $? -eq 0 ] && [ -n "$out" ] && ok sample || bad "sample: $out $(cat "$WORK/sample.err")"
out2=$("$BIN" sample --checkpoint "$CK" --prompt "In the beginning" -n 20 --seed 3 2>/dev/null)
[ "$out" == "$out2" ] && ok "sample is deterministic for a seed" || bad "sample differs between runs with one seed"
check "sample reports prefill and decode speed on stderr" 'grep -qE "^prefill: [0-9]+ tokens in .* tokens/s\); decode: 19 tokens in .* ms/token\)" "$WORK/sample.err"'
check "sample reports the decode bound and the share of it reached" 'grep -qE "^decode bound: [0-9.]+ MB read per token \(weights [0-9.]+, KV cache [0-9.]+ at mean context [0-9]+\) at [0-9.]+ GB/s \(measured, [0-9]+ threads, [0-9.]+ MB working set\) = [0-9.]+ ms/token; decode ran at [0-9]+% of it" "$WORK/sample.err"'
check "sample reports the DRAM bound beside it" 'grep -qE "^DRAM bound: the same bytes at [0-9.]+ GB/s \(measured over [0-9]+ MB, beyond the caches\) = [0-9.]+ ms/token; decode ran at [0-9]+% of it" "$WORK/sample.err"'
"$BIN" sample --checkpoint "$CK" --prompt "In the beginning" -n 5 --seed 3 --quiet 2>"$WORK/sample_quiet.err" >/dev/null
check "sample --quiet prints no speed line" '[ $? -eq 0 ] && ! grep -q prefill "$WORK/sample_quiet.err"'

# bf16 weights (--weights bf16): the matrices rounded, decoding reads half the bytes; the decode bound
# counts 2 bytes for them, so its weights figure is below the fp32 one.
out=$("$BIN" sample --checkpoint "$CK" --prompt "In the beginning" -n 20 --seed 3 --weights bf16 2>"$WORK/sample_bf16.err")
[ $? -eq 0 ] && [ -n "$out" ] && ok "sample --weights bf16" || bad "sample --weights bf16: $out $(cat "$WORK/sample_bf16.err")"
w32=$(sed -nE 's/^decode bound: .*\(weights ([0-9.]+),.*/\1/p' "$WORK/sample.err")
w16=$(sed -nE 's/^decode bound: .*\(weights ([0-9.]+),.*/\1/p' "$WORK/sample_bf16.err")
check "the bf16 decode bound reads fewer weight bytes ($w16 against $w32 MB)" 'awk -v a="$w16" -v b="$w32" "BEGIN { exit !(a > 0 && a < 0.75 * b) }"'
out=$("$BIN" eval --checkpoint "$CK" --data "$WORK/data/val.bin" --weights bf16 2>&1)
grep -q "perplexity" <<<"$out" && ok "eval --weights bf16" || bad "eval --weights bf16: $out"
"$BIN" forward --checkpoint "$CK" --tokens "$WORK/ids.txt" --out "$WORK/logits_bf16.npy" --weights bf16 >/dev/null 2>&1 \
  && ok "forward --weights bf16" || bad "forward --weights bf16"
expect_error "unknown --weights" "--weights" "$BIN" sample --checkpoint "$CK" --prompt hi --weights fp16

printf '1 2 3 4 5 6\n' >"$WORK/seq.txt"
"$BIN" grads --checkpoint "$CK" --tokens "$WORK/seq.txt" --out "$WORK/g.safetensors" >/dev/null 2>&1 && ok grads || bad grads

# every residual kind through the whole tool: train (with a checkpoint), resume, eval, forward, sample, grads, info
for kind in "attnres --set residual.block_size=2" "attnres" "hyper --set residual.streams=2" "mhc"; do
  name=${kind%% *}
  dir="$WORK/res_${kind// /_}"
  dir=${dir//=/_}
  # shellcheck disable=SC2086  # $kind holds "kind --set key=value"
  if "$BIN" train "${common[@]}" --set "train.out_dir=\"$dir\"" --set train.steps=6 --set train.ckpt_every=3 \
       --set train.eval_every=3 --set residual.kind=$kind --quiet >"$WORK/res.log" 2>&1 \
     && "$BIN" train --resume "$dir/step_000003.safetensors" --quiet >>"$WORK/res.log" 2>&1 \
     && "$BIN" eval --checkpoint "$dir/model.safetensors" --data "$WORK/data/val.bin" --batches 2 2>&1 | grep -q perplexity \
     && "$BIN" forward --checkpoint "$dir/model.safetensors" --tokens "$WORK/ids.txt" --out "$dir/l.npy" >/dev/null 2>&1 \
     && "$BIN" sample --checkpoint "$dir/model.safetensors" --prompt "In the beginning" -n 5 --seed 1 >/dev/null 2>&1 \
     && "$BIN" grads --checkpoint "$dir/model.safetensors" --tokens "$WORK/seq.txt" --out "$dir/g.safetensors" >/dev/null 2>&1 \
     && "$BIN" info --preset tiny --set residual.kind=$kind | grep -q "of which residual ($name)"; then
    ok "residual.kind=$kind: train, resume, eval, forward, sample, grads, info"
  else
    bad "residual.kind=$kind: $(tail -3 "$WORK/res.log")"
  fi
done
expect_error "inactive residual key" "residual.streams" "$BIN" info --set residual.kind=attnres --set residual.streams=2

# resume continues from the step-10 checkpoint
"$BIN" train --resume "$WORK/run/step_000010.safetensors" --set train.steps=12 --quiet >"$WORK/resume.log" 2>&1 && ok resume || bad "resume: $(tail -3 "$WORK/resume.log")"

# Ctrl-C (SIGINT) mid-run: the step finishes, a checkpoint is written, the run can be resumed
"$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/int\"" --set train.steps=100000 --set train.warmup=1 >"$WORK/int.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -f "$WORK/int/metrics.jsonl" ] && [ "$(wc -l <"$WORK/int/metrics.jsonl")" -ge 3 ] && break
  sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 0 ] && grep -q "interrupted" "$WORK/int.log" && [ -f "$WORK/int/model.safetensors" ]; then
  ok "SIGINT writes a checkpoint and exits cleanly"
else
  bad "SIGINT: rc=$rc $(tail -3 "$WORK/int.log")"
fi
"$BIN" train --resume "$WORK/int/model.safetensors" --stop-after 1 --quiet >/dev/null 2>&1 && ok "resume after SIGINT" || bad "resume after SIGINT"

# SIGTERM stops the same way; a second signal ends the process at once (default action). A larger
# model (steps of a few hundred ms, a 60 MB checkpoint) keeps the run alive between the two signals.
big=(--set model.d_model=256 --set model.n_layer=4 --set model.seq_len=128 --set train.batch_size=16)
"$BIN" train "${common[@]}" "${big[@]}" --set "train.out_dir=\"$WORK/term\"" --set train.steps=100000 --set train.warmup=1 >"$WORK/term.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$WORK/term/metrics.jsonl" ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM writes a checkpoint and exits cleanly" '[ $rc -eq 0 ] && grep -q "interrupted (signal 15)" "$WORK/term.log" && [ -f "$WORK/term/model.safetensors" ]'
"$BIN" train "${common[@]}" "${big[@]}" --set "train.out_dir=\"$WORK/int2\"" --set train.steps=100000 --set train.warmup=1 >"$WORK/int2.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$WORK/int2/metrics.jsonl" ] && break; sleep 0.1; done
kill -INT $pid
# The second signal, repeated every 50 ms while the run lives (two signals pending at once count as
# one): the first one handled after the stop request ends the process.
for _ in $(seq 1 200); do
  sleep 0.05
  grep -qs "^State:[[:space:]]*[RSD]" /proc/$pid/status || break  # gone, or a zombie awaiting `wait`
  kill -INT $pid 2>/dev/null || break
done
wait $pid
rc=$?
check "a second SIGINT ends the run at once (killed by SIGINT, no 'done')" '[ $rc -eq 130 ] && ! grep -q "^done:" "$WORK/int2.log"'

# bad input: clear errors that name the culprit
expect_error "missing config file" "nope.toml" "$BIN" train --config "$WORK/nope.toml"
printf 'model.n_layers = 3\n' >"$WORK/bad.toml"
expect_error "unknown key" "model.n_layers" "$BIN" train --config "$WORK/bad.toml"
expect_error "bad --set" "model.d_model" "$BIN" info --set model.d_model=abc
expect_error "missing data" "train.bin" "$BIN" train --preset tiny --set "data.dir=\"$WORK/none\"" --set "train.out_dir=\"$WORK/r2\""
head -c 3000 "$CK" >"$WORK/trunc.safetensors"
expect_error "truncated checkpoint" "trunc.safetensors" "$BIN" eval --checkpoint "$WORK/trunc.safetensors" --data "$WORK/data/val.bin"
printf 'not a shard at all, just text that is long enough to have a header maybe' >"$WORK/bad.bin"
expect_error "bad shard" "bad.bin" "$BIN" eval --checkpoint "$CK" --data "$WORK/bad.bin"
printf '1 2 x\n' >"$WORK/badids.txt"
expect_error "bad token file" "badids.txt" "$BIN" forward --checkpoint "$CK" --tokens "$WORK/badids.txt" --out "$WORK/x.npy"
printf '1 2 500\n' >"$WORK/bigids.txt"
expect_error "token out of vocabulary" "vocabulary" "$BIN" forward --checkpoint "$CK" --tokens "$WORK/bigids.txt" --out "$WORK/x.npy"
expect_error "missing checkpoint" "missing.safetensors" "$BIN" sample --checkpoint "$WORK/missing.safetensors" --prompt hi
"$BIN" init "${common[@]}" --out "$WORK/init.safetensors" >/dev/null 2>&1 && ok init || bad init
expect_error "resume from weights only" "optimizer state" "$BIN" train --resume "$WORK/init.safetensors"
expect_error "not a checkpoint" "g.safetensors" "$BIN" eval --checkpoint "$WORK/g.safetensors" --data "$WORK/data/val.bin"

# residual.kind = dar (docs/mechanisms.md §6): train → eval → forward → sample → grads → resume → info
dar=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"" --set "train.out_dir=\"$WORK/dar\""
     --set residual.kind=dar --set dar.routing=cross_v --set dar.sep_v=true)
if "$BIN" train "${dar[@]}" --set train.steps=6 --set train.ckpt_every=3 --set train.eval_every=3 >"$WORK/dar.log" 2>&1 \
   && [ -f "$WORK/dar/model.safetensors" ] && grep -q "val loss" "$WORK/dar.log" && grep -q 'dar.routing = "cross_v"' "$WORK/dar.log"; then
  ok "dar: train"
else
  bad "dar: train: $(tail -5 "$WORK/dar.log")"
fi
DK="$WORK/dar/model.safetensors"
out=$("$BIN" eval --checkpoint "$DK" --data "$WORK/data/val.bin" 2>&1)
grep -q "perplexity" <<<"$out" && ok "dar: eval" || bad "dar: eval: $out"
"$BIN" forward --checkpoint "$DK" --tokens "$WORK/ids.txt" --out "$WORK/dar_logits.npy" >/dev/null 2>&1 \
  && [ "$(stat -c %s "$WORK/dar_logits.npy")" -eq $((128 + 2 * 5 * 400 * 4)) ] && ok "dar: forward" || bad "dar: forward"
out=$("$BIN" sample --checkpoint "$DK" --prompt "In the beginning" -n 10 --seed 3 2>&1)
[ $? -eq 0 ] && [ -n "$out" ] && ok "dar: sample" || bad "dar: sample: $out"
"$BIN" grads --checkpoint "$DK" --tokens "$WORK/seq.txt" --out "$WORK/dar_g.safetensors" >/dev/null 2>&1 && ok "dar: grads" || bad "dar: grads"
"$BIN" train --resume "$WORK/dar/step_000003.safetensors" --set train.steps=4 --quiet >"$WORK/dar_resume.log" 2>&1 \
  && ok "dar: resume" || bad "dar: resume: $(tail -3 "$WORK/dar_resume.log")"
out=$("$BIN" info --preset tiny --set residual.kind=dar --set residual.block_size=1 2>&1)
grep -q "of which residual (dar)" <<<"$out" && grep -q "histories" <<<"$out" && ok "dar: info" || bad "dar: info: $out"
expect_error "dar key without dar" "dar.routing" "$BIN" info --preset tiny --set dar.routing=self_kv
expect_error "bad dar routing" "dar.routing" "$BIN" info --preset tiny --set residual.kind=dar --set dar.routing=sideways

# The attention kernel set: named by info, forced by ATTNLAB_KERNELS, a bad value refused by name.
out=$(ATTNLAB_KERNELS=baseline "$BIN" info --preset tiny 2>&1)
grep -q "attention kernels: baseline" <<<"$out" && ok "info: forced kernel set" || bad "info: forced kernel set: $out"
expect_error "unknown kernel set" "unknown attention kernel set 'sse9'" env ATTNLAB_KERNELS=sse9 "$BIN" info --preset tiny
# On an x86-64 CPU with AVX2 the default is a wide set, named as ATTNLAB_KERNELS spells it.
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  out=$("$BIN" info --preset tiny 2>&1)
  grep -Eq "attention kernels: (avx2|avx512), " <<<"$out" && ok "info: default kernel set" || bad "info: default kernel set: $out"
  out=$(ATTNLAB_KERNELS=avx2 "$BIN" info --preset tiny 2>&1)
  grep -q "attention kernels: avx2, 8 float lanes" <<<"$out" && ok "info: avx2 kernel set" || bad "info: avx2 kernel set: $out"
fi

# Every attention option trains, checkpoints, resumes, evaluates, samples (KV cache) and runs
# forward: XSA (on, gated on a layer subset), GOAT (with a sink and XSA; on one layer with ALiBi
# elsewhere), ALiBi. (tiny: d = 64, 4 heads, D_h = 16 >= 2R + 2 for GOAT's defaults.)
for opts in "attn.xsa=on" "attn.xsa=gated attn.xsa.layers=[1] attn.pos=alibi" \
            "attn.pos=goat attn.sink=learned attn.xsa=gated" \
            "attn.pos=goat attn.goat.layers=[0] attn.goat.other_pos=alibi attn.goat.init=uniform"; do
  sets=()
  for kv in $opts; do sets+=(--set "$kv"); done
  dir="$WORK/opt_$(tr -c 'a-z0-9' '_' <<<"$opts")"
  common_opt=(--preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"" --set "train.out_dir=\"$dir\"" "${sets[@]}")
  if "$BIN" train "${common_opt[@]}" --set train.steps=6 --set train.ckpt_every=3 --set train.eval_every=3 --quiet >"$dir.log" 2>&1 \
     && "$BIN" train --resume "$dir/step_000003.safetensors" --set train.steps=5 --quiet >>"$dir.log" 2>&1 \
     && "$BIN" eval --checkpoint "$dir/model.safetensors" --data "$WORK/data/val.bin" >>"$dir.log" 2>&1 \
     && "$BIN" sample --checkpoint "$dir/model.safetensors" --prompt "In the beginning" -n 8 --seed 1 >>"$dir.log" 2>&1 \
     && "$BIN" forward --checkpoint "$dir/model.safetensors" --tokens "$WORK/ids.txt" --out "$dir/l.npy" >>"$dir.log" 2>&1; then
    ok "train/resume/eval/sample/forward with $opts"
  else
    bad "$opts: $(tail -3 "$dir.log")"
  fi
done
expect_error "GOAT on too narrow heads" "attn.goat.pos_rank" "$BIN" info --preset tiny --set attn.pos=goat --set model.n_head=8
expect_error "inactive GOAT key" "attn.goat.init" "$BIN" info --preset tiny --set attn.goat.init=uniform

finish
