#!/usr/bin/env bash
# End-to-end `attnlab compare` (docs/compare.md) on the committed corpus: a tiny grid (2 variants ×
# 2 seeds, 6 steps of the tiny preset, a length sweep at 1× and 2× and a 3-step passkey task per
# run) stopped after its first run, resumed and stopped again mid-way
# through the second run, then resumed to the end. The finished run is not retrained (its result.json
# keeps its mtime, the log says skipped); the run stopped mid-way resumes from its checkpoint and ends
# with exactly the validation loss of the same grid run without interruption. Then the documents and
# bad input, and a resume refused after the data directory was prepared again with other contents.
# Usage: test_compare.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
"$BIN" prepare "${inputs[@]}" --out "$WORK/data" --vocab 400 >"$WORK/prepare.log" 2>&1
check prepare '[ -s "$WORK/data/val.bin" ]'

cat >"$WORK/grid.toml" <<TOML
# a tiny grid for the test
name = "test"
preset = "tiny"
set = ["data.dir=$WORK/data", "model.vocab_size=400", "train.eval_every=3"]
steps = 6
seeds = [1, 2]
baseline = "rope"
lengths = "1,2"
length_tokens = 512

[tasks.passkey]
set = ["model.seq_len=128", "train.batch_size=2"]
steps = 3
lengths = "1,2"
samples = 4

[variants.rope]
set = ["attn.pos=rope"]

[variants.xsa]
set = ["attn.pos=rope", "attn.xsa=on"]
TOML

G="$WORK/grid.toml"
O="$WORK/out"
"$BIN" compare "$G" --out "$O" --stop-after-runs 1 >"$WORK/a.log" 2>&1
rc=$?
check "stop after the first run (exit 3)" '[ $rc = 3 ]'
check "first run finished" '[ -s "$O/runs/rope_s1/result.json" ]'
check "second run not started" '[ ! -e "$O/runs/xsa_s1" ]'
check "no results.json yet" '[ ! -e "$O/results.json" ]'
"$BIN" compare "$G" --out "$O" --summarize --quiet >"$WORK/sum.log" 2>&1
check "--summarize writes the documents of the finished runs, marked partial" '[ $? = 0 ] && grep -q "Partial.*1 of 4 runs" "$O/results.md" && grep -q "id=\"partial\"" "$O/report.html"'
rm -f "$O/results.json" "$O/results.md" "$O/report.html"
m1=$(stat -c %y "$O/runs/rope_s1/result.json" 2>/dev/null)
"$BIN" compare "$G" --out "$O" >"$WORK/refuse.log" 2>&1
rc=$?
check "a second compare into the same --out without --resume is refused" '[ $rc = 1 ] && grep -q -- "--resume" "$WORK/refuse.log"'
sleep 1
"$BIN" compare "$G" --out "$O" --resume --stop-after-steps 4 >"$WORK/b.log" 2>&1
rc=$?
check "stop mid-way through the second run (exit 3)" '[ $rc = 3 ]'
check "log says the first run is skipped" 'grep -q "rope_s1: skipped" "$WORK/b.log"'
check "second run left a checkpoint at step 4, no result" '[ -s "$O/runs/xsa_s1/model.safetensors" ] && [ ! -e "$O/runs/xsa_s1/result.json" ]'
# An edited grid must not continue or reuse runs made with the old one.
sed 's/^steps = 6/steps = 7/' "$G" >"$WORK/edited.toml"
"$BIN" compare "$WORK/edited.toml" --out "$O" --resume >"$WORK/edited.log" 2>&1
check "a changed grid is refused on resume, naming the key" '[ $? = 1 ] && grep -q "another configuration .*train.steps" "$WORK/edited.log"'
sed 's/^length_tokens = 512/length_tokens = 256/' "$G" >"$WORK/edited2.toml"
"$BIN" compare "$WORK/edited2.toml" --out "$O" --resume >"$WORK/edited2.log" 2>&1
check "changed evaluations are refused for a finished run" '[ $? = 1 ] && grep -q "rope_s1/result.json was evaluated with other grid settings" "$WORK/edited2.log"'
"$BIN" compare "$G" --out "$O" --resume >"$WORK/c.log" 2>&1
rc=$?
check "resume to the end (exit 0)" '[ $rc = 0 ]'
check "log says the first run is skipped" 'grep -q "rope_s1: skipped" "$WORK/c.log"'
check "a grid without [primary] prints a hint, and results.md has no new section" 'grep -q "^hint: the grid names no primary comparisons" "$WORK/c.log" && ! grep -q "Primary comparisons" "$O/results.md"'
check "the second run resumed from its checkpoint at step 4" 'grep -q "xsa_s1: resuming from .*(step 4)" "$WORK/c.log"'
m2=$(stat -c %y "$O/runs/rope_s1/result.json" 2>/dev/null)
check "the first run was not retrained (result.json mtime unchanged)" '[ "$m1" = "$m2" ]'
check "progress display shows run i of N and an ETA" 'grep -q "\[run 3/4\] rope_s2: step .*/6 .*run ETA .*grid ETA" "$WORK/c.log"'
for f in results.json results.md report.html runs/xsa_s2/result.json; do
  check "wrote $f" '[ -s "$O/$f" ]'
