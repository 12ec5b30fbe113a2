#!/usr/bin/env bash
# Resident memory against open connections (docs/soak.md, "Memory"): one release
# instance, then bursts of keep-alive connections from loadgen (closed model,
# GET /api/items), each burst's VmRSS and open sockets read while it runs and again
# after it. Its own redis-server and database; loopback only; stops everything.
#
#   MEMORY_BURSTS="2048 4096 8192 12000" scripts/memory-connections.sh [ENV=VALUE...]
#   ENV=VALUE...: settings for the instance, e.g. SECKILL_MAX_CONNECTIONS=25000 (actix's
#   own default, i.e. no cap of ours).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "connections: $*" >&2; }
die() { log "error: $*"; exit 1; }
. scripts/lib.sh

BURSTS=${MEMORY_BURSTS:-2048 4096 8192 12000}
OUT=${MEMORY_OUT:-target/memory/connections}
mkdir -p "$OUT"
eval "$(scripts/services.sh up 2>/dev/null)"
cargo build --release --locked --workspace --bins >&2

REDIS_PID="" DB_NAME="" APP_PID="" LOADGEN_PID=""
cleanup() {
  local pid
  for pid in "$LOADGEN_PID" "$APP_PID" "$REDIS_PID"; do [ -z "$pid" ] || stop_process "$pid"; done
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

REDIS_PORT=$(free_port)
rm -rf "$OUT/redis"
start_redis_server "$REDIS_PORT" "$OUT/redis" --appendonly no || die "redis did not start"
REDIS_PID=$REDIS_SERVER_PID
make_database seckill_connections || die "no database"
start_app target/release/seckill 0 "$OUT/app.log" DATABASE_URL="$DB_URL" \
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT" SECKILL_WORKERS=2 "$@"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$APP_PID/status"; }
sockets() { find "/proc/$APP_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }
echo "idle before: rss $(rss_kb) kB, $(sockets) sockets"
for c in $BURSTS; do
  target/release/loadgen --quiet --no-store-checks --target "$APP_URL" --probe /api/items \
    --concurrency "$c" --duration 8 --users 1 --ips 1 >/dev/null 2>&1 &
  LOADGEN_PID=$!
  sleep 5 # into the burst: every connection is open by now
  echo "$c clients: rss $(rss_kb) kB, $(sockets) sockets"
  wait "$LOADGEN_PID" || true
  LOADGEN_PID=""
  # Past the server's 5 s keep-alive: whatever the burst left behind.
  sleep 6
  echo "after them: rss $(rss_kb) kB, $(sockets) sockets"
done
