# Shared by the end-to-end scripts tests/cli/test_*.sh (sourced, not run; CMake runs only test_*.sh).
# Each script is called as SCRIPT ATTNLAB_BINARY SOURCE_DIR; this sets BIN, SRC and a scratch WORK
# directory removed on exit, counts checks with ok/bad/check/expect_error, and `finish` prints the plain
# "N passed, N failed" line and exits non-zero on any failure.
set -uo pipefail
BIN=$1
SRC=${2:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
pass=0
fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
# check NAME 'SHELL CONDITION' : evaluated in the caller's context ($? of the previous command included)
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }
# expect_error NAME PATTERN CMD... : the command must exit 1 and print PATTERN on stderr
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local err
  err=$("$@" 2>&1 >/dev/null)
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$pattern" <<<"$err"; then ok "$name"; else bad "$name (rc=$rc, stderr: $err)"; fi
}
finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
