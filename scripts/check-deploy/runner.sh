# shellcheck shell=bash
# scripts/check-deploy.sh: how a check runs. Each runs in a subshell with `set -e` (so
# any failing command fails the check), its output captured and shown only on failure,
# and a watchdog bounding its time; `run` prints its `ok`/`FAIL` line and counts it.
# Checks hand values to later checks (ports, prefix) through $STATE, since a subshell's
# variables die with it.

state_set() { echo "$1=$2" >>"$STATE"; }
state_get() { sed -n "s/^$1=//p" "$STATE" | tail -n 1; }

PASSED=0
FAILED=0

# A process and everything it started, children first (by id, found through --ppid).
kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# run NAME FUNCTION [TIMEOUT_SECONDS]
run() {
  local name=$1 fn=$2 limit=${3:-$CHECK_TIMEOUT} out="$TMP/out.$2" pid watchdog rc
  ( set -e; "$fn" ) >"$out" 2>&1 </dev/null &
  pid=$!
  # Bounded: a check still running after its limit is killed with what it started,
  # and counts as failed.
  ( sleep "$limit"; echo "timed out after ${limit}s" >>"$out"; kill_tree "$pid" ) >/dev/null 2>&1 &
  watchdog=$!
  rc=0; wait "$pid" || rc=$?
  kill "$watchdog" 2>/dev/null || true
  wait "$watchdog" 2>/dev/null || true
  if [ $rc -eq 0 ]; then
    PASSED=$((PASSED + 1))
    printf 'ok    %-40s %s\n' "$name" "$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 | sed 's/^[[:space:]]*//')"
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL  %s (exit %s)\n' "$name" "$rc"
    tail -n 40 "$out" | sed 's/^/      /'
  fi
}
