#!/usr/bin/env bash
# `attnlab compare` across processes (docs/distributed.md) on the committed corpus: one tiny grid
# (2 variants × 2 seeds of the tiny preset, a few steps, one thread per process) run
#   (a) in one process,
#   (b) under `mpirun -np 2` (rank 0 hands the cells out and trains too),
#   (c) as a two-cell array, `--cell 0/2` and `--cell 1/2`, then `--merge`,
#   (d) under `mpirun -np 2` with rank 1 killed (SIGKILL) while it trains a cell, then `--resume`,
#   (f) under `mpirun -np 2` with one run failing (unreadable checkpoint), fixed, then `--resume`;
# the five results.json must be equal once the fields that legitimately differ are removed (listed
# in `strip` below: wall-clock times and speeds). Plus the output rules (rank 0 alone prints the
# tables, other ranks one line per cell), --cell/--merge errors, and a --cell 1/2 whose assignment
# follows the plan's order, and (e) three cells, one with another thread count, merged: the summary
# warns that one variant's runs come from different machines. Skipped (exit 77) when mpirun is missing or attnlab was built without MPI.
# Usage: mpi_compare.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun is not installed (Debian: openmpi-bin, scripts/install_deps.sh demo)"
  exit 77
fi
if ! "$BIN" info --preset tiny 2>/dev/null | grep -q "^processes: MPI"; then
  echo "SKIP: $BIN was built without MPI (ATTNLAB_MPI=OFF)"
  exit 77
fi
MPIRUN=(mpirun --oversubscribe)
# OpenMPI refuses to run as root unless told; CI containers run as root.
if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
export OMP_NUM_THREADS=1
# A sanitized build (the debug preset): OpenMPI's own allocations are not attnlab's leaks
# (mpi_lsan.supp); full stacks, since the fast unwinder stops inside OpenMPI's unloaded components.
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/mpi_lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"

inputs=()
for f in "$SRC"/tests/data/*.txt; do inputs+=(--input "$f"); done
"$BIN" prepare "${inputs[@]}" --out "$WORK/data" --vocab 400 >"$WORK/prepare.log" 2>&1
check prepare '[ -s "$WORK/data/val.bin" ]'

cat >"$WORK/grid.toml" <<TOML
name = "mpi"
preset = "tiny"
set = ["data.dir=$WORK/data", "model.vocab_size=400", "train.eval_every=16", "train.batch_size=2"]
steps = 32
ckpt_every = 8
seeds = [1, 2]
baseline = "rope"

[variants.rope]
set = ["attn.pos=rope"]

[variants.xsa]
set = ["attn.pos=rope", "attn.xsa=on"]
TOML
G="$WORK/grid.toml"

# results.json without what depends on the wall clock: each run's train_seconds and tokens_per_s (and its tasks')
# (its curve keeps step and loss alone), and each variant's tokens_per_s {mean, sd} in "summary". Everything else (losses, curves, evaluations, machine, configuration, the
# statistics) must be equal.
strip() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["runs"]:
    for k in ("train_seconds", "tokens_per_s"):
        r.pop(k)
    for t in (r.get("tasks") or {}).values():  # a task's own training time (none in this grid)
        t.pop("train_seconds", None)
for s in d["summary"]:
    s.pop("tokens_per_s")
print(json.dumps(d, sort_keys=True, indent=1))
PY
}

# (a) one process
"$BIN" compare "$G" --out "$WORK/a" --quiet >"$WORK/a.log" 2>&1
check "(a) one process finishes the grid" '[ $? = 0 ] && [ -s "$WORK/a/results.json" ]'
strip "$WORK/a/results.json" >"$WORK/a.json"

# (b) two processes
"${MPIRUN[@]}" -np 2 "$BIN" compare "$G" --out "$WORK/b" >"$WORK/b.log" 2>"$WORK/b.err"
check "(b) mpirun -np 2 finishes the grid" '[ $? = 0 ] && [ -s "$WORK/b/results.json" ]'
strip "$WORK/b/results.json" >"$WORK/b.json"
check "(b) results.json equals the one-process one" 'diff "$WORK/a.json" "$WORK/b.json" >"$WORK/b.diff"'
check "(b) both ranks trained cells" 'grep -q "done on rank 0" "$WORK/b.log" && grep -q "done on rank 1" "$WORK/b.log"'
check "(b) one line per run, the tables once" '[ "$(grep -c ": done on rank" "$WORK/b.log")" = 4 ] && [ "$(grep -c "^# attnlab compare: mpi" "$WORK/b.log")" = 1 ]'
check "(b) no progress lines" '! grep -q "step [0-9]*/32" "$WORK/b.log"'