done

# The same grid without interruption: identical final losses (exact resume).
"$BIN" compare "$G" --out "$WORK/straight" --quiet >"$WORK/d.log" 2>&1
check "uninterrupted grid runs" '[ $? = 0 ] && [ -s "$WORK/straight/results.json" ]'

if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - "$O/results.json" "$WORK/straight/results.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
assert r["schema"] == "attnlab.compare" and r["version"] == 1, r["schema"]
assert len(r["runs"]) == 4, len(r["runs"])
for run in r["runs"]:
    for k in ("variant", "seed", "steps", "tokens", "params", "val_loss", "val_tokens", "tokens_per_s", "train_seconds", "curve"):
        assert k in run, k
    assert [e[0] for e in run["curve"]["train"]] == [1, 2, 3, 4, 5, 6], run["curve"]["train"]
    assert [e[0] for e in run["curve"]["val"]] == [3, 6], run["curve"]["val"]
    assert run["tokens"] == 6 * 4 * 32 and run["tokens_per_s"] > 0 and run["params"] > 0
    L = run["lengths"]
    assert L["multiple"] == [1, 2] and all(math.isfinite(x) for x in L["loss"]), L
    assert L["loss_beyond_train"][0] is None and math.isfinite(L["loss_beyond_train"][1]), L
    pk = run["tasks"]["passkey"]
    assert pk["steps"] == 3 and pk["seq_len"] == 128 and pk["multiple"] == [1, 2], pk
    assert all(0 <= a <= 1 for a in pk["token_accuracy"]) and all(x < 0 for x in pk["answer_logprob"]), pk
    assert math.isfinite(pk["val_loss"]), pk
    assert pk["train_seconds"] > 0, pk
def no_clock(tasks):  # a task's train_seconds is wall-clock time, like a run's own
    return {n: {k: v for k, v in t.items() if k != "train_seconds"} for n, t in tasks.items()}
a = {x["id"]: x for x in r["runs"]}; b = {x["id"]: x for x in s["runs"]}
for k in a:
    assert a[k]["val_loss"] == b[k]["val_loss"], (k, a[k]["val_loss"], b[k]["val_loss"])
    assert a[k]["curve"] == b[k]["curve"], k
    assert a[k]["lengths"] == b[k]["lengths"] and no_clock(a[k]["tasks"]) == no_clock(b[k]["tasks"]), k
summ = {x["variant"]: x for x in r["summary"]}
assert summ["rope"]["vs_baseline"] is None
v = summ["xsa"]; vals = v["val_loss"]["values"]
assert len(vals) == 2 and abs(v["val_loss"]["mean"] - sum(vals) / 2) < 1e-12
b = v["vs_baseline"]
assert abs(b["diff"] - (v["val_loss"]["mean"] - summ["rope"]["val_loss"]["mean"])) < 1e-12
assert b["ci95"][0] < b["diff"] < b["ci95"][1] and 0 <= b["p"] <= 1
print("results.json checks passed")
PY
  check "results.json: schema, curves, summary, exact resume" '[ $? = 0 ]'
fi
check "results.md has the table" 'grep -q "| xsa |" "$O/results.md" && grep -q "Δ vs baseline" "$O/results.md"'
check "report.html is self-contained" '! grep -qiE "<script|https?://[^\"]*\.(js|css)|<link " "$O/report.html" && grep -q "fig-val-loss" "$O/report.html"'
"$BIN" report "$O/results.json" --out "$WORK/r.html" >"$WORK/report.log" 2>&1
check "attnlab report" '[ $? = 0 ] && cmp -s "$WORK/r.html" "$O/report.html"'

