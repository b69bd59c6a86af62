#!/usr/bin/env bash
# DNA as a second domain with the real binary (docs/data.md, "DNA"): prepare --dna on a generated
# gzip FASTA, then the ordinary train and eval --lengths on the shards; bad input fails cleanly.
# Usage: test_dna.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

# A deterministic pseudo-genome: 2 records of 6000 bases, 60 per line.
awk 'BEGIN { s = 12345; split("A C G T", b, " ");
  for (r = 1; r <= 2; r++) { print ">rec" r; line = "";
    for (i = 0; i < 6000; i++) { s = (s * 1103515245 + 12345) % 2147483648; line = line b[int(s / 65536) % 4 + 1];
      if (length(line) == 60) { print line; line = "" } } } }' >"$WORK/g.fa"
gzip -k "$WORK/g.fa"
if "$BIN" prepare --dna "$WORK/g.fa.gz" --out "$WORK/dna" >"$WORK/prep.log" 2>&1 && grep -q '"type": "nucleotide"' "$WORK/dna/prepare.json" \
   && grep -q "2 records, 12000 bases" "$WORK/prep.log"; then
  ok "prepare --dna (gzip)"
else
  bad "prepare --dna: $(cat "$WORK/prep.log")"
fi
"$BIN" prepare --dna "$WORK/g.fa" --out "$WORK/dna_plain" >/dev/null 2>&1 && cmp -s "$WORK/dna/train.bin" "$WORK/dna_plain/train.bin" \
  && ok "plain and gzip FASTA give the same shards" || bad "plain vs gzip shards differ"
if "$BIN" train --preset tiny --set model.vocab_size=8 --set "data.dir=\"$WORK/dna\"" --set "train.out_dir=\"$WORK/run\"" \
     --set train.steps=4 --set train.eval_every=2 --quiet >"$WORK/train.log" 2>&1 \
   && "$BIN" eval --checkpoint "$WORK/run/model.safetensors" --data "$WORK/dna/val.bin" --lengths 1,2 --tokens 64 | grep -q "loss per position"; then
  ok "train and eval --lengths on DNA shards"
else
  bad "train/eval on DNA: $(tail -3 "$WORK/train.log")"
fi
err=$("$BIN" prepare --dna "$WORK/missing.fa" --out "$WORK/x" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "missing.fa" <<<"$err" && ok "missing FASTA is a clean error" || bad "missing FASTA: rc=$rc $err"
err=$("$BIN" prepare --dna "$WORK/g.fa" --input "$WORK/g.fa" --out "$WORK/x" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "not both" <<<"$err" && ok "--dna with --input is an error" || bad "--dna and --input: rc=$rc $err"

finish
