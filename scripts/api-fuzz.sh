#!/usr/bin/env bash
# The API contract under attack: GET /api/openapi.json from a live instance is checked
# by openapi-spec-validator, then schemathesis generates requests for every operation of
# it (valid and invalid ones, a fixed seed, a bounded number per operation) and checks
# every answer: no 5xx, a documented status, content type, body schema and headers.
# Exits 0 when both pass, non-zero otherwise.
#
#   scripts/api-fuzz.sh
#
# What it does, in order:
#   1. creates a private virtualenv in .local/venv-api (python3 -m venv; Debian's
#      python3-venv is installed when missing) with tests/schemathesis/requirements.txt,
#      reinstalled only when that file changes;
#   2. starts the private Redis and Postgres (scripts/services.sh up), creates a
#      throw-away database and starts the app (SECKILL_BIN, else target/debug/seckill)
#      on a free loopback port with its own Redis key prefix and an admin token;
#   3. creates two items (so purchases can reach the sale's own answers), fetches and
#      validates the document, runs schemathesis with tests/schemathesis/schemathesis.toml
#      and its hooks (tokens, client addresses);
#   4. fails if schemathesis failed or if the app logged a panic; stops the app, drops
#      the database.
#
# Knobs (environment):
#   SECKILL_BIN          the app binary [target/debug/seckill]
#   API_FUZZ_TIMEOUT     hard bound on the schemathesis run, seconds [600]
#   API_FUZZ_EXAMPLES    examples per operation (overrides the config's)
#   OUT                  report and logs [test-artifacts/api-fuzz] (git-ignored)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

HERE="$ROOT/tests/schemathesis"
VENV="$ROOT/.local/venv-api"
API_FUZZ_TIMEOUT=${API_FUZZ_TIMEOUT:-600}
OUT=${OUT:-test-artifacts/api-fuzz}
ADMIN_SECRET=api-fuzz-admin-token

log() { echo "api-fuzz.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }

# as_root, apt_install, make_database, drop_database, app_binary, start_app, stop_process, ensure_venv
. "$ROOT/scripts/lib.sh"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

APP_PID=""
DB_NAME=""
DB_ADMIN_URL=""

cleanup() {
  local rc=$?
  [ -z "$APP_PID" ] || stop_process "$APP_PID"
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_venv "$VENV" "$HERE/requirements.txt"
eval "$(scripts/services.sh up)"
make_database seckill_api_fuzz || die "could not create the run's database"
APP_BIN=$(app_binary debug)
start_app "$APP_BIN" 0 "$OUT/app.log" \
  SECKILL_ADMIN_TOKEN="$ADMIN_SECRET" SECKILL_REDIS_KEY_PREFIX="api-fuzz-$(date -u +%s)-$$" \
  SECKILL_LOG_LEVEL=warn REDIS_URL="$REDIS_URL" DATABASE_URL="$DB_URL"

items=()
for name in first second; do
  body=$(curl -fsS "$APP_URL/admin/api/items" -H "Authorization: Bearer $ADMIN_SECRET" \
    -H 'Content-Type: application/json' \
    -d "{\"name\":\"$name\",\"priceCents\":100,\"stock\":3,\"startsAt\":\"2026-01-01T00:00:00Z\",\"endsAt\":\"2100-01-01T00:00:00Z\"}")
  items+=("$("$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$body")")
done

curl -fsS "$APP_URL/api/openapi.json" -o "$OUT/openapi.json"
"$VENV/bin/openapi-spec-validator" "$OUT/openapi.json"

examples=()
[ -z "${API_FUZZ_EXAMPLES:-}" ] || examples=(--max-examples "$API_FUZZ_EXAMPLES")
log "schemathesis against $APP_URL (bound: ${API_FUZZ_TIMEOUT}s)"
rc=0
(
  cd "$HERE"
  SECKILL_URL="$APP_URL" SECKILL_ADMIN_TOKEN="$ADMIN_SECRET" \
    SECKILL_ITEM_IDS="$(IFS=,; echo "${items[*]}")" \
    SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$HERE" \
    timeout --kill-after=15 "$API_FUZZ_TIMEOUT" \
    "$VENV/bin/schemathesis" --config-file schemathesis.toml run "$APP_URL/api/openapi.json" \
    "${examples[@]}" --report junit --report-dir "$OUT" --no-color
) || rc=$?

if grep -q 'panicked' "$OUT/app.log"; then
  log "the app panicked (see ${OUT#"$ROOT"/}/app.log)"
  rc=${rc/#0/1}
fi
[ "$rc" -ne 124 ] || log "schemathesis did not finish within ${API_FUZZ_TIMEOUT}s"
if [ "$rc" -ne 0 ]; then echo "API FUZZ FAILED (exit $rc)"; exit 1; fi
echo "API FUZZ PASSED"
