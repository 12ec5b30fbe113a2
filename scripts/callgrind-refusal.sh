#!/usr/bin/env bash
# Instructions per cheap answer of POST /seckill, counted by callgrind: a figure that
# does not move with the load of a shared 2-core machine, unlike req/s, so a change to
# one of these paths can be compared with the code before it to a percent. Two paths:
#   refusal        a purchase refused by the user limit (429), mostly answered again by
#                  the denial cache;
#   refusal_redis  the same with the denial cache off (SECKILL_LIMITER__DENIAL_CACHE_SLOTS
#                  =0): every refusal is the limiter's script call, as the stampede's
#                  `refused_api` scenario of make bench;
#   sold_out       a purchase of a sold-out item (409 SOLD_OUT): answered from memory.
#
#   scripts/callgrind-refusal.sh                     # the refusal, this checkout's binary
#   CALLGRIND_PATH=sold_out scripts/callgrind-refusal.sh
#   SECKILL_BIN=/elsewhere/target/release/seckill scripts/callgrind-refusal.sh
#   CALLGRIND_REQUESTS=3000 (the measured answers)
#
# One worker, under valgrind. Unmeasured first: for the refusal, 100 users each buy once
# and are refused twice (their 3 per minute); for the sold-out answer, an item of one unit
# is bought and then asked for 300 times more. Then every counter is zeroed and
# CALLGRIND_REQUESTS purchases by the same users, all refused by the user limit (or all
# answered sold out), are counted. Prints the instructions of the whole process divided
# by the requests; the callgrind file stays in target/callgrind/ for
# `callgrind_annotate`. Needs the services (scripts/services.sh) and valgrind
# (installed with apt when missing). Traffic to loopback only; stops by itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "callgrind: $*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

REQUESTS=${CALLGRIND_REQUESTS:-3000}
PATH_NAME=${CALLGRIND_PATH:-refusal}
case "$PATH_NAME" in
  refusal) warm_stock=1000000 status=429 what="refused purchase" ;;
  refusal_redis) warm_stock=1000000 status=429 what="refused purchase, denial cache off" ;;
  sold_out) warm_stock=1 status=409 what="sold-out answer" ;;
  *) die "CALLGRIND_PATH must be refusal, refusal_redis or sold_out, not $PATH_NAME" ;;
esac
slots=()
[ "$PATH_NAME" != refusal_redis ] || slots=(SECKILL_LIMITER__DENIAL_CACHE_SLOTS=0)
command -v valgrind >/dev/null || apt_install valgrind
: "${REDIS_URL:?run scripts/services.sh up first (REDIS_URL)}"
: "${DATABASE_URL:?run scripts/services.sh up first (DATABASE_URL)}"

OUT=target/callgrind
mkdir -p "$OUT"
BIN=$(app_binary release)
cargo build --release --locked -p loadgen >&2
LOADGEN=target/release/loadgen
make_database seckill_callgrind || die "could not create a database"
APP_PID=""
cleanup() {
  [ -z "$APP_PID" ] || stop_process "$APP_PID"
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
}
trap cleanup EXIT

# valgrind execs in place, so the pid start_app records is the one callgrind_control needs.
wrapper="$OUT/app-under-callgrind"
printf '#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=%s "%s"\n' \
  "$OUT/$PATH_NAME.%p" "$BIN" >"$wrapper"
chmod +x "$wrapper"
rm -f "$OUT/$PATH_NAME".*
prefix="callgrind$$"
READY_DEADLINE=300 start_app "$wrapper" 0 "$OUT/app.log" \
  DATABASE_URL="$DB_URL" REDIS_URL="$REDIS_URL" SECKILL_REDIS_KEY_PREFIX="$prefix" \
  SECKILL_ADMIN_TOKEN=dev-admin-token SECKILL_WORKERS=1 SECKILL_LOG_LEVEL=warn \
  SECKILL_DEV_LOGIN=true SECKILL_SEED_DEMO_ITEM=false "${slots[@]}"

common=(--target "$APP_URL" --users 100 --ips 100 --concurrency 4 --duration 600
  --no-store-checks --quiet)
"$LOADGEN" "${common[@]}" --stock "$warm_stock" --requests 300 --json "$OUT/warm.json" >/dev/null
item=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['item_id'])" "$OUT/warm.json")
callgrind_control --zero "$APP_PID" >/dev/null
"$LOADGEN" "${common[@]}" --item "$item" --requests "$REQUESTS" --json "$OUT/run.json" >/dev/null
callgrind_control --dump=measured "$APP_PID" >/dev/null
answered=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['by_status'].get(sys.argv[2], 0))" "$OUT/run.json" "$status")
[ "$answered" = "$REQUESTS" ] || die "expected $REQUESTS answers $status, got $answered (see $OUT/run.json)"
file=$(ls "$OUT/$PATH_NAME".*.1)
total=$(awk '/^summary:/ {print $2}' "$file")
echo "$(basename "$BIN") ($BIN): $((total / REQUESTS)) instructions per $what ($REQUESTS answers $status; $file)"
