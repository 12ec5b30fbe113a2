#!/usr/bin/env bash
# `make soak`: load under faults (issues 16 and 27), a few minutes, not part of `make test`.
#
# Two release instances share a redis-server of the soak's own (own port, append-only
# file with `appendfsync everysec`, data under $SOAK_OUT/redis) and a database of its
# own on the private Postgres. `loadgen` offers purchases at a fixed rate from
# SOAK_USERS users for SOAK_SECONDS, round-robin over both instances; beside them it
# sends a side load to the policies that keep limiting in process while Redis is away
# (fail mode `local`): `GET /api/limited` from three client ids asking for the sliding
# log and one for the token bucket, and `GET /api/orders/mine` from two users, each key
# at SOAK_SIDE_RATE per second, started 20 s apart so the logs meet a fault in different
# phases of their windows. scripts/mixed-traffic.py sends a little of everything else
# (listings, /api/limited, admin reads, wrong admin tokens, unknown paths) to a second
# item. loadgen samples the instances' shedding, breaker and limiter-mode metrics every
# 200 ms. At fixed points of the run, one fault at a time:
#   redis_shutdown    `SHUTDOWN` (the append-only file is fsynced first), SOAK_REDIS_OUTAGE_SECONDS
#                     down, then the same server on the same files; meanwhile 40 wrong
#                     admin tokens from one new address. The window ends 2 s after both
#                     instances decide in Redis again.
#   pg_slow           a trigger on the orders table sleeps SOAK_PG_SLOW_MS per insert
#                     statement (one per group commit) for SOAK_PG_SLOW_SECONDS.
#   pg_outage         the soak's database refuses new connections (`ALLOW_CONNECTIONS
#                     false`) and the app's sessions are terminated, for
#                     SOAK_PG_OUTAGE_SECONDS.
#   redis_kill        SIGKILL of Redis, SOAK_REDIS_KILL_SECONDS down, then started again:
#                     up to a second of writes may be lost, so no ledger claim spans it.
#   instance_kill     instance 1 is SIGKILLed, then started again on its port.
# Each fault is a window of loadgen's report (from the fault until 2 s after the
# service is back): p99, and every answer by status and code with its own latency; a
# Redis outage has a second one, NAME.down, from its process's exit to its start.
# The Redis outages are written down for loadgen's checks too (scripts/soak-summary.py
# and docs/soak.md say what each one proves). After the load, loadgen waits for nothing
# to be pending and one whole reconciler round, then proves from its ledger and the
# stores: no dimension over its limit (an answer lost in the kill counts as possibly
# admitted), the side load's keys within the fallback bounds of docs/limiter.md, no
# oversell, no duplicate orders, every 200 has its order row, Redis agrees with
# Postgres. Each instance's resident memory (VmRSS) and the load average are sampled
# every 5 s; the surviving
# instance may not grow by more than SOAK_RSS_GROWTH_MB from the end of the warm-up to
# the end of the load. scripts/soak-summary.py judges the faults' claims from loadgen's
# report and writes the summary (markdown) to $SOAK_OUT/summary.md and stdout;
# docs/soak.md holds one from this machine. Then, once the soak's own processes are
# stopped, scripts/slowloris.sh (a minute of slowloris against an instance of its own,
# measured; output in $SOAK_OUT/slowloris).
#
# The defaults keep orders flowing through every fault. Each address sends every 10 s
# (1200 addresses at 120/s), one more than the ip rule's 5 per 60 s admits, so the rule
# refuses one send in six all along; refusing more makes a sliding window admit in
# bursts at the start of each minute and nothing in between, where a fault would meet
# only refusals. The 24 000 users take 200 s to send once each, so admissions are first
# purchases nearly to the end, and the stock runs out after the last fault.
#   SOAK_SECONDS=210 SOAK_RATE=120 SOAK_USERS=24000 SOAK_IPS=1200 SOAK_STOCK=16000
#   SOAK_MIX_RATE=40 (0: no mixed traffic) SOAK_SIDE_RATE=12 (0: no side load)
#   SOAK_REDIS_OUTAGE_SECONDS=10 SOAK_REDIS_KILL_SECONDS=3 SOAK_PG_SLOW_SECONDS=20
#   SOAK_PG_SLOW_MS=200 SOAK_PG_OUTAGE_SECONDS=10 SOAK_RSS_GROWTH_MB=32
#   SOAK_SLOWLORIS=1 (0: no slowloris) SOAK_OUT=target/soak scripts/soak.sh
# Exits 0 when every check passed, 1 when one failed, 2 when the soak (or the slowloris)
# could not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "soak: $(date +%T) $*" >&2; }
die() { log "error: $*"; exit 2; }
# free_port, wait_for, stop_process, start_app, start_redis_server, make_database, drop_database
. scripts/lib.sh