# Data provenance (docs/compare.md, "Provenance"): every run records the data it used (bytes and
# CRC-32 of the shards and the tokenizer) and the machine; after the data directory is prepared
# again with other contents, a resume is refused before anything trains, naming every run made on
# the old data: finished ones (result.json) and ones stopped mid-way (provenance.json).
check "every run records its data and machine" 'grep -q "\"crc32\"" "$O/runs/rope_s1/result.json" && grep -q "\"cpu_isa\"" "$O/runs/xsa_s2/result.json" && grep -q "\"crc32\"" "$O/runs/rope_s2/provenance.json"'
"$BIN" compare "$G" --out "$WORK/half" --stop-after-steps 2 --quiet >"$WORK/half.log" 2>&1
check "a run stopped mid-way records its data before it trains" '[ $? = 3 ] && grep -q "\"val\"" "$WORK/half/runs/rope_s1/provenance.json"'
m3=$(stat -c %y "$O/runs/rope_s1/result.json" 2>/dev/null)
"$BIN" prepare --input "$SRC/tests/data/web_genesis_1-30.txt" --out "$WORK/data" --vocab 400 >"$WORK/reprepare.log" 2>&1
check "the data directory prepared again with other contents" '[ $? = 0 ] && [ -s "$WORK/data/val.bin" ]'
"$BIN" compare "$G" --out "$O" --resume >"$WORK/mix.log" 2>&1
rc=$?
check "a resume on other data is refused, naming the finished runs and the difference" '[ $rc = 1 ] && grep -q "made on other data" "$WORK/mix.log" && grep -q "runs/rope_s1/result.json: train: .* bytes crc32 .*, now " "$WORK/mix.log" && grep -q "runs/xsa_s2/result.json" "$WORK/mix.log"'
check "nothing was retrained or rewritten" '[ "$m3" = "$(stat -c %y "$O/runs/rope_s1/result.json")" ] && ! grep -q "step 1/" "$WORK/mix.log"'
"$BIN" compare "$G" --out "$WORK/half" --resume >"$WORK/mix2.log" 2>&1
check "a run stopped mid-way on the old data is refused too" '[ $? = 1 ] && grep -q "runs/rope_s1/provenance.json: " "$WORK/mix2.log"'
"$BIN" compare "$G" --out "$O" --summarize --quiet >"$WORK/mix3.log" 2>&1
check "--summarize refuses to average runs made on other data" '[ $? = 1 ] && grep -q "made on other data" "$WORK/mix3.log"'

# Primary comparisons and a budget sweep (docs/compare.md): the baseline also trained at 0.5× and
# 2× the steps (evaluated on the whole validation shard only), then each variant's gain in compute.
cat >"$WORK/budget.toml" <<TOML
name = "budget"
preset = "tiny"
set = ["data.dir=$WORK/data", "model.vocab_size=400", "train.eval_every=2"]
steps = 4
seeds = [1, 2]
lengths = "1,2"
length_tokens = 256

[variants.rope]
set = ["attn.pos=rope"]

[variants.xsa]
set = ["attn.pos=rope", "attn.xsa=on"]

[primary]
comparisons = ["xsa < rope"]