# (c) a two-cell array, then the summary
"$BIN" compare "$G" --out "$WORK/c" --cell 1/2 --quiet >"$WORK/c1.log" 2>&1
check "(c) --cell 1/2 runs every second cell of the plan (xsa_s1, xsa_s2)" \
  '[ $? = 0 ] && [ -s "$WORK/c/runs/xsa_s1/result.json" ] && [ -s "$WORK/c/runs/xsa_s2/result.json" ] && [ ! -e "$WORK/c/runs/rope_s1" ] && [ ! -e "$WORK/c/results.json" ]'
expect_error "(c) --merge before every cell finished names the missing runs" "rope_s1, rope_s2" "$BIN" compare "$G" --out "$WORK/c" --merge
"$BIN" compare "$G" --out "$WORK/c" --cell 0/2 --quiet >"$WORK/c0.log" 2>&1
check "(c) --cell 0/2 runs the others, no summary" '[ $? = 0 ] && [ -s "$WORK/c/runs/rope_s2/result.json" ] && [ ! -e "$WORK/c/results.json" ]'
"$BIN" compare "$G" --out "$WORK/c" --merge --quiet >"$WORK/c.log" 2>&1
check "(c) --merge writes the summary" '[ $? = 0 ] && [ -s "$WORK/c/results.json" ] && [ -s "$WORK/c/report.html" ]'
strip "$WORK/c/results.json" >"$WORK/c.json"
check "(c) results.json equals the one-process one" 'diff "$WORK/a.json" "$WORK/c.json" >"$WORK/c.diff"'

# (d) a rank killed mid-grid: only its cell is lost; --resume finishes the grid.
"${MPIRUN[@]}" -np 2 "$BIN" compare "$G" --out "$WORK/d" >"$WORK/d.log" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 3000); do  # up to 60 s: find rank 1 while it holds a run's lock (it is training)
  for lockfile in "$WORK"/d/runs/*/.attnlab.lock; do
    pid=$(sed -n 's/^pid \([0-9]*\),.*/\1/p' "$lockfile" 2>/dev/null)
    if [ -n "$pid" ] && tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$pid
      break 2
    fi
  done
  sleep 0.02
done
if [ -n "$victim" ]; then kill -9 "$victim"; fi
wait "$job"
rc=$?
check "(d) rank 1 was killed while training (pid $victim) and the job ended with an error" '[ -n "$victim" ] && [ $rc != 0 ] && [ ! -e "$WORK/d/results.json" ]'
"$BIN" compare "$G" --out "$WORK/d" --resume --quiet >"$WORK/d2.log" 2>&1
check "(d) --resume finishes the grid" '[ $? = 0 ] && [ -s "$WORK/d/results.json" ]'
strip "$WORK/d/results.json" >"$WORK/d.json"
check "(d) results.json equals the one-process one" \
  'diff "$WORK/a.json" "$WORK/d.json" >"$WORK/d.diff" || { head -40 "$WORK/d.diff"; tail -20 "$WORK/d2.log"; ls -R "$WORK/d/runs" | head -40; false; }'

