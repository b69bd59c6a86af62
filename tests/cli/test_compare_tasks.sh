#!/usr/bin/env bash
# End-to-end task-only `attnlab compare` (docs/compare.md "Task-only grids", "Task accuracy"): a
# grid with language_model = false and only [tasks.needle] (two depths) and [tasks.mqar] (its shape
# given), 2 variants × 2 seeds of the tiny preset, 3 steps and 4 samples each: no corpus is prepared
# and no language model trains. Stopped after its first run and resumed; then the documents (the
# pooled accuracies with their Wilson intervals, NIAH by depth, no loss table) and the grid errors
# that must come before any training.
# Usage: test_compare_tasks.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

cat >"$WORK/grid.toml" <<TOML
name = "tasks"
language_model = false
preset = "tiny"
seeds = [1, 2]

[variants.rope]
set = ["attn.pos=rope"]

[variants.alibi]
set = ["attn.pos=alibi"]

[tasks.needle]
set = ["model.seq_len=72", "train.batch_size=2"]
steps = 3
lengths = "1,2"
samples = 4
depths = [0.2, 0.8]

[tasks.mqar]
set = ["train.batch_size=2"]
steps = 3
lengths = "1,2"
samples = 4
keys = 8
kv_pairs = 4
queries = 2
TOML
G="$WORK/grid.toml"
O="$WORK/out"

# Grid errors come before anything is trained or written.
sed 's/^seeds = \[1, 2\]/seeds = [1, 2]\nlengths = "1,2"/' "$G" >"$WORK/lengths.toml"
expect_error "a length sweep in a task-only grid is refused, naming the key and its line" \
  "lengths.toml:5: lengths is for the language model, which this grid does not train (language_model = false at $WORK/lengths.toml:2)" \
  "$BIN" compare "$WORK/lengths.toml" --out "$WORK/bad"
printf 'language_model = false\n[variants.rope]\nset = []\n' >"$WORK/none.toml"
expect_error "a task-only grid without tasks is refused" "language_model = false, but the grid has no [tasks.NAME] table" \
  "$BIN" compare "$WORK/none.toml" --out "$WORK/bad"
sed 's/^queries = 2/queries = 5/' "$G" >"$WORK/queries.toml"
expect_error "queries beyond kv_pairs are refused, naming both keys" "tasks.mqar.queries: queries = 5 exceeds kv_pairs = 4" \
  "$BIN" compare "$WORK/queries.toml" --out "$WORK/bad"