DURATION=${SOAK_SECONDS:-210}
RATE=${SOAK_RATE:-120}
USERS=${SOAK_USERS:-24000}
IPS=${SOAK_IPS:-1200}
STOCK=${SOAK_STOCK:-16000}
MIX_RATE=${SOAK_MIX_RATE:-40}
SIDE_RATE=${SOAK_SIDE_RATE:-12}
REDIS_OUTAGE=${SOAK_REDIS_OUTAGE_SECONDS:-10}
REDIS_KILL=${SOAK_REDIS_KILL_SECONDS:-3}
PG_SLOW=${SOAK_PG_SLOW_SECONDS:-20}
PG_SLOW_MS=${SOAK_PG_SLOW_MS:-200}
PG_OUTAGE=${SOAK_PG_OUTAGE_SECONDS:-10}
RSS_GROWTH_MB=${SOAK_RSS_GROWTH_MB:-32}
SLOWLORIS=${SOAK_SLOWLORIS:-1}
OUT=${SOAK_OUT:-target/soak}
[ "$DURATION" -ge 150 ] 2>/dev/null || die "SOAK_SECONDS=$DURATION: at least 150 (five faults and their recoveries)"
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
# Beside it, the machine's load average: anything else on the two cores (a build) shows.
(
  while :; do
    for i in 0 1; do echo "$(now_ms) $i $(cat "$OUT/pid-$i") $(rss_kb "$(cat "$OUT/pid-$i")")"; done
    echo "$(now_ms) $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT/loadavg.txt"
    sleep 5
  done
) >>"$OUT/rss.txt" &
SAMPLER_PID=$!

# --- the load ------------------------------------------------------------------------------
: >"$OUT/phases.txt"
: >"$OUT/outages.txt"
SIDE=()
if [ "$SIDE_RATE" != 0 ]; then
  SIDE=(--limited sliding_window=3 --limited token_bucket=1 --orders-read-users 2
    --side-rate "$SIDE_RATE" --side-stagger 20)
fi
log "loadgen: $RATE purchases/s from $USERS users ($IPS addresses) for ${DURATION}s, item $ITEM (stock $STOCK)"
"$LOADGEN" --quiet --target "${URLS[0]}" --target "${URLS[1]}" --item "$ITEM" --users "$USERS" --ips "$IPS" \
  --rate "$RATE" --duration "$DURATION" --max-in-flight 4096 --admin-token "$ADMIN" \
  --database-url "$DB_URL" --redis-url "$REDIS" --redis-prefix "$PREFIX" \
  --phases "$OUT/phases.txt" --redis-outages "$OUT/outages.txt" --await-reconciliation 120 \
  "${SIDE[@]}" \
  --sample-metric seckill_shedding --sample-metric seckill_orders_breaker_state \
  --sample-metric 'seckill_limiter_mode{mode="local"' \
  --json "$OUT/loadgen.json" --started-file "$OUT/started" >"$OUT/loadgen.txt" 2>&1 &
