#!/usr/bin/env bash
# Data-parallel training measured on one machine (docs/distributed.md, "Measured here"): a short run
# of one shape as 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread with gradient buckets
# summed during the backward (train.dp_bucket_mb = 1) and 2 ranks x 1 thread with one bucket summed
# after it (dp_bucket_mb = 0: nothing overlaps). Prints per configuration the tokens/s, the step
# time and the communication the backward did not hide (comm_ms in metrics.jsonl: the slowest
# rank's wait for the sums after its backward; the faster rank's longer wait, wait_ms, adds the
# time it waited for the slower one), means over the steps after the first two; then the overlap
# achieved, 1 - comm(buckets) / comm(one bucket after the backward).
#
#   scripts/measure_data_parallel.sh BINARY DATA_DIR [STEPS] [--set KEY=VALUE ...]
#   scripts/measure_data_parallel.sh build/release/attnlab data/heldout 12 --preset bench
#
# Arguments after STEPS are passed to `attnlab train` (the shape: --preset, --set). Short runs: a
# few tens of seconds each on 2 cores.
set -euo pipefail
BIN=$(realpath "$1")
DATA=$(realpath "$2")
STEPS=${3:-12}
shift 3 || shift $#
SHAPE=("$@")
[ ${#SHAPE[@]} -gt 0 ] || SHAPE=(--preset bench)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPIRUN=(mpirun --oversubscribe)
if [ "$(id -u)" = 0 ]; then MPIRUN+=(--allow-run-as-root); fi
common=("${SHAPE[@]}" --set "data.dir=\"$DATA\"" --set train.steps="$STEPS" --set train.eval_every=0 --set train.log_every=1000
        --set train.warmup=2 --quiet)

summary() {  # NAME DIR: mean tokens/s, ms, comm_ms over steps 3..
  /usr/bin/python3 - "$1" "$2/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
rows = [r for r in rows if "loss" in r and r["step"] > 2]
ms = sum(r["ms"] for r in rows) / len(rows)
comm = sum(r.get("comm_ms", 0) for r in rows) / len(rows)
wait = sum(r.get("wait_ms", 0) for r in rows) / len(rows)
tps = sum(r["tokens_per_s"] for r in rows) / len(rows)
print("%-34s %7.0f tok/s %7.1f ms/step %6.1f ms communication not hidden (%4.1f%%), rank 0 waited %6.1f ms" %
      (sys.argv[1], tps, ms, comm, 100 * comm / ms, wait))
print("RESULT", sys.argv[1], tps, ms, comm)
PY
}

OMP_NUM_THREADS=1 "$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/r1t1\"" >/dev/null
summary "1 rank x 1 thread" "$WORK/r1t1" | tee -a "$WORK/results"
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$BIN" train "${common[@]}" --set "train.out_dir=\"$WORK/r1t2\"" >/dev/null
summary "1 rank x 2 threads" "$WORK/r1t2" | tee -a "$WORK/results"
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$BIN" train "${common[@]}" --set train.dp_bucket_mb=1 --set "train.out_dir=\"$WORK/r2b\"" >/dev/null
summary "2 ranks x 1 thread, 1 MB buckets" "$WORK/r2b" | tee -a "$WORK/results"
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$BIN" train "${common[@]}" --set train.dp_bucket_mb=0 --set "train.out_dir=\"$WORK/r2n\"" >/dev/null
summary "2 ranks x 1 thread, one bucket" "$WORK/r2n" | tee -a "$WORK/results"
/usr/bin/python3 - "$WORK/results" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT"):
        parts = line.split()
        r[" ".join(parts[1:-3])] = [float(x) for x in parts[-3:]]
b, n = r["2 ranks x 1 thread, 1 MB buckets"], r["2 ranks x 1 thread, one bucket"]
t1, t2 = r["1 rank x 1 thread"], r["1 rank x 2 threads"]
print("2 ranks x 1 thread / 1 rank x 2 threads: %.2f x the tokens/s; / 1 rank x 1 thread: %.2f x" % (b[0] / t2[0], b[0] / t1[0]))
print("overlap achieved: %.0f%% of the one-bucket wait hidden (%.1f ms -> %.1f ms per step)" %
      (100 * (1 - b[2] / n[2]) if n[2] > 0 else 0, n[2], b[2]))
PY
