#!/usr/bin/env bash
# The memory investigation of docs/soak.md: one release instance under mixed,
# high-cardinality traffic (scripts/mixed-traffic.py) for MEMORY_SECONDS, its resident
# memory (VmRSS) sampled every MEMORY_SAMPLE_SECONDS into $MEMORY_OUT/rss.csv
# ("seconds,kB"). Its own redis-server (so the shared one on 6380 gets none of the
# millions of keys) and its own database; everything on loopback, stopped at the end.
#
#   MEMORY_SECONDS=240 MEMORY_THREADS=8 MEMORY_CLOSE=0 MEMORY_OUT=target/memory scripts/memory-growth.sh [ENV=VALUE...]
#   ENV=VALUE...: extra settings for the instance (e.g. MIMALLOC_PURGE_DELAY=0).
#   MEMORY_APP: another build of the app (e.g. one built with --no-default-features).
#   MEMORY_WRAP: a command the app runs under (e.g. "heaptrack -o target/memory/heap").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "memory: $*" >&2; }
die() { log "error: $*"; exit 1; }
. scripts/lib.sh

SECONDS_TOTAL=${MEMORY_SECONDS:-240}
SAMPLE=${MEMORY_SAMPLE_SECONDS:-5}
THREADS=${MEMORY_THREADS:-8}
# The share of requests that close their connection (see mixed-traffic.py --close).
CLOSE=${MEMORY_CLOSE:-0}
OUT=${MEMORY_OUT:-target/memory}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

eval "$(scripts/services.sh up 2>/dev/null)"
# The workspace build, as `make soak` and `make bench` use (building the app alone
# unifies features differently and rebuilds everything).
if [ -z "${MEMORY_APP:-}" ]; then cargo build --release --locked --workspace --bins >&2; fi
APP=${MEMORY_APP:-target/release/seckill}

REDIS_PID="" DB_NAME="" APP_PID="" MIX_PID=""
cleanup() {
  [ -z "$MIX_PID" ] || stop_process "$MIX_PID"
  [ -z "$APP_PID" ] || stop_process "$APP_PID"
  [ -z "$REDIS_PID" ] || stop_process "$REDIS_PID"
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

REDIS_PORT=$(free_port)
rm -rf "$OUT/redis"
start_redis_server "$REDIS_PORT" "$OUT/redis" --appendonly no || die "redis did not start"
REDIS_PID=$REDIS_SERVER_PID

make_database seckill_memory || die "no database"
BIN=$APP
if [ -n "${MEMORY_WRAP:-}" ]; then
  BIN="$OUT/wrapped-app"
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$MEMORY_WRAP" "$(realpath "$APP")" >"$BIN"
  chmod +x "$BIN"
fi
start_app "$BIN" 0 "$OUT/app.log" DATABASE_URL="$DB_URL" \
  REDIS_URL="redis://127.0.0.1:$REDIS_PORT" SECKILL_ADMIN_TOKEN=dev-admin-token SECKILL_WORKERS=2 "$@"
# Under a wrapper, the app is one of the wrapper's descendants: sample the app itself.
PID=$APP_PID
if [ -n "${MEMORY_WRAP:-}" ]; then
  for p in $(pgrep -g "$(ps -o pgid= -p "$APP_PID" | tr -d ' ')"); do
    [ "$(readlink "/proc/$p/exe")" = "$(realpath "$APP")" ] && PID=$p
  done
fi
item=$(curl -sf "$APP_URL/admin/api/items" -H 'Authorization: Bearer dev-admin-token' \
  -H 'Content-Type: application/json' \
  -d '{"name":"memory","priceCents":1,"stock":10000000,"startsAt":"2020-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z"}' \
  | sed -E 's/.*"id":([0-9]+).*/\1/') || die "could not create the item"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
python3 scripts/mixed-traffic.py --target "$APP_URL" --seconds "$SECONDS_TOTAL" --threads "$THREADS" \
  --item "$item" --close "$CLOSE" >"$OUT/mix.txt" &
MIX_PID=$!
echo "seconds,kB" >"$OUT/rss.csv"
start=$SECONDS
while kill -0 "$MIX_PID" 2>/dev/null; do
  echo "$((SECONDS - start)),$(rss_kb "$PID")" | tee -a "$OUT/rss.csv" >&2
  sleep "$SAMPLE"
done
wait "$MIX_PID" || true
MIX_PID=""
echo "$((SECONDS - start)),$(rss_kb "$PID")" >>"$OUT/rss.csv"
# Label cardinality: a series per client-chosen value would show here.
curl -sf "$APP_URL/metrics" >"$OUT/metrics.prom" || true
log "metric series at the end: $(grep -vc '^#' "$OUT/metrics.prom" || true)"
log "traffic: $(cat "$OUT/mix.txt")"
log "rss (kB): first $(sed -n 2p "$OUT/rss.csv" | cut -d, -f2), last $(tail -n 1 "$OUT/rss.csv" | cut -d, -f2) ($OUT/rss.csv)"
