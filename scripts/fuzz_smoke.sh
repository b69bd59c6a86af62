#!/usr/bin/env bash
# Fuzz smoke test (CI): builds the libFuzzer targets of fuzz/ (CMake preset `fuzz`: clang, ASan +
# UBSan) and runs each one for SECONDS (default 30) on a scratch copy of its seed corpus
# fuzz/corpus/<name> (libFuzzer adds the inputs it finds to the corpus directory it is given; the
# committed seeds are never written). Any crash, sanitizer report, leak, uncaught exception, timeout
# or out-of-memory fails the script, with the reproducer's path and the command that replays it.
#
#   scripts/fuzz_smoke.sh [SECONDS [TARGET...]]     e.g. scripts/fuzz_smoke.sh 600 fuzz_shard
#
# Targets run one after another on one core (a fuzzer is one process, one thread). Reproducers of
# findings are kept under build/fuzz/findings/<target>/ (outside the scratch directory, which is
# removed). A summary line per target gives libFuzzer's final counts: executions, exec/s, coverage
# (cov: edges, ft: features) and the corpus size at the end. FUZZ_KEEP=DIR keeps each target's log
# and final corpus in DIR/<target>/; FUZZ_FLAGS adds libFuzzer flags (after ours, so they win);
# FUZZ_SEED sets libFuzzer's seed (default 1: the same inputs each run; 0: a new seed each run).
# docs/reliability.md ("Fuzzing").
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=(fuzz_safetensors fuzz_shard fuzz_config fuzz_tokenizer fuzz_grid fuzz_results); fi
JOBS=${JOBS:-2}

bash scripts/install_deps.sh fuzz || exit 1  # clang, libFuzzer, libomp: only those missing
cmake --preset fuzz >/dev/null || { echo "fuzz_smoke: cmake --preset fuzz failed" >&2; exit 1; }
cmake --build build/fuzz -j "$JOBS" --target "${TARGETS[@]}" || { echo "fuzz_smoke: build failed" >&2; exit 1; }

# halt_on_error: a UBSan report stops the run like an ASan one, so libFuzzer saves the input and the
# script fails (the fuzz preset compiles UBSan's checks recoverable; without this a report would
# only be printed). Leak detection stays on (detect_leaks=0 is not needed: libFuzzer checks for
# leaks only when an input's mallocs and frees do not balance, and 10-minute runs of each target saw
# no report from libFuzzer's, SentencePiece's or protobuf's own allocations), so a leak on a
# reader's error path is a finding too. Options already in the environment come first; these win.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/attnlab_fuzz_smoke.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
failed=0
for t in "${TARGETS[@]}"; do
  seeds=fuzz/corpus/${t#fuzz_}
  bin=build/fuzz/$t
  if [ ! -d "$seeds" ] || [ ! -x "$bin" ]; then
    echo "fuzz_smoke: $t: no seed corpus $seeds or no binary $bin" >&2
    failed=1
    continue
  fi
  mkdir -p "$scratch/$t/corpus" "build/fuzz/findings/$t"
  cp -R "$seeds/." "$scratch/$t/corpus/"
  log=$scratch/$t/log
  # -timeout: one input running 25 s is a hang (the seeds take milliseconds under ASan);
  # -rss_limit_mb: 2 GB, the readers must refuse a hostile size before allocating it;
  # -seed: a fixed seed (FUZZ_SEED, default 1) makes the inputs tried the same from run to run, so
  # CI fails for a change, not for the luck of the draw (a faster machine only gets further along
  # the same sequence); FUZZ_SEED=0 draws a new seed each run, for exploring.
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -seed="${FUZZ_SEED:-1}" \
    -artifact_prefix="build/fuzz/findings/$t/" ${FUZZ_FLAGS:-} "$scratch/$t/corpus" >"$log" 2>&1 &
  pid=$!
  wait $pid
  rc=$?
  rm -f "/tmp/attnlab_fuzz_${t#fuzz_}_$pid"  # the target's per-process scratch input (fuzz/fuzz_util.h)
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: K/S ...") and its final statistics.
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  if [ -n "${FUZZ_KEEP:-}" ]; then
    mkdir -p "$FUZZ_KEEP/$t" && cp -R "$log" "$scratch/$t/corpus" "$FUZZ_KEEP/$t/"
  fi
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  if [ $rc -ne 0 ] || [ -n "$artifact" ]; then
    failed=1
    echo "FAIL: $t (exit $rc) after ${SECONDS_PER_TARGET} s"
    grep -E 'ERROR|SUMMARY|runtime error|terminate|deadly signal|timeout|out-of-memory' "$log" | head -20
    if [ -n "$artifact" ]; then
      echo "  reproducer: $artifact"
      echo "  replay:     $bin $artifact"
    fi
    echo "  full log (last 60 lines):"
    tail -60 "$log" | sed 's/^/    /'
  else
    echo "ok: $t ${SECONDS_PER_TARGET} s: ${execs:-?} executions, ${rate:-?} exec/s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?} (inputs/bytes), no finding"
  fi
done
exit $failed
