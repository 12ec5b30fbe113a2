#!/usr/bin/env bash
# `make soak`: load under faults (issue 16), a few minutes, not part of `make test`.
#
# Two release instances share a redis-server of the soak's own (own port, append-only
# file with `appendfsync everysec`, data under $SOAK_OUT/redis) and a database of its
# own on the private Postgres. `loadgen` offers purchases at a fixed rate from
# SOAK_USERS users for SOAK_SECONDS, round-robin over both instances, while beside it
# scripts/mixed-traffic.py sends a little of everything else (listings, /api/limited,
# admin reads, wrong admin tokens, unknown paths) to a second item. Meanwhile, at fixed
# points of the run, one fault at a time:
#   redis_restart     `SHUTDOWN` (the append-only file is fsynced first), then the same
#                     server started again on the same files. Graceful on purpose: a
#                     SIGKILL under `everysec` may lose up to a second of limiter entries,
#                     which no ledger could tell from an over-admission.
#   postgres_outage   the soak's database refuses new connections (`ALLOW_CONNECTIONS
#                     false`) and the app's sessions are terminated, for
#                     SOAK_PG_OUTAGE_SECONDS; then allowed again.
#   instance_kill     instance 1 is SIGKILLed, then started again on its port.
# Each fault is a window of loadgen's report (from the fault until 2 s after the
# service is back): p99 and 5xx by cause per window. After the load, loadgen waits for
# nothing to be pending and one whole reconciler round, then proves from its ledger and
# the stores: no dimension over its limit (an answer lost in the kill counts as an
# admission), no oversell, no duplicate orders, every 200 has its order row, Redis
# agrees with Postgres. Each instance's resident memory (VmRSS) is sampled every 5 s,
# and the surviving instance may not grow by more than SOAK_RSS_GROWTH_MB from the end
# of the warm-up to the end of the load. The summary (markdown) goes to
# $SOAK_OUT/summary.md and stdout; docs/soak.md holds one from this machine.
# Then, once the soak's own processes are stopped, scripts/slowloris.sh (a minute of
# slowloris against an instance of its own, measured; output in $SOAK_OUT/slowloris).
#
# The defaults keep orders flowing through every fault. Each address sends every 10 s
# (1200 addresses at 120/s), one more than the ip rule's 5 per 60 s admits, so the rule
# refuses one send in six all along; refusing more makes a sliding window admit in
# bursts at the start of each minute and nothing in between, where a fault would meet
# only refusals. The 20 000 users take 167 s to send once each, so admissions are first
# purchases nearly to the end, and the stock runs out after the last fault.
#   SOAK_SECONDS=180 SOAK_RATE=120 SOAK_USERS=20000 SOAK_IPS=1200 SOAK_STOCK=14000
#   SOAK_MIX_RATE=40 (0: no mixed traffic) SOAK_PG_OUTAGE_SECONDS=5 SOAK_RSS_GROWTH_MB=32
#   SOAK_OUT=target/soak scripts/soak.sh
# Exits 0 when every check passed, 1 when one failed, 2 when the soak (or the slowloris)
# could not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "soak: $(date +%T) $*" >&2; }
die() { log "error: $*"; exit 2; }
# free_port, wait_for, stop_process, start_app, start_redis_server, make_database, drop_database
. scripts/lib.sh