[budget]
factors = [0.5, 2]
TOML
"$BIN" compare "$WORK/budget.toml" --out "$WORK/budget" >"$WORK/budget.log" 2>&1
check "a grid with [primary] and [budget] runs (8 runs: 4 of the grid, 4 of the budget)" '[ $? = 0 ] && grep -q "\[run 8/8\] rope@2x_s2: done" "$WORK/budget.log"'
check "budget runs are evaluated on the whole shard only" '[ -s "$WORK/budget/runs/rope@0.5x_s1/result.json" ] && [ ! -e "$WORK/budget/runs/rope@0.5x_s1/lengths.json" ] && [ -e "$WORK/budget/runs/rope_s1/lengths.json" ]'
check "no hint for a grid with [primary]" '! grep -q "^hint:" "$WORK/budget.log"'
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 - "$WORK/budget/results.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["grid"]["primary"]["comparisons"][0]["text"] == "xsa < rope", r["grid"]["primary"]
assert r["grid"]["budget"] == {"variant": "rope", "factors": [0.5, 2]}, r["grid"]["budget"]
runs = {x["id"]: x for x in r["runs"]}
assert runs["rope@2x_s1"]["steps"] == 8 and runs["rope@2x_s1"]["budget_factor"] == 2 and runs["rope@0.5x_s2"]["steps"] == 2
assert runs["rope@2x_s1"]["lengths"] is None and runs["rope_s1"]["lengths"] is not None
summ = {x["variant"]: x for x in r["summary"]}
assert summ["rope"]["n"] == 2, summ["rope"]  # the budget runs are not rope's seeds
c = r["primary_comparisons"]["comparisons"][0]
assert c["test"] == "paired" and c["n_paired"] == 2 and c["direction"] == "<", c
d = [runs["xsa_s%d" % s]["val_loss"] - runs["rope_s%d" % s]["val_loss"] for s in (1, 2)]
assert abs(c["diff"] - sum(d) / 2) < 1e-12
# Exact sign-flip, one-sided "<": the share of the 4 sign patterns whose sum is <= the observed one.
sums = [a * d[0] + b * d[1] for a in (1, -1) for b in (1, -1)]
assert c["sign_flip"]["p"] == sum(x <= sum(d) + 1e-12 for x in sums) / 4, c["sign_flip"]
assert c["sign_flip"]["p_min"] == 0.25 and c["p_holm"] == c["p"], c
g = r["compute_gains"]
assert [p["factor"] for p in g["points"]] == [0.5, 1, 2] and [p["n"] for p in g["points"]] == [2, 2, 2], g["points"]
assert g["points"][2]["tokens"] == 2 * r["tokens_per_run"], g["points"]
assert g["fit"] is not None and g["seeds"] == [1, 2], g
x = [math.log(p["factor"]) for p in g["points"]]; y = [p["mean"] for p in g["points"]]
mx, my = sum(x) / 3, sum(y) / 3
slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
assert abs(g["fit"]["slope"] - slope) < 1e-9, (g["fit"], slope)
if slope < 0:
    ga = g["gains"][0]
    assert ga["variant"] == "xsa" and ga["n"] == 2
    lv = summ["xsa"]["val_loss"]["mean"]
    assert abs(ga["ln_factor"] - (lv - g["fit"]["intercept"]) / slope) < 1e-9, ga
    assert ga["extrapolated"] == (not (math.log(0.5) <= ga["ln_factor"] <= math.log(2))), ga
print("primary comparisons and gains checks passed")
PY
  check "results.json: primary comparisons, budget runs, gains in compute" '[ $? = 0 ]'
fi
check "results.md has the primary comparisons and the gains in compute" 'grep -q "## Primary comparisons" "$WORK/budget/results.md" && grep -q "| xsa < rope | paired (2) |" "$WORK/budget/results.md" && grep -q "## Gains in compute" "$WORK/budget/results.md" && grep -q "^| 2× | " "$WORK/budget/results.md"'
check "report.html has the primary and budget tables" 'grep -q "id=\"primary-table\"" "$WORK/budget/report.html" && grep -q "id=\"budget-table\"" "$WORK/budget/report.html"'
"$BIN" report "$WORK/budget/results.json" --out "$WORK/budget_r.html" >/dev/null 2>&1
check "attnlab report recomputes the same page" 'cmp -s "$WORK/budget_r.html" "$WORK/budget/report.html"'
printf '[variants.a]\nset = ["attn.pos=rope"]\n[variants.b]\nset = ["attn.pos=alibi"]\n[primary]\ncomparisons = ["a < b", "b vs c"]\n' >"$WORK/bad6.toml"
"$BIN" compare "$WORK/bad6.toml" --out "$WORK/bad6" >"$WORK/bad6.log" 2>&1
check "a primary comparison naming an unknown variant is an error naming the line" '[ $? = 1 ] && grep -q "bad6.toml:6: primary.comparisons: \"b vs c\": .c. is not a variant (variants: a, b)" "$WORK/bad6.log"'

# Bad input fails cleanly, naming the file and line.
printf 'steps = 3\n[variants.a]\nset = ["attn.pos=rope"]\nbogus = 1\n' >"$WORK/bad.toml"
"$BIN" compare "$WORK/bad.toml" --out "$WORK/bad" >"$WORK/bad.log" 2>&1
check "unknown grid key is an error naming the line" '[ $? = 1 ] && grep -q "bad.toml:4" "$WORK/bad.log"'
printf 'baseline = "nope"\n[variants.a]\nset = ["attn.pos=rope"]\n' >"$WORK/bad2.toml"
"$BIN" compare "$WORK/bad2.toml" --out "$WORK/bad2" >"$WORK/bad2.log" 2>&1
check "unknown baseline is an error" '[ $? = 1 ] && grep -q "baseline .nope. is not a variant" "$WORK/bad2.log"'

