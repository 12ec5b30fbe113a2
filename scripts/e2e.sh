#!/usr/bin/env bash
# End-to-end tests of the shopper page and the admin dashboard: Debian's headless
# Chromium driven by npm's playwright-core, against a private app instance. Exits 0 when
# every test passes, non-zero otherwise.
#
#   scripts/e2e.sh
#   SECKILL_BIN=target/release/seckill scripts/e2e.sh
#
# What it does, in order:
#   1. installs Debian's `chromium` when /usr/bin/chromium is missing (apt, as root or
#      through sudo) and runs `npm ci` in tests/e2e when its node_modules is missing;
#   2. starts the private Redis and Postgres (scripts/services.sh up) and creates a
#      throw-away database for this run (dropped at the end, KEEP_DB=1 keeps it);
#   3. starts the app ($SECKILL_BIN, else target/debug/seckill, built only when missing)
#      on a free loopback port with its own Redis key prefix and the named admin token
#      `e2e`, and polls GET /health/ready until a deadline;
#   4. runs tests/e2e/seckill.test.mjs, tests/e2e/waiting-room.test.mjs,
#      tests/e2e/odds.test.mjs, tests/e2e/life-cycle.test.mjs, tests/e2e/policies.test.mjs and
#      tests/e2e/report.test.mjs, tests/e2e/offenders.test.mjs (which write the history's rows with psql, through
#      E2E_DATABASE_URL) and tests/e2e/domains.test.mjs, one file at a time, with node's test runner (TAP:
#      `# pass N`, `# fail N`); they save screenshots of both pages into
#      test-artifacts/e2e/;
#   5. stops the app, drops the database, removes its temporary files.
#
# Knobs (environment):
#   SECKILL_BIN         the app binary [target/debug/seckill]
#   E2E_CHROMIUM        the browser [/usr/bin/chromium]
#   E2E_TEST_TIMEOUT    hard bound on the test run, seconds [300]
#   READY_DEADLINE      seconds for the app to become ready [60]
#   OUT                 screenshots and logs [test-artifacts/e2e] (git-ignored)
#   KEEP_DB [0]         1 = keep the run's database for inspection
#   E2E_FILES           the test files to run, in tests/e2e [all eight, in the order above]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

E2E_DIR="$ROOT/tests/e2e"
CHROMIUM=${E2E_CHROMIUM:-/usr/bin/chromium}
E2E_TEST_TIMEOUT=${E2E_TEST_TIMEOUT:-300}
READY_DEADLINE=${READY_DEADLINE:-60}
OUT=${OUT:-test-artifacts/e2e}
KEEP_DB=${KEEP_DB:-0}
E2E_FILES=${E2E_FILES:-seckill.test.mjs waiting-room.test.mjs odds.test.mjs life-cycle.test.mjs policies.test.mjs report.test.mjs offenders.test.mjs domains.test.mjs}
ADMIN_NAME=e2e
ADMIN_SECRET=e2e-admin-token

log() { echo "e2e.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }

[[ $E2E_TEST_TIMEOUT =~ ^[1-9][0-9]*$ && $READY_DEADLINE =~ ^[1-9][0-9]*$ ]] \
  || die "E2E_TEST_TIMEOUT and READY_DEADLINE must be positive integers"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# Screenshots of an earlier run would pass for this one's.
rm -f "$OUT"/*.png "$OUT"/app.log

# as_root, apt_install, make_database, drop_database, app_binary, start_app, stop_process
. "$ROOT/scripts/lib.sh"

# --- tools ------------------------------------------------------------------------------

ensure_tools() {
  if [ ! -x "$CHROMIUM" ]; then
    [ "$CHROMIUM" = /usr/bin/chromium ] || die "E2E_CHROMIUM=$CHROMIUM is not executable"
    apt_install chromium
  fi
  command -v curl >/dev/null || apt_install curl ca-certificates
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || die "node $(node --version) is too old: playwright-core needs node 20 or newer"
  if [ ! -d "$E2E_DIR/node_modules/playwright-core" ]; then
    log "npm ci in tests/e2e"
    (cd "$E2E_DIR" && npm ci --no-audit --no-fund >&2)
  fi
}

# --- the app ------------------------------------------------------------------------------

APP_PID=""
DB_NAME=""
DB_ADMIN_URL=""
RUN_TMP=""

stop_app() {
  [ -n "$APP_PID" ] || return 0
  stop_process "$APP_PID"   # scripts/lib.sh
  APP_PID=""
}

cleanup() {
  local rc=$?
  stop_app
  [ "$KEEP_DB" = 1 ] || drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
  [ -z "$RUN_TMP" ] || rm -rf "$RUN_TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the run ------------------------------------------------------------------------------

ensure_tools
SERVICES_ENV=$(scripts/services.sh up) || die "scripts/services.sh up failed"
eval "$SERVICES_ENV"
make_database seckill_e2e || die "could not create the run's database"
APP_BIN=$(app_binary debug)
PREFIX="e2e-$(date -u +%s)-$$"
log "redis prefix $PREFIX"
start_app "$APP_BIN" 0 "$OUT/app.log" \
  SECKILL_ADMIN_TOKEN="$ADMIN_NAME:$ADMIN_SECRET" SECKILL_REDIS_KEY_PREFIX="$PREFIX" \
  SECKILL_STATIC_DIR="$ROOT/static" SECKILL_LOG_LEVEL=warn \
  REDIS_URL="$REDIS_URL" DATABASE_URL="$DB_URL"

# Chromium's temporary profile (a fresh --user-data-dir per launch) goes here.
RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-e2e.XXXXXX")
log "running the browser tests (bound: ${E2E_TEST_TIMEOUT}s)"
test_rc=0
(
  cd "$E2E_DIR"
  E2E_BASE_URL="$APP_URL" E2E_ADMIN_TOKEN="$ADMIN_SECRET" E2E_ADMIN_NAME="$ADMIN_NAME" E2E_DATABASE_URL="$DB_URL" \
    E2E_CHROMIUM="$CHROMIUM" E2E_ARTIFACTS="$OUT" TMPDIR="$RUN_TMP" \
    timeout --kill-after=15 "$E2E_TEST_TIMEOUT" \
    node --test --test-concurrency=1 --test-reporter=tap $E2E_FILES
) || test_rc=$?

stop_app
if grep -qiE '"level":"(ERROR)"|\bERROR\b' "$OUT/app.log" 2>/dev/null; then
  log "the app logged errors (see $OUT/app.log):"
  grep -iE '"level":"(ERROR)"|\bERROR\b' "$OUT/app.log" | head -n 5 >&2
fi

echo
echo "screenshots:"
shopt -s nullglob
shots=("$OUT"/*.png)
if [ ${#shots[@]} -eq 0 ]; then echo "  (none)"; else printf '  %s\n' "${shots[@]#"$ROOT"/}"; fi
echo "app log: ${OUT#"$ROOT"/}/app.log"
if [ "$test_rc" -eq 124 ]; then log "the tests did not finish within ${E2E_TEST_TIMEOUT}s"; fi
if [ "$test_rc" -ne 0 ]; then
  echo "E2E FAILED (exit $test_rc)"
  exit 1
fi
echo "E2E PASSED"