# (f) a run that fails with an error on one rank: the job stops with that error (printed once, by
# the rank it happened on) and rank 0's own, no summary; fixed, --resume finishes the grid.
mkdir -p "$WORK/f/runs/xsa_s1" && echo garbage >"$WORK/f/runs/xsa_s1/step_000008.safetensors"
"${MPIRUN[@]}" -np 2 "$BIN" compare "$G" --out "$WORK/f" --resume >"$WORK/f.log" 2>"$WORK/f.err"
rc=$?
check "(f) a failing run stops the job with status 1, its error printed once, and no summary" \
  '[ $rc = 1 ] && [ "$(grep -c "none of which can be read" "$WORK/f.err")" = 1 ] && grep -qF "attnlab compare $G --out $WORK/f --resume" "$WORK/f.err" && [ ! -e "$WORK/f/results.json" ]'
rm -rf "$WORK/f/runs/xsa_s1"
"${MPIRUN[@]}" -np 2 "$BIN" compare "$G" --out "$WORK/f" --resume --quiet >/dev/null 2>&1
check "(f) fixed, --resume finishes the grid with the same results.json" \
  '[ $? = 0 ] && strip "$WORK/f/results.json" >"$WORK/f.json" && diff "$WORK/a.json" "$WORK/f.json" >/dev/null'

# (e) cells on different machines: the merged summary names the variant whose runs differ. With
# --cell I/3 the plan's runs rope_s1 xsa_s1 rope_s2 xsa_s2 go to cells 0 1 2 0; cell 2 (rope_s2)
# runs with two threads, which the machine record counts as another machine (other rounding).
"$BIN" compare "$G" --out "$WORK/e" --cell 0/3 --quiet >/dev/null 2>&1 &&
  "$BIN" compare "$G" --out "$WORK/e" --cell 1/3 --quiet >/dev/null 2>&1 &&
  OMP_NUM_THREADS=2 "$BIN" compare "$G" --out "$WORK/e" --cell 2/3 --quiet >/dev/null 2>&1 &&
  "$BIN" compare "$G" --out "$WORK/e" --merge --quiet >"$WORK/e.log" 2>&1
check "(e) three cells and --merge" '[ $? = 0 ] && [ -s "$WORK/e/results.json" ]'
check "(e) the merged summary warns that rope's runs come from two machines, not xsa's" \
  'grep -q "the runs of variant rope were computed on 2 different machines" "$WORK/e.log" && ! grep -q "variant xsa were" "$WORK/e.log"'

# Bad input. A grid whose one variant is bad fails on every entry point before anything trains,
# even in a cell that would not run that variant (--cell 1/2 runs the xsa runs only).
sed 's/^set = \["attn.pos=rope"\]$/set = ["attn.pos=rope", "attn.bogus=1"]/' "$G" >"$WORK/bad.toml"
check "the bad grid differs from the good one" '! cmp -s "$G" "$WORK/bad.toml"'
expect_error "--cell: the whole grid is checked first" "attn.bogus" "$BIN" compare "$WORK/bad.toml" --out "$WORK/bad1" --cell 1/2
check "--cell: nothing trained" '[ -z "$(ls -A "$WORK/bad1/runs" 2>/dev/null)" ]'
err=$("${MPIRUN[@]}" -np 2 "$BIN" compare "$WORK/bad.toml" --out "$WORK/bad2" 2>&1 >/dev/null)
check "mpirun: a bad grid stops the job before any training, reported once" \
  '[ "$(grep -c "attn.bogus" <<<"$err")" = 1 ] && [ -z "$(ls -A "$WORK/bad2/runs" 2>/dev/null)" ]'
expect_error "--cell out of range" "the cell index must be 0 .. 1" "$BIN" compare "$G" --out "$WORK/x" --cell 2/2
expect_error "--cell not I/N" "--cell" "$BIN" compare "$G" --out "$WORK/x" --cell 2
expect_error "--cell with --merge" "--cell trains its cells" "$BIN" compare "$G" --out "$WORK/c" --cell 0/2 --merge
expect_error "--cell into a cell that exists, without --resume" "exists already" "$BIN" compare "$G" --out "$WORK/c" --cell 0/2
err=$("${MPIRUN[@]}" -np 2 "$BIN" compare "$G" --out "$WORK/g" --cell 0/2 2>&1 >/dev/null)
check "--cell under mpirun is refused, reported once" '[ "$(grep -c "leave --cell out" <<<"$err")" = 1 ]'
finish