DURATION=${SOAK_SECONDS:-180}
RATE=${SOAK_RATE:-120}
USERS=${SOAK_USERS:-20000}
IPS=${SOAK_IPS:-1200}
STOCK=${SOAK_STOCK:-14000}
MIX_RATE=${SOAK_MIX_RATE:-40}
PG_OUTAGE=${SOAK_PG_OUTAGE_SECONDS:-5}
RSS_GROWTH_MB=${SOAK_RSS_GROWTH_MB:-32}
OUT=${SOAK_OUT:-target/soak}
[ "$DURATION" -ge 60 ] 2>/dev/null || die "SOAK_SECONDS=$DURATION: at least 60 (three faults and their recoveries)"
ADMIN=soak-admin-token
PREFIX="soak-$(date +%s)"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.log "$OUT"/*.md "$OUT"/started "$OUT"/pid-*

eval "$(scripts/services.sh up 2>/dev/null)"
log "building release binaries"
cargo build --release --locked --workspace --bins >&2
APP=target/release/seckill
LOADGEN=target/release/loadgen

REDIS_PID="" DB_NAME="" LOADGEN_PID="" MIX_PID="" SAMPLER_PID=""
APP_PIDS=("" "")
cleanup() {
  local pid
  for pid in "$SAMPLER_PID" "$MIX_PID" "$LOADGEN_PID" "${APP_PIDS[@]}" "$REDIS_PID"; do
    [ -z "$pid" ] || stop_process "$pid"
  done
  # A fault may have been cut short by a failure: never leave the database closed.
  if [ -n "$DB_NAME" ]; then
    psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS true" >/dev/null 2>&1 || true
    drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { date +%s%3N; }

# --- the soak's own Redis ------------------------------------------------------------------
REDIS_PORT=$(free_port)
REDIS_DIR="$OUT/redis"
rm -rf "$REDIS_DIR"
start_redis() {
  start_redis_server "$REDIS_PORT" "$REDIS_DIR" --appendonly yes --appendfsync everysec \
    || die "redis did not start (see $REDIS_DIR/redis.log)"
  REDIS_PID=$REDIS_SERVER_PID
}
start_redis
REDIS="redis://127.0.0.1:$REDIS_PORT"

# --- the database and the instances ------------------------------------------------------
make_database seckill_soak || die "no database"
PORTS=("$(free_port)" "$(free_port)")
# start_instance I [LOG]: instance I on its port (the same one after a kill).
start_instance() {
  local i=$1
  start_app "$APP" "${PORTS[$i]}" "$OUT/${2:-app-$i.log}" DATABASE_URL="$DB_URL" REDIS_URL="$REDIS" \
    SECKILL_REDIS_KEY_PREFIX="$PREFIX" SECKILL_ADMIN_TOKEN="$ADMIN" SECKILL_WORKERS=2 \
    SECKILL_CONFIG=/nonexistent.toml
  APP_PIDS[i]=$APP_PID
  echo "$APP_PID" >"$OUT/pid-$i"
}
start_instance 0
start_instance 1
URLS=("http://127.0.0.1:${PORTS[0]}" "http://127.0.0.1:${PORTS[1]}")

create_item() {
  curl -sf "${URLS[0]}/admin/api/items" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    -d "{\"name\":\"$1\",\"priceCents\":1,\"stock\":$2,\"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" \
    | sed -E 's/.*"id":([0-9]+).*/\1/'
}
ITEM=$(create_item soak "$STOCK") || die "could not create the soak's item"
MIX_ITEM=$(create_item soak-mixed 10000000) || die "could not create the mixed traffic's item"

# --- memory ----------------------------------------------------------------------------------
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# rss_point LABEL I: instance I's resident memory now, kept for the summary.
rss_point() { echo "$1 $2 $(cat "$OUT/pid-$2") $(rss_kb "$(cat "$OUT/pid-$2")")" >>"$OUT/rss-points.txt"; }
: >"$OUT/rss-points.txt"
echo "ms instance pid kB" >"$OUT/rss.txt"
(
  while :; do
    for i in 0 1; do echo "$(now_ms) $i $(cat "$OUT/pid-$i") $(rss_kb "$(cat "$OUT/pid-$i")")"; done
    sleep 5
  done
) >>"$OUT/rss.txt" &
SAMPLER_PID=$!

# --- the load ------------------------------------------------------------------------------
: >"$OUT/phases.txt"
log "loadgen: $RATE purchases/s from $USERS users ($IPS addresses) for ${DURATION}s, item $ITEM (stock $STOCK)"
"$LOADGEN" --quiet --target "${URLS[0]}" --target "${URLS[1]}" --item "$ITEM" --users "$USERS" --ips "$IPS" \
  --rate "$RATE" --duration "$DURATION" --max-in-flight 4096 --admin-token "$ADMIN" \
  --database-url "$DB_URL" --redis-url "$REDIS" --redis-prefix "$PREFIX" \
  --phases "$OUT/phases.txt" --await-reconciliation 120 \
  --json "$OUT/loadgen.json" --started-file "$OUT/started" >"$OUT/loadgen.txt" 2>&1 &