check "nothing was written for the refused grids" '[ ! -e "$WORK/bad" ]'
# A task's set is checked against the task's steps, not the preset's (tiny: 20): warmup 25 of 30 steps.
printf 'language_model = false\npreset = "tiny"\n[variants.rope]\nset = []\n[tasks.passkey]\nset = ["model.seq_len=72", "train.warmup=25"]\nsteps = 30\nlengths = "1"\nsamples = 2\n' >"$WORK/warmup.toml"
"$BIN" compare "$WORK/warmup.toml" --out "$WORK/warmup" --stop-after-steps 1 --quiet >"$WORK/warmup.log" 2>&1
check "a task's train.warmup is checked against the task's steps (exit 3 after one step)" '[ $? = 3 ] || { cat "$WORK/warmup.log"; false; }'
# The task's training time survives a stop: kept in train_time.json, summed over invocations.
R1=$(echo "$WORK"/warmup/runs/rope_s*)  # the preset's seed
T1="$R1/task_passkey/train_time.json"
check "a stopped task keeps its training time" '/usr/bin/python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"train_seconds\"] > 0" "$T1"'
cp "$T1" "$WORK/time1.json"
"$BIN" compare "$WORK/warmup.toml" --out "$WORK/warmup" --resume --quiet >"$WORK/warmup2.log" 2>&1
check "the resumed task's result counts both invocations' time" '/usr/bin/python3 -c "
import json, sys
t1 = json.load(open(sys.argv[1]))[\"train_seconds\"]
t = json.load(open(sys.argv[2]))[\"tasks\"][\"passkey\"][\"train_seconds\"]
assert t > t1 > 0, (t, t1)" "$WORK/time1.json" "$R1/result.json" || { cat "$WORK/warmup2.log"; false; }'
rm "$R1/result.json"
printf '{"train_seconds": "x"}' >"$T1"
expect_error "a damaged train_time.json is named, with the way out" \
  "compare: $T1: expected {\"train_seconds\": a number ≥ 0}; delete the file to restart the count from 0" \
  "$BIN" compare "$WORK/warmup.toml" --out "$WORK/warmup" --resume --quiet

"$BIN" compare "$G" --out "$O" --stop-after-runs 1 >"$WORK/a.log" 2>&1
check "stop after the first run (exit 3)" '[ $? = 3 ] && [ -s "$O/runs/rope_s1/result.json" ] && [ ! -e "$O/runs/alibi_s1" ]'
check "no language model was trained" '[ ! -e "$O/runs/rope_s1/model.safetensors" ] && [ ! -e "$O/runs/rope_s1/progress.json" ]'
check "both task models were trained and evaluated" '[ -s "$O/runs/rope_s1/task_needle/eval.json" ] && [ -s "$O/runs/rope_s1/task_mqar/eval.json" ]'
"$BIN" compare "$G" --out "$O" --resume >"$WORK/b.log" 2>&1
check "resume to the end (exit 0)" '[ $? = 0 ] && grep -q "rope_s1: skipped" "$WORK/b.log"'
check "no primary-comparison hint for a task-only grid" '! grep -q "^hint:" "$WORK/b.log"'
for f in results.json results.md report.html runs/alibi_s2/result.json; do
  check "wrote $f" '[ -s "$O/$f" ]'
done
/usr/bin/python3 - "$O" <<'PY' >"$WORK/py.log" 2>&1
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/results.json"))
assert r["grid"]["language_model"] is False and r["grid"]["steps"] == 0, r["grid"]
assert r["grid"]["tasks"][0]["depths"] == [0.2, 0.8]
assert r["grid"]["tasks"][1]["keys"] == 8 and r["grid"]["tasks"][1]["queries"] == 2
assert len(r["runs"]) == 4 and all(run["val_loss"] is None for run in r["runs"])
assert "length_did" not in r and "primary_comparisons" not in r
for run in r["runs"]:
    n = run["tasks"]["needle"]
    assert n["scored"] == [8, 8] and n["scored_by_depth"] == [[4, 4], [4, 4]], n
    assert run["tasks"]["mqar"]["scored"] == [4, 4]
    assert all(run["tasks"][t]["train_seconds"] > 0 for t in ("needle", "mqar")), run["tasks"]
    ev = json.load(open(out + "/runs/" + run["id"] + "/task_mqar/eval.json"))
    assert ev["params"] == {"task": "mqar", "keys": 8, "kv_pairs": 4, "queries": 2}, ev["params"]
    cells = json.load(open(out + "/runs/" + run["id"] + "/task_needle/eval.json"))["cells"]
    assert sorted({c["depth"] for c in cells}) == [0.2, 0.8]
ta = {t["task"]: t for t in r["task_accuracy"]["tasks"]}
needle = ta["needle"]
assert needle["depths"] == [0.2, 0.8] and needle["multiple"] == [1.0, 2.0]
for v in needle["variants"]:
    for i, s in enumerate(v["strict"]):
        solved = sum(run["tasks"]["needle"]["solved"][i] for run in r["runs"] if run["variant"] == v["variant"])
        assert s["samples"] == 16 and s["seeds"] == 2 and s["solved"] == solved, s
        assert 0 <= s["ci95"][0] <= s["accuracy"] <= s["ci95"][1] <= 1
    assert len(v["by_depth"]) == 2 and all(c["samples"] == 8 for row in v["by_depth"] for c in row)
alibi = [v for v in ta["mqar"]["variants"] if v["variant"] == "alibi"][0]
assert all(d["ci95"][0] <= d["diff"] <= d["ci95"][1] for d in alibi["vs_baseline"]), alibi
print("ok")
PY
check "results.json: the task-only grid, the counts, the pooled Wilson intervals (needle by depth) and Newcombe's differences" 'grep -q "^ok$" "$WORK/py.log" || { cat "$WORK/py.log"; false; }'
check "results.md: no loss table; the task tables, NIAH by depth" 'grep -q "Task-only grid" "$O/results.md" && ! grep -q "| variant | settings | parameters" "$O/results.md" && grep -q "### NIAH by depth" "$O/results.md" && grep -q "| alibi | 2× | .* / 8 (2) |" "$O/results.md"'
check "report.html: no loss curves; the task accuracy and depth tables" '! grep -q "id=\"fig-val-loss\"" "$O/report.html" && grep -q "id=\"task-accuracy-mqar\"" "$O/report.html" && grep -q "id=\"task-depth-needle\"" "$O/report.html"'
"$BIN" report "$O/results.json" --out "$WORK/r.html" >/dev/null 2>&1
check "attnlab report recomputes the same page" '[ $? = 0 ] && cmp -s "$WORK/r.html" "$O/report.html"'
# Other depths are other evaluations: a finished run is not reused.
sed 's/^depths = \[0.2, 0.8\]/depths = [0.5]/' "$G" >"$WORK/depths.toml"
"$BIN" compare "$WORK/depths.toml" --out "$O" --resume >"$WORK/depths.log" 2>&1
check "changed depths are refused for a finished run" '[ $? = 1 ] && grep -q "rope_s1/result.json was evaluated with other grid settings" "$WORK/depths.log"'
finish