LOADGEN_PID=$!
wait_for "loadgen's logins" 300 "$LOADGEN_PID" test -e "$OUT/started" || { cat "$OUT/loadgen.txt" >&2; die "loadgen did not start"; }
T0=$(now_ms)
if [ "$MIX_RATE" != 0 ]; then
  python3 scripts/mixed-traffic.py --target "${URLS[0]}" --target "${URLS[1]}" --seconds "$DURATION" \
    --threads 4 --rate "$MIX_RATE" --item "$MIX_ITEM" --admin-token "$ADMIN" --errors "$OUT/mixed-errors.txt" \
    >"$OUT/mixed.txt" 2>&1 &
  MIX_PID=$!
fi

# at FRACTION: waits until that fraction of the load's duration has passed.
at() {
  local due
  due=$(awk -v t0="$T0" -v d="$DURATION" -v f="$1" 'BEGIN { printf "%.0f", t0 + d * 1000 * f }')
  while [ "$(now_ms)" -lt "$due" ]; do sleep 0.1; done
}
# until_ms MS: waits until that instant.
until_ms() { while [ "$(now_ms)" -lt "$1" ]; do sleep 0.05; done; }
# phase NAME FROM_MS TO_MS: a window of loadgen's report.
phase() { echo "$1 $2 $3" >>"$OUT/phases.txt"; }
# fault NAME FROM_MS OFF_MS BACK_MS: when a fault began, was lifted, and the service was
# back (for the summary); then its window, until 2 s after the service is back.
fault() {
  log "$1: back $(($4 - $2))ms after the fault began, $(($4 - $3))ms after it was lifted"
  echo "$1 $2 $3 $4" >>"$OUT/faults.txt"
  sleep 2 # the fault's tail belongs to its window (a fixed length, not a readiness wait)
  phase "$1" "$2" "$(now_ms)"
}
: >"$OUT/faults.txt"

# shellcheck disable=SC2317 # both are called through wait_for
# deciding_in_redis URL: whether the instance's last decisions of both side policies
# were Redis's (`seckill_limiter_mode`, whichever order its labels come in).
deciding_in_redis() {
  local text policy
  text=$(curl -fsS --max-time 1 "$1/metrics") || return 1
  for policy in limited orders_read; do
    grep -E "^seckill_limiter_mode\{" <<<"$text" | grep -F "policy=\"$policy\"" | grep -F 'mode="redis"' \
      | grep -qE '\} 1$' || return 1
  done
}
# shellcheck disable=SC2317
both_deciding_in_redis() { deciding_in_redis "${URLS[0]}" && deciding_in_redis "${URLS[1]}"; }
# redis_outage KIND NAME FROM_MS DOWN_MS: Redis is down since DOWN_MS; started again once
# the outage has lasted its length, then waited for until both instances decide in it
# again (every side policy is asked several times a second). Written down for loadgen's
# checks (KIND kept or lost) and as a fault.
redis_outage() {
  local kind=$1 name=$2 from=$3 down=$4 length=$5 up back
  until_ms $((down + length * 1000))
  up=$(now_ms)
  start_redis
  if [ "$SIDE_RATE" != 0 ]; then
    wait_for "$name: both instances deciding in Redis" 30 "" both_deciding_in_redis \
      || log "$name: the instances did not both decide in Redis within 30 s"
  fi
  back=$(now_ms)
  fault "$name" "$from" "$up" "$back"
  echo "$kind $from $down $up $(now_ms)" >>"$OUT/outages.txt"
  phase "$name.down" "$down" "$up" # a window of its own: Redis's process gone
}
# admin_burst COUNT: wrong admin tokens from one new address, alternating instances;
# the answers by status in admin-burst.txt (401: compared and refused; 429: locked out).
admin_burst() {
  local i
  for ((i = 0; i < $1; i++)); do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 2 "${URLS[$((i % 2))]}/admin/api/me" \
      -H "Authorization: Bearer wrong-soak-$i" -H "X-Forwarded-For: 10.250.0.1"
  done | sort | uniq -c | awk '{ print $2, $1 }' >"$OUT/admin-burst.txt"
}

at 0.10
steady_from=$(now_ms)
at 0.20
phase steady "$steady_from" "$(now_ms)"
rss_point warm 0
rss_point warm 1