LOADGEN_PID=$!
wait_for "loadgen's logins" 300 "$LOADGEN_PID" test -e "$OUT/started" || { cat "$OUT/loadgen.txt" >&2; die "loadgen did not start"; }
T0=$(now_ms)
if [ "$MIX_RATE" != 0 ]; then
  python3 scripts/mixed-traffic.py --target "${URLS[0]}" --target "${URLS[1]}" --seconds "$DURATION" \
    --threads 4 --rate "$MIX_RATE" --item "$MIX_ITEM" --admin-token "$ADMIN" >"$OUT/mixed.txt" 2>&1 &
  MIX_PID=$!
fi

# at FRACTION: waits until that fraction of the load's duration has passed.
at() {
  local due
  due=$(awk -v t0="$T0" -v d="$DURATION" -v f="$1" 'BEGIN { printf "%.0f", t0 + d * 1000 * f }')
  while [ "$(now_ms)" -lt "$due" ]; do sleep 0.1; done
}
# phase NAME FROM_MS TO_MS: a window of loadgen's report.
phase() { echo "$1 $2 $3" >>"$OUT/phases.txt"; }
# recovered NAME FROM_MS: the fault's window ends 2 s after the service is back.
recovered() {
  local back
  back=$(now_ms)
  log "$1: back after $((back - $2))ms"
  echo "$1 $((back - $2))" >>"$OUT/recovery.txt"
  sleep 2 # the fault's tail belongs to its window (a fixed length, not a readiness wait)
  phase "$1" "$2" "$(now_ms)"
}
: >"$OUT/recovery.txt"

at 0.10
steady_from=$(now_ms)
at 0.20
phase steady "$steady_from" "$(now_ms)"
rss_point warm 0
rss_point warm 1

at 0.25
log "redis_restart: SHUTDOWN (append-only file fsynced), then start again"
from=$(now_ms)
redis-cli -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || true
wait "$REDIS_PID" 2>/dev/null || true
start_redis
recovered redis_restart "$from"

at 0.45
log "postgres_outage: database $DB_NAME refuses connections, the app's sessions terminated, for ${PG_OUTAGE}s"
from=$(now_ms)
psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS false" >/dev/null
psql "$DB_ADMIN_URL" -qAtc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$DB_NAME'" \
  >"$OUT/terminated.txt"
log "postgres_outage: $(cat "$OUT/terminated.txt") sessions terminated"
sleep "$PG_OUTAGE" # the outage's length
psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS true" >/dev/null
recovered postgres_outage "$from"

at 0.65
rss_point before_kill 1
log "instance_kill: SIGKILL instance 1 (pid ${APP_PIDS[1]}), then start it again on port ${PORTS[1]}"
from=$(now_ms)
kill -KILL "${APP_PIDS[1]}"
wait "${APP_PIDS[1]}" 2>/dev/null || true
APP_PIDS[1]=""
start_instance 1 app-1-restarted.log
recovered instance_kill "$from"
rss_point restarted 1

at 0.80
after_from=$(now_ms)
at 1.0
phase after "$after_from" "$(now_ms)"
rss_point end 0
rss_point end 1

log "load over; loadgen waits for the reconciler, then checks the ledger and the stores"
rc=0
wait "$LOADGEN_PID" || rc=$?
LOADGEN_PID=""
[ -z "$MIX_PID" ] || { wait "$MIX_PID" || true; MIX_PID=""; }
[ "$rc" -le 1 ] || { cat "$OUT/loadgen.txt" >&2; die "loadgen could not run"; }
# When the orders were written, per second: read beside the fault windows.
psql "$DB_URL" -qAtc "SELECT extract(epoch FROM date_trunc('second', created_at))::bigint, count(*)
  FROM orders WHERE item_id = $ITEM GROUP BY 1 ORDER BY 1" >"$OUT/orders-per-second.txt" || true