printf 'steps = 0\n[variants.a]\nset = ["attn.pos=rope"]\n' >"$WORK/bad3.toml"
"$BIN" compare "$WORK/bad3.toml" --out "$WORK/bad3" >"$WORK/bad3.log" 2>&1
check "steps = 0 is an error (it ran the preset's steps)" '[ $? = 1 ] && grep -q "bad3.toml:1: steps = 0" "$WORK/bad3.log"'
printf 'seeds = [1]\nseeds = [2]\n[variants.a]\nset = ["attn.pos=rope"]\n' >"$WORK/bad4.toml"
"$BIN" compare "$WORK/bad4.toml" --out "$WORK/bad4" >"$WORK/bad4.log" 2>&1
check "a grid key given twice is an error naming both lines" '[ $? = 1 ] && grep -q "bad4.toml:2: seeds is given a second time (first at .*bad4.toml:1)" "$WORK/bad4.log"'
printf '[variants.a]\nset = ["attn.pos=rope", "model.n_layer=2", "model.n_layer=3"]\n' >"$WORK/bad5.toml"
"$BIN" compare "$WORK/bad5.toml" --out "$WORK/bad5" >"$WORK/bad5.log" 2>&1
check "a set list giving a key twice is an error" '[ $? = 1 ] && grep -q "bad5.toml:2: variants.a.set gives model.n_layer twice" "$WORK/bad5.log"'
sed -e '0,/^lengths = "1,2"$/! s/^lengths = "1,2"$/lengths = "1,100000"/' "$G" >"$WORK/huge.toml"  # the task's lengths
"$BIN" compare "$WORK/huge.toml" --out "$WORK/huge" >"$WORK/huge.log" 2>&1
check "an evaluation length beyond this machine's memory is refused before any training" '[ $? = 1 ] && grep -q "\[tasks.passkey\] lengths = \"1,100000\": evaluating at 12800000 tokens needs .* GB (the KV cache" "$WORK/huge.log" && [ ! -e "$WORK/huge/runs/rope_s1/model.safetensors" ]'
printf 'preset = "tiny"\n[variants.small]\nset = ["attn.pos=rope"]\n[variants.huge]\nset = ["model.d_model=16384", "model.n_layer=64"]\n' >"$WORK/big.toml"
"$BIN" compare "$WORK/big.toml" --out "$WORK/big" >"$WORK/big.log" 2>&1
check "a cell too large for this machine is refused before the cells before it train" '[ $? = 1 ] && grep -q "variant huge: training this model needs at least .* GB" "$WORK/big.log" && [ ! -e "$WORK/big/runs/small_s1337/model.safetensors" ]'
# A task the run's model is too short for fails before anything trains (it failed after the first
# run's language model had trained).
sed -e 's/^set = \["model.seq_len=128", "train.batch_size=2"\]/set = ["train.batch_size=2"]/' "$G" >"$WORK/short.toml"
"$BIN" compare "$WORK/short.toml" --out "$WORK/short" >"$WORK/short.log" 2>&1
check "a task needing a longer seq_len fails before any training, saying what to set" '[ $? = 1 ] && grep -q "grid task passkey (variant rope): .*model.seq_len must be at least 67 (it is 32)" "$WORK/short.log" && [ ! -e "$WORK/short/runs/rope_s1/model.safetensors" ]'

# A run whose checkpoints are all unreadable: compare says what to delete (the trainer's advice,
# --force, is not an option of compare).
"$BIN" compare "$G" --out "$WORK/torn" --stop-after-steps 2 --quiet >/dev/null 2>&1
for f in "$WORK"/torn/runs/rope_s1/*.safetensors; do head -c 10 "$f" >"$f.cut" && mv "$f.cut" "$f"; done
"$BIN" compare "$G" --out "$WORK/torn" --resume >"$WORK/torn.log" 2>&1
check "unreadable checkpoints: an error naming them and the directory to delete, no --force" '[ $? = 1 ] && grep -q "rope_s1 holds checkpoints none of which can be read (.*safetensors.*): this run cannot resume" "$WORK/torn.log" && ! grep -q -- "--force" "$WORK/torn.log"'

finish