at 0.22
log "redis_shutdown: SHUTDOWN (append-only file fsynced), ${REDIS_OUTAGE}s down, then the same server again"
from=$(now_ms)
redis-cli -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || true
wait "$REDIS_PID" 2>/dev/null || true
down=$(now_ms)
sleep 1
admin_burst 40
log "redis_shutdown: wrong admin tokens from one address: $(tr '\n' ' ' <"$OUT/admin-burst.txt")"
redis_outage kept redis_shutdown "$from" "$down" "$REDIS_OUTAGE"

at 0.30
log "pg_slow: every insert into orders sleeps ${PG_SLOW_MS}ms for ${PG_SLOW}s"
from=$(now_ms)
psql "$DB_URL" -q >/dev/null <<SQL
CREATE FUNCTION soak_slow_commit() RETURNS trigger LANGUAGE plpgsql AS \$\$
  BEGIN PERFORM pg_sleep($PG_SLOW_MS / 1000.0); RETURN NULL; END \$\$;
CREATE TRIGGER soak_slow_commit BEFORE INSERT ON orders
  FOR EACH STATEMENT EXECUTE FUNCTION soak_slow_commit();
SQL
until_ms $((from + PG_SLOW * 1000))
psql "$DB_URL" -qc "DROP TRIGGER soak_slow_commit ON orders; DROP FUNCTION soak_slow_commit()" >/dev/null
off=$(now_ms)
fault pg_slow "$from" "$off" "$off"

at 0.50
log "pg_outage: database $DB_NAME refuses connections, the app's sessions terminated, for ${PG_OUTAGE}s"
from=$(now_ms)
psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS false" >/dev/null
psql "$DB_ADMIN_URL" -qAtc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$DB_NAME'" \
  >"$OUT/terminated.txt"
log "pg_outage: $(cat "$OUT/terminated.txt") sessions terminated"
until_ms $((from + PG_OUTAGE * 1000))
psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS true" >/dev/null
off=$(now_ms)
fault pg_outage "$from" "$off" "$off"

at 0.62
log "redis_kill: SIGKILL of Redis, ${REDIS_KILL}s down, then started again on its files"
from=$(now_ms)
kill -KILL "$REDIS_PID"
wait "$REDIS_PID" 2>/dev/null || true
redis_outage lost redis_kill "$from" "$(now_ms)" "$REDIS_KILL"

at 0.72
rss_point before_kill 1
log "instance_kill: SIGKILL instance 1 (pid ${APP_PIDS[1]}), then start it again on port ${PORTS[1]}"
from=$(now_ms)
kill -KILL "${APP_PIDS[1]}"
wait "${APP_PIDS[1]}" 2>/dev/null || true
APP_PIDS[1]=""
off=$(now_ms)
start_instance 1 app-1-restarted.log
fault instance_kill "$from" "$off" "$(now_ms)"
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
python3 scripts/soak-summary.py "$OUT" --growth-mb "$RSS_GROWTH_MB" --seconds "$DURATION" --rate "$RATE" \
  --users "$USERS" --ips "$IPS" --stock "$STOCK" --mix-rate "$MIX_RATE" --side-rate "$SIDE_RATE" \
  --redis-outage "$REDIS_OUTAGE" --redis-kill "$REDIS_KILL" --pg-slow "$PG_SLOW" --pg-slow-ms "$PG_SLOW_MS" \
  --pg-outage "$PG_OUTAGE" >"$OUT/summary.md" || rc=1
cat "$OUT/summary.md"
if [ "$rc" -eq 0 ]; then log "passed"; else log "FAILED (see $OUT/loadgen.txt, $OUT/summary.md)"; fi

# The slowloris, on two cores of its own: the soak's instances and Redis stop first.
cleanup
SAMPLER_PID="" MIX_PID="" LOADGEN_PID="" APP_PIDS=("" "") REDIS_PID="" DB_NAME=""
[ "$SLOWLORIS" != 0 ] || exit "$rc"
SLOWLORIS_OUT="$OUT/slowloris" scripts/slowloris.sh || { log "the slowloris could not run"; [ "$rc" -ne 0 ] || rc=2; }
exit "$rc"