# --- the summary -----------------------------------------------------------------------------
python3 - "$OUT" "$RSS_GROWTH_MB" "$DURATION" "$RATE" "$USERS" "$IPS" "$STOCK" "$MIX_RATE" "$PG_OUTAGE" >"$OUT/summary.md" <<'PY' || rc=1
import json, sys
out, growth_mb = sys.argv[1], float(sys.argv[2])
duration, rate, users, ips, stock, mix, pg = sys.argv[3:10]
r = json.load(open(f"{out}/loadgen.json"))
recovery = dict(l.split() for l in open(f"{out}/recovery.txt"))
points = {}
for line in open(f"{out}/rss-points.txt"):
    label, inst, pid, kb = line.split()
    points[(label, inst)] = (pid, int(kb) / 1024)
names = {
    "steady": "none (steady state, before the faults)",
    "redis_restart": "Redis restart (`SHUTDOWN`, AOF fsynced)",
    "postgres_outage": f"Postgres unavailable {pg} s (connections refused, sessions terminated)",
    "instance_kill": "SIGKILL instance 1, restarted",
    "after": "none (after the faults)",
}
def causes(m):
    return ", ".join(f"{k}: {v}" for k, v in m.items()) or "-"
print(f"Soak: {duration} s at {rate} purchases/s from {users} users ({ips} addresses), item stock {stock}, "
      f"two instances; mixed traffic {mix} req/s beside it.\n")
print("| fault | window | back after | requests | p99 | max | 5xx and errors by cause |")
print("|---|---|---|---|---|---|---|")
for p in r["phases"]:
    back = f"{int(recovery[p['name']]) / 1000:.1f} s" if p["name"] in recovery else "-"
    print(f"| {names.get(p['name'], p['name'])} | {p['from_s']:.0f}–{p['to_s']:.0f} s | {back} | {p['requests']} "
          f"| {p['latency']['p99_ms']:.1f} ms | {p['latency']['max_ms']:.0f} ms | {causes(p['by_cause'])} |")
l = r["latency"]
print(f"| whole run | 0–{r['seconds']:.0f} s | - | {r['requests']} | {l['p99_ms']:.1f} ms | {l['max_ms']:.0f} ms "
      f"| {causes(r['by_cause'])} |")
print()
print("Answers: " + ", ".join(f"{k}: {v}" for k, v in r["by_status"].items())
      + "; refused by dimension: " + (", ".join(f"{k}: {v}" for k, v in r["by_dimension"].items()) or "none")
      + f"; answers lost: {r['unknown_outcomes']}; sends dropped: {r['dropped']}.\n")
print("| ledger check | result | detail |")
print("|---|---|---|")
for c in r["checks"]:
    print(f"| {c['name']} | {'ok' if c['passed'] else '**FAILED**'} | {c['detail']} |")
print()
print("| instance | RSS after warm-up | before the kill | after the restart | RSS at the end |")
print("|---|---|---|---|---|")
mb = lambda key: f"{points[key][1]:.1f} MB" if key in points else "-"
for inst in ("0", "1"):
    print(f"| {inst} | {mb(('warm', inst))} | {mb(('before_kill', inst))} | {mb(('restarted', inst))} | {mb(('end', inst))} |")
ok = r["passed"] if "passed" in r else all(c["passed"] for c in r["checks"])
grown = points[("end", "0")][1] - points[("warm", "0")][1]
print(f"\nInstance 0 (never restarted) grew {grown:+.1f} MB from warm-up to the end (bound {growth_mb:.0f} MB).")
sys.exit(0 if ok and grown <= growth_mb else 1)
PY
cat "$OUT/summary.md"
if [ "$rc" -eq 0 ]; then log "passed"; else log "FAILED (see $OUT/loadgen.txt, $OUT/summary.md)"; fi

# The slowloris, on two cores of its own: the soak's instances and Redis stop first.
cleanup
SAMPLER_PID="" MIX_PID="" LOADGEN_PID="" APP_PIDS=("" "") REDIS_PID="" DB_NAME=""
SLOWLORIS_OUT="$OUT/slowloris" scripts/slowloris.sh || { log "the slowloris could not run"; [ "$rc" -ne 0 ] || rc=2; }
exit "$rc"
