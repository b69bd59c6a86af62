#!/usr/bin/env bash
# End-to-end `attnlab analyze` (docs/analysis.md): prepare the committed corpus, train tiny models
# for a few steps (XSA, GOAT with a sink, Block AttnRes, DAR, mHC), analyze each and check the JSON's
# keys and, when Debian's python3-matplotlib is installed, the PNGs; bad input fails cleanly.
# Usage: test_analyze.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
if "$BIN" prepare "${inputs[@]}" --out "$WORK/data" --vocab 400 >"$WORK/prepare.log" 2>&1 && [ -s "$WORK/data/val.bin" ]; then
  ok prepare
else
  bad "prepare: $(tail -5 "$WORK/prepare.log")"
fi

have_mpl=0
/usr/bin/python3 -c "import matplotlib" 2>/dev/null && have_mpl=1
# has_keys FILE KEY... : every dotted key path exists in the JSON document (null allowed)
has_keys() {
  local file=$1
  shift
  if [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 - "$file" "$@" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    node = doc
    for part in path.split("."):
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            print("missing key: " + path)
            sys.exit(1)
EOF
  else
    for k in "$@"; do grep -q "\"${k##*.}\"" "$file" || { echo "missing key: $k"; return 1; }; done
  fi
}

# name | settings | keys that must exist | PNGs that must exist (with matplotlib)
run_case() {
  local name=$1 sets=$2 keys=$3 pngs=$4
  local dir="$WORK/$name" args=()
  for kv in $sets; do args+=(--set "$kv"); done
  if ! "$BIN" train --preset tiny --set model.vocab_size=400 --set "data.dir=\"$WORK/data\"" --set "train.out_dir=\"$dir\"" \
       --set train.steps=4 --set train.eval_every=0 "${args[@]}" --quiet >"$dir.log" 2>&1; then
    bad "$name: train: $(tail -3 "$dir.log")"
    return
  fi
  if ! "$BIN" analyze --checkpoint "$dir/model.safetensors" --data "$WORK/data/val.bin" --sequences 8 --bootstrap 20 \
       --out "$dir/analysis" >"$dir.analyze.log" 2>&1; then
    bad "$name: analyze: $(tail -5 "$dir.analyze.log")"
    return
  fi
  # shellcheck disable=SC2086  # $keys is a list of key paths
  if out=$(has_keys "$dir/analysis/analysis.json" schema version loss attention.layers.0.cos_yv.mean attention.layers.1.self.heads \
                    attention.layers.0.vsim.std goat depth streams cka rescue $keys); then
    ok "$name: analysis.json has its keys"
  else
    bad "$name: $out"
  fi
  ls "$dir/analysis" | grep -q '\.tmp' && bad "$name: a temporary file was left" || true
  if [ $have_mpl -eq 1 ]; then
    local missing=""
    for p in attention_similarity.png $pngs; do [ -s "$dir/analysis/$p" ] || missing="$missing $p"; done
    [ -z "$missing" ] && ok "$name: plots" || bad "$name: missing plots:$missing ($(tail -3 "$dir.analyze.log"))"
  fi
}

run_case xsa "attn.pos=rope attn.xsa=on" "attention.layers.0.cos_zv.mean attention.layers.0.max_abs_cos_zv attention.layers.1.max_abs_zv_rel" ""
run_case goat "attn.pos=goat attn.sink=learned" \
  "goat.layers.0.kv_heads.0.rel goat.layers.1.kv_heads.3.sink_margin goat.layers.0.u goat.content_vs_sink.p_recent" \
  "goat_prior.png goat_profile.png goat_slope.png goat_content_vs_sink.png"
run_case attnres "residual.kind=attnres residual.block_size=2" \
  "depth.streams.0.rows.4.weights depth.streams.0.rows.0.entropy_norm cka.within_stream" "depth_maps.png cka.png"
run_case dar "residual.kind=dar" \
  "depth.streams.1.rows.2.weights cka.entries_across_streams cka.reads_across_streams rescue.RG.0.se rescue.imbalance rescue.by_depth.4.RG" \
  "depth_maps.png cka.png rescue_gain.png"
run_case mhc "residual.kind=mhc" \
  "streams.sublayers.3.res streams.composite_gain.by_depth cka.streams.0.matrix rescue.RG_when_patched.3.se rescue.by_depth.0.L_patch" \
  "stream_maps.png composite_gain.png cka.png rescue_gain.png"

# the JSON alone, and the note when the plots cannot be drawn
out=$("$BIN" analyze --checkpoint "$WORK/xsa/model.safetensors" --data "$WORK/data/val.bin" --sequences 2 --out "$WORK/np" \
      --no-plots 2>&1)
[ -s "$WORK/np/analysis.json" ] && ! ls "$WORK/np" | grep -q png && ok "--no-plots writes the JSON only" || bad "--no-plots: $out"
out=$("$BIN" analyze --checkpoint "$WORK/xsa/model.safetensors" --data "$WORK/data/val.bin" --sequences 2 --out "$WORK/ns" \
      --plot-script "$WORK/nowhere.py" 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -s "$WORK/ns/analysis.json" ] && grep -q "^note:" <<<"$out" && ok "a failing plot step leaves the JSON and a note" \
  || bad "plot failure: rc=$rc $out"

# bad input
err=$("$BIN" analyze --checkpoint "$WORK/missing.safetensors" --data "$WORK/data/val.bin" --out "$WORK/x" 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -q "missing.safetensors" <<<"$err" && ok "missing checkpoint" || bad "missing checkpoint: $err"
err=$("$BIN" analyze --checkpoint "$WORK/xsa/model.safetensors" --data "$WORK/nope.bin" --out "$WORK/x" 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -q "nope.bin" <<<"$err" && ok "missing data" || bad "missing data: $err"

finish
