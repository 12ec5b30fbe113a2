#!/usr/bin/env bash
# `make bench`: the performance tables of docs/performance.md, from one run on this machine.
#
# Builds release, starts the private services, then for each scenario starts fresh app
# instances (own Redis key prefix, own item, own database) on loopback, drives them with
# `loadgen` (closed model, fixed concurrency and duration, unless said otherwise) and
# keeps its JSON report. Beside the app runs `ceiling` (loadtest/ceiling), a minimal
# server doing only the app's unavoidable work per request, so each figure has its
# ceiling from the same run. The app runs at its default log level and format: the
# figures are what users get. Prints a table of scenarios and a table of ratios with
# their targets. Everything stops by itself; traffic only goes to 127.0.0.1.
#
# Orders, open model (issue 13): closed-loop figures measure queueing, so orders are also
# offered at a fixed rate, whatever the answers take, each request by a user and from an
# address never seen before (so user and ip limits never refuse: every request is a real
# order), on one item with stock to spare, `api` raised in the scenario's own config
# (real user 3/60 s and ip 5/60 s rules). A non-200 answer, a dropped send or a 200
# without its order in Postgres (counted before and after) fails the run.
#   orders_open_1000     1000/s for 10 s, api 2000/s: p50/p99/max, target p99 < 10 ms.
#   orders_max_open      the offered rate stepped up (3 s a step, new users each step)
#                        until a step's p99 reaches 10 ms or it has a non-200 answer or a
#                        dropped send; the last good step is the figure, compared with
#                        the limiter + reservation ceiling ("POST /seckill, 3 dimensions":
#                        users who already bought, 409 ALREADY_PURCHASED, closed model),
#                        target >= 0.40 of it.
#   orders_max_open_2x   the same over two instances.
#   orders_open_durable  orders_open_1000 against a second Postgres cluster the script
#                        starts itself with fsync=on and synchronous_commit=on (under
#                        $BENCH_OUT/pg-durable, stopped and removed at the end).
# Each orders run is preceded by an unmeasured second at its first rate (fresh users), so
# the app's lazily opened Postgres connections are not counted as latency.
#
#   BENCH_ONLY="seckill_three orders_max_open" (run only these scenarios; names as in the
#   table: constant limiter_only ceiling_limited seckill_off seckill_one seckill_three
#   seckill_three_2x refused refused_api sold_out stampede ledger_2x orders evalsha
#   orders_open_1000 orders_max_open orders_max_open_2x orders_open_durable
#   cluster_one_sale cluster_many_sales)
#   BENCH_CLUSTER_PORT=7401 (the first of the 6 ports of cluster_one_sale's own cluster)
#   BENCH_OPEN_RATES="1000 1500 2000 3000 4000 5000 6000 8000 10000 12000" (integers/s)
#   BENCH_OPEN_STEP_SECONDS=3 BENCH_OPEN_MAX_IN_FLIGHT=1024 (sends beyond it are dropped)
#   BENCH_SECONDS=8 BENCH_CONCURRENCY=64 BENCH_USERS=2000 scripts/bench.sh
#   BENCH_REFUSED_USERS=10000 (users of the scenario refused mostly by api)
#   BENCH_STAMPEDE_USERS=20000 BENCH_STAMPEDE_RATE=15000 (the stampede's offered req/s)
#   BENCH_STAMPEDE_MAX_IN_FLIGHT=1024 BENCH_PORT_BASE=18081 (ports BASE..BASE+3: two
#   instances, the ceiling, the durable Postgres)
#   BENCH_PROFILE="refused_api ceiling_refused" (perf record -g of those runs' servers,
#   into target/bench/NAME.perf.data; needs linux-perf)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }
# start_app, wait_for, stop_process, port_in_use, make_database, drop_database, pg_bin,
# pg_user, as_pg
. scripts/lib.sh

SECONDS_EACH=${BENCH_SECONDS:-8}
CONCURRENCY=${BENCH_CONCURRENCY:-64}
USERS=${BENCH_USERS:-2000}
# Refused mostly by `api`: enough users that none runs out of its own quota (2 left per
# minute after buying) while api admits 1000/s, for runs up to ~20 s.
REFUSED_USERS=${BENCH_REFUSED_USERS:-10000}
STAMPEDE_USERS=${BENCH_STAMPEDE_USERS:-20000}
STAMPEDE_RATE=${BENCH_STAMPEDE_RATE:-15000}
# Open model: sends falling due while this many are in flight are dropped and counted.
STAMPEDE_MAX_IN_FLIGHT=${BENCH_STAMPEDE_MAX_IN_FLIGHT:-1024}
# Orders, open model (see above). The p99 bound is the issue's target, not a knob.
OPEN_RATES=${BENCH_OPEN_RATES:-1000 1500 2000 3000 4000 5000 6000 8000 10000 12000}
OPEN_STEP_SECONDS=${BENCH_OPEN_STEP_SECONDS:-3}
OPEN_MAX_IN_FLIGHT=${BENCH_OPEN_MAX_IN_FLIGHT:-1024}
OPEN_P99_MS=10
BENCH_ONLY=${BENCH_ONLY:-}
OUT=${BENCH_OUT:-target/bench}
# Two app instances and the ceiling on consecutive loopback ports.
PORT_BASE=${BENCH_PORT_BASE:-18081}
PORTS=("$PORT_BASE" $((PORT_BASE + 1)))
CEILING_PORT=$((PORT_BASE + 2))
DURABLE_PG_PORT=$((PORT_BASE + 3))
ADMIN=bench-admin-token
# Checks in the ledger are off for runs whose limits are raised out of the way.
NO_LIMITS=(--user-limit 1000000000 --ip-limit 1000000000 --api-limit 1000000000)
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.cpu "$OUT"/*.prom "$OUT"/*.started "$OUT"/*.steps "$OUT"/*.orders

# want NAME...: whether any of these scenarios is to run (all, unless BENCH_ONLY names some).
want() {
  [ -z "$BENCH_ONLY" ] && return 0
  local name
  for name in "$@"; do [[ " $BENCH_ONLY " == *" $name "* ]] && return 0; done
  return 1
}

eval "$(scripts/services.sh up)"
# Every scenario gets a database of its own: rate-limit rules are seeded from the
# settings only into an empty database (then Postgres is their truth), and benchmark
# items never show up in the development database.
DB_BASE_URL=${DATABASE_URL%/*}
ADMIN_DB_URL="$DB_BASE_URL/postgres"
BENCH_DBS=()
# The Postgres server the next start_instances creates its database on (the durable
# scenario points it at its own cluster, whose databases go with it).
DB_BASE=$DB_BASE_URL
log "building release binaries"
cargo build --release --locked --workspace --bins >&2
# BENCH_APP: another build of the app (e.g. `--no-default-features`, glibc malloc).
APP=${BENCH_APP:-target/release/seckill}
LOADGEN=target/release/loadgen
CEILING=target/release/ceiling
CLK_TCK=$(getconf CLK_TCK)

# write_config FILE MODE [API_PER_SEC]: a limiter configuration for the seckill policy:
# "off", "one" (api only) or "three", thresholds far above the load, so they measure the
# cost of deciding, not of refusing; or "real": the default rules (user 3 per 60 s, ip 5
# per 60 s) with `api` at API_PER_SEC, for the open-model orders.
write_config() {
  local file=$1 mode=$2 api=${3:-1000000000} enabled=true scope=global
  [ "$mode" = off ] && enabled=false
  # three_per_item: "three" with the policy's keys in each item's slot (issue 15).
  [ "$mode" = three_per_item ] && mode=three && scope=per_item
  {
    echo '[limiter.policies.seckill]'
    echo "scope = \"$scope\""
    echo 'algorithm = "sliding_window"'
    echo 'fail_mode = "closed"'
    echo "enabled = $enabled"
    echo '[[limiter.policies.seckill.rules]]'
    echo 'name = "api"'
    echo 'key = { literal = "purchase" }'
    echo 'window_ms = 1000'
    echo "threshold = $api"
    echo 'message = "System busy, please try again later"'
    if [ "$mode" = real ]; then
      echo '[[limiter.policies.seckill.rules]]'
      echo 'name = "user"'
      echo 'key = "user"'
      echo 'window_ms = 60000'
      echo 'threshold = 3'
      echo 'message = "No duplicate submissions"'
      echo '[[limiter.policies.seckill.rules]]'
      echo 'name = "ip"'
      echo 'key = "ip"'
      echo 'window_ms = 60000'
      echo 'threshold = 5'
      echo 'message = "Too frequent, please slow down"'
    fi
    if [ "$mode" = three ]; then
      for rule in user ip; do
        echo '[[limiter.policies.seckill.rules]]'
        echo "name = \"$rule\""
        echo "key = \"$rule\""
        echo 'window_ms = 60000'
        echo 'threshold = 1000000000'
        echo "message = \"$rule limit\""
      done
    fi
    echo '[limiter.policies.limited]'
    echo 'algorithm = "sliding_window"'
    echo '[[limiter.policies.limited.rules]]'
    echo 'name = "client"'
    echo 'key = "client_id"'
    echo 'window_ms = 60000'
    echo 'threshold = 1000000000'
    echo 'message = "Rate limit exceeded, slow down"'
  } > "$file"
}
for mode in off one three three_per_item; do write_config "$OUT/$mode.toml" "$mode"; done
# Orders at 1000/s under an api limit of 2000/s; the step search with api out of the way.
write_config "$OUT/orders_open.toml" real 2000
write_config "$OUT/orders_max_open.toml" real 1000000000

# A port something else listens on would answer our readiness checks: refuse to start.
ensure_port_free() {
  ! port_in_use "$1" || die "port $1 is already in use (set BENCH_PORT_BASE to move the bench's ports)"
}
# Seconds for start_app's readiness poll (the app and the ceiling).
READY_DEADLINE=30

PIDS=()
PREFIX=""
INSTANCE_DB_URL=""
# start_instances COUNT [CONFIG_FILE [ENV=VALUE...]]: fresh instances sharing one fresh
# key prefix and one fresh database, at the default log level and format.
start_instances() {
  local count=$1 config=${2:-/nonexistent.toml} i
  shift $(($# < 2 ? $# : 2))
  PREFIX="bench-$(date +%s%N)"
  make_database seckill_bench "$DB_BASE/postgres" || die "could not create the scenario's database"
  [ "$DB_BASE" != "$DB_BASE_URL" ] || BENCH_DBS+=("$DB_NAME")
  INSTANCE_DB_URL=$DB_URL
  PIDS=()
  for ((i = 0; i < count; i++)); do
    ensure_port_free "${PORTS[$i]}"
    start_app "$APP" "${PORTS[$i]}" "$OUT/app-$i.log" DATABASE_URL="$INSTANCE_DB_URL" \
      SECKILL_CONFIG="$config" SECKILL_REDIS_KEY_PREFIX="$PREFIX" \
      SECKILL_ADMIN_TOKEN=$ADMIN SECKILL_WORKERS=2 "$@"
    PIDS+=("$APP_PID")
  done
}

stop_instances() {
  [ ${#PIDS[@]} -gt 0 ] || return 0
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
  forget_keys
}

# Deletes the finished scenario's Redis keys (its own prefix). Left behind, a run's
# hundreds of thousands of keys would make every later AOF rewrite of the shared Redis
# copy them: a forked child busy for seconds on a 2-core machine, during the next runs.
forget_keys() {
  local port
  port=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
  redis-cli -p "$port" --scan --pattern "$PREFIX:*" | xargs -r -n 1000 redis-cli -p "$port" UNLINK >/dev/null
}

CEILING_PID=""
# start_ceiling [ENV=VALUE...]: the ceiling server on a fresh key prefix (empty limiter
# keys), two workers like the app.
start_ceiling() {
  ensure_port_free "$CEILING_PORT"
  READY_PATH=/health/live start_app "$CEILING" "$CEILING_PORT" "$OUT/ceiling.log" \
    SECKILL_REDIS_KEY_PREFIX="ceiling-$(date +%s%N)" SECKILL_WORKERS=2 "$@"
  CEILING_PID=$APP_PID
}
stop_ceiling() {
  [ -n "$CEILING_PID" ] || return 0
  stop_process "$CEILING_PID"
  CEILING_PID=""
}

# A Redis Cluster of the bench's own (3 masters, 3 replicas on CLUSTER_PORT..+5, data
# under $OUT), so its figures and its keys never mix with the development cluster's.
CLUSTER_PORT=${BENCH_CLUSTER_PORT:-7401}
CLUSTER_UP=""
cluster_services() {
  SECKILL_LOCAL_CLUSTER_PORT=$CLUSTER_PORT SECKILL_LOCAL_CLUSTER_DIR="$PWD/$OUT/redis-cluster" \
    scripts/services.sh "$@"
}
start_cluster() {
  CLUSTER_NODES=$(cluster_services cluster-up | sed 's/^export SECKILL_REDIS_CLUSTER_NODES=//')
  CLUSTER_UP=1
}
stop_cluster() {
  [ -n "$CLUSTER_UP" ] || return 0
  cluster_services cluster-down --wipe >/dev/null 2>&1 || true
  CLUSTER_UP=""
}
# The cluster's masters' ports, one per line.
cluster_masters() {
  local port
  for ((port = CLUSTER_PORT; port < CLUSTER_PORT + 6; port++)); do
    [ "$(redis-cli -p "$port" role 2>/dev/null | head -1)" = master ] && echo "$port"
  done
}
# Zeroes every master's command statistics; then cluster_calls writes "PORT CALLS" per
# master: the script calls (EVALSHA: limiter decisions and reservations) it ran since.
# Scripts, not all commands: commandstats also counts the commands a script runs inside
# Redis, which would weigh a script by its length.
cluster_reset_stats() {
  local port
  for port in $(cluster_masters); do redis-cli -p "$port" config resetstat >/dev/null; done
}
cluster_calls() {
  local port
  for port in $(cluster_masters); do
    echo "$port $(redis-cli -p "$port" info commandstats | tr -d '\r' |
      awk -F'[:=,]' '$1 == "cmdstat_evalsha" { n += $3 } END { print n + 0 }')"
  done
}

# The durable Postgres cluster: its own data folder, port and settings, run the way
# scripts/services.sh runs the private one (as the `postgres` user when we are root:
# pg_bin, pg_user and as_pg come from scripts/lib.sh).
DURABLE_DIR=""
start_durable_pg() {
  local bin dir
  bin=$(pg_bin)
  [ -n "$bin" ] || die "no Postgres server binaries (scripts/services.sh installs them)"
  ensure_port_free "$DURABLE_PG_PORT"
  dir="$PWD/$OUT/pg-durable"
  # The data folder must be reachable by the Postgres user (as services.sh's pg_dir).
  if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$PWD/$OUT"; then
    dir="/var/tmp/seckill-bench-$(echo "$PWD" | md5sum | cut -c1-12)/pg-durable"
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  DURABLE_DIR=$dir
  [ "$(id -u)" -ne 0 ] || chown -R postgres: "$dir"
  chmod 700 "$dir"
  # --no-sync skips initdb's own flush only (open_orders flushes before it measures);
  # the server itself runs with fsync on.
  as_pg "$bin/initdb" -D "$dir" -U "$(pg_user)" --auth=trust -E UTF8 --no-sync >/dev/null
  as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $DURABLE_PG_PORT -k $dir -c max_connections=200 -c fsync=on -c synchronous_commit=on" >&2 \
    || { tail -n 20 "$dir/server.log" >&2; die "the durable postgres did not start"; }
}
stop_durable_pg() {
  [ -n "$DURABLE_DIR" ] || return 0
  if [ -f "$DURABLE_DIR/postmaster.pid" ]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$DURABLE_DIR" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$DURABLE_DIR"
  DURABLE_DIR=""
}

# pg_durability URL: the server's durability settings, as the table prints them.
pg_durability() {
  psql "$1" -At -c 'SHOW fsync' -c 'SHOW synchronous_commit' | paste -sd' ' \
    | awk '{ print "fsync=" $1 ", synchronous_commit=" $2 }'
}

# sync_write_us DIR: µs per synchronous 8 kB write (O_DSYNC, as a WAL flush) in DIR, the
# mean of 500: what a commit waits for on this disk, to read the durable figures by.
sync_write_us() {
  local file="$1/sync-write.test" secs
  secs=$(LC_ALL=C dd if=/dev/zero of="$file" bs=8k count=500 oflag=dsync 2>&1 \
    | sed -nE 's/.* copied, ([0-9.e+-]+) s,.*/\1/p')
  rm -f "$file"
  awk -v s="${secs:-0}" 'BEGIN { printf "%.0f", s * 1e6 / 500 }'
}

LOADGEN_PID=""
cleanup() {
  [ -z "$LOADGEN_PID" ] || stop_process "$LOADGEN_PID"
  stop_ceiling
  stop_instances
  stop_durable_pg
  stop_cluster
  local db
  for db in "${BENCH_DBS[@]}"; do
    drop_database "$db" "$ADMIN_DB_URL" || true
  done
}
trap cleanup EXIT
# A signal ends the script through `exit`, so the EXIT trap still stops everything.
trap 'exit 130' INT
trap 'exit 143' TERM

app_url() { echo "http://127.0.0.1:${PORTS[$1]}"; }
CEILING_URL="http://127.0.0.1:$CEILING_PORT"
targets() {
  local count=$1 i
  for ((i = 0; i < count; i++)); do printf -- '--target %s ' "$(app_url "$i")"; done
}

# CPU time (user + system) the processes have used so far, in clock ticks: fields 14
# and 15 of /proc/<pid>/stat, counted after the parenthesised command name.
cpu_ticks() {
  local pid stat total=0
  for pid in "$@"; do
    stat=$(<"/proc/$pid/stat") || die "process $pid is gone"
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}

# run_loadgen NAME ARGS...: one measured run (targets and everything else in ARGS), its
# report in $OUT/NAME.json. The CPU ticks of the servers in CPU_PIDS over the measured
# phase (after the logins) go to $OUT/NAME.cpu. A failed ledger check is reported and
# the bench goes on; a run that could not be made stops it.
run_loadgen() {
  local name=$1 rc=0 started="$OUT/$1.started" before after lg; shift
  log "$name"
  rm -f "$started"
  "$LOADGEN" --quiet --no-store-checks --admin-token "$ADMIN" --json "$OUT/$name.json" \
    --started-file "$started" "$@" >"$OUT/$name.txt" 2>&1 &
  lg=$!
  LOADGEN_PID=$lg
  while [ ! -e "$started" ] && kill -0 "$lg" 2>/dev/null; do sleep 0.01; done
  # shellcheck disable=SC2086
  before=$(cpu_ticks ${CPU_PIDS:-})
  local perf=""
  if [ -n "${CPU_PIDS:-}" ] && [[ " ${BENCH_PROFILE:-} " == *" $name "* ]]; then
    perf record -F 999 -g -p "${CPU_PIDS// /,}" -o "$OUT/$name.perf.data" >/dev/null 2>&1 &
    perf=$!
  fi
  wait "$lg" || rc=$?
  LOADGEN_PID=""
  # shellcheck disable=SC2086
  after=$(cpu_ticks ${CPU_PIDS:-})
  if [ -n "$perf" ]; then kill -INT "$perf" 2>/dev/null || true; wait "$perf" 2>/dev/null || true; fi
  [ -z "${CPU_PIDS:-}" ] || echo "$before $after $CLK_TCK" >"$OUT/$name.cpu"
  rm -f "$started"
  case $rc in
    0) ;;
    1) log "$name: a ledger check failed (see $OUT/$name.txt)" ;;
    *) cat "$OUT/$name.txt" >&2; die "$name: loadgen could not run" ;;
  esac
}

# loadgen NAME TARGET_COUNT ARGS...: a closed-model run at the app instances, limits
# unchecked, CPU of every instance.
loadgen() {
  local name=$1 count=$2; shift 2
  # shellcheck disable=SC2046
  CPU_PIDS="${PIDS[*]}" run_loadgen "$name" $(targets "$count") --concurrency "$CONCURRENCY" \
    --duration "$SECONDS_EACH" "${NO_LIMITS[@]}" "$@"
}

# Create an item on the first instance; print its id.
create_item() {
  curl -sf "$(app_url 0)/admin/api/items" -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' \
    -d "{\"name\":\"bench\",\"priceCents\":1,\"stock\":$1,\"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" \
    | sed -E 's/.*"id":([0-9]+).*/\1/'
}

# An item every benchmark user has bought once, with one unit left so it never sells
# out: later purchases are decided by the limiter and the reservation script (409
# ALREADY_PURCHASED), never by Postgres or the sold-out fast path.
bought_item() {
  local count=$1 item
  item=$(create_item $((USERS + 1)))
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets "$count") --quiet --no-store-checks --item "$item" --users "$USERS" --ips "$USERS" \
    --requests "$USERS" --concurrency "$CONCURRENCY" --duration 120 "${NO_LIMITS[@]}" >/dev/null 2>&1 || true
  echo "$item"
}

# bought_item_real_limits USERS NAME: the same under the real limits, one instance:
# every user buys once at 900 purchases/s (open model), under the api limit of 1000/s,
# so no purchase is refused; 20 000 users take about 22 s. Reports in $OUT/NAME.json;
# prints the item id.
bought_item_real_limits() {
  local users=$1 name=$2 item bought
  item=$(create_item $((users + 1)))
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users "$users" --ips "$users" \
    --requests "$users" --rate 900 --duration 300 --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  bought=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_status"].get("200", 0))' \
    "$OUT/$name.json" 2>/dev/null || echo 0)
  [ "$bought" -eq "$users" ] || log "warning: only $bought of $users users bought item $item beforehand"
  echo "$item"
}

# scrape PORT NAME: the instance's metrics, kept as $OUT/NAME.prom (empty when unreachable).
scrape() { curl -sf "http://127.0.0.1:$1/metrics" >"$OUT/$2.prom" || : >"$OUT/$2.prom"; }

# Open-model orders. Every request is made by a user and from an address (index) that no
# earlier request of this bench run used: NEXT_FRESH counts them. User ids start at 2e6,
# above those of the closed-model `orders` scenario.
NEXT_FRESH=0
# fresh_orders COUNT RATE SECONDS ITEM NAME: RATE orders/s for SECONDS (RATE × SECONDS
# requests, each a fresh user and address, open model) at the first COUNT instances,
# measured as NAME (run_loadgen), or unmeasured when NAME is "-" (a warm-up).
fresh_orders() {
  local count=$1 rate=$2 secs=$3 item=$4 name=$5 n args
  n=$((rate * secs))
  read -ra args <<<"$(targets "$count")"
  args+=(--item "$item" --users "$n" --ips "$n" --first-user $((2000000 + NEXT_FRESH))
    --first-ip "$NEXT_FRESH" --requests "$n" --rate "$rate" --duration $((secs + 5))
    --max-in-flight "$OPEN_MAX_IN_FLIGHT" --api-limit 1000000000)
  NEXT_FRESH=$((NEXT_FRESH + n))
  if [ "$name" = - ]; then
    "$LOADGEN" --quiet --no-store-checks "${args[@]}" >/dev/null 2>&1 || true
  else
    # Orders of the item in Postgres before and after: each 200 must be one of them.
    local before
    before=$(item_orders "$item")
    CPU_PIDS="${PIDS[*]}" run_loadgen "$name" "${args[@]}"
    echo "$before $(item_orders "$item")" >"$OUT/$name.orders"
  fi
}
item_orders() { psql "$INSTANCE_DB_URL" -Atc "SELECT count(*) FROM orders WHERE item_id = $1"; }

# open_ok NAME: whether the run kept p99 under the target with every request answered
# 200, one new order in Postgres per request, and no send dropped.
open_ok() {
  python3 - "$OUT/$1" "$OPEN_P99_MS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + ".json"))
before, after = map(int, open(sys.argv[1] + ".orders").read().split())
ok = (r["latency"]["p99_ms"] < float(sys.argv[2]) and not r["dropped"] and r["requests"] > 0
      and r["by_status"].get("200", 0) == r["requests"] == after - before)
sys.exit(0 if ok else 1)
PY
}

# open_orders NAME COUNT RATE SECONDS: at fresh instances (COUNT, config
# orders_open.toml), one item, an unmeasured second at RATE, then RATE orders/s for
# SECONDS, measured as NAME.
open_orders() {
  local name=$1 count=$2 rate=$3 secs=$4 item
  start_instances "$count" "$OUT/orders_open.toml"
  item=$(create_item $((rate * (secs + 1) + 1000)))
  fresh_orders "$count" "$rate" 1 "$item" -
  if [ -n "$DURABLE_DIR" ]; then
    # A fresh cluster still has initdb's, CREATE DATABASE's and the migrations' pages to
    # write back: flush them now, not as a stall inside the measured phase.
    psql "$DB_BASE/postgres" -qc CHECKPOINT
    sync
  fi
  fresh_orders "$count" "$rate" "$secs" "$item" "$name"
  stop_instances
}

# max_open NAME COUNT: at fresh instances (COUNT, config orders_max_open.toml), step the
# offered rate through OPEN_RATES, OPEN_STEP_SECONDS each, new users every step, until a
# step fails open_ok. Each step's report is NAME.step-RATE.json; the rates tried, in
# order, are listed in NAME.steps.
max_open() {
  local name=$1 count=$2 rate stock=1000 first item
  for rate in $OPEN_RATES; do stock=$((stock + rate * OPEN_STEP_SECONDS)); done
  first=${OPEN_RATES%% *}
  start_instances "$count" "$OUT/orders_max_open.toml"
  item=$(create_item $((stock + first)))
  fresh_orders "$count" "$first" 1 "$item" -
  : >"$OUT/$name.steps"
  for rate in $OPEN_RATES; do
    fresh_orders "$count" "$rate" "$OPEN_STEP_SECONDS" "$item" "$name.step-$rate"
    echo "$rate" >>"$OUT/$name.steps"
    if ! open_ok "$name.step-$rate"; then
      log "$name: $rate/s missed (p99 >= $OPEN_P99_MS ms, a non-200 answer or a dropped send): stop"
      break
    fi
  done
  # The committer's batch sizes and waits, for reading the profile of a miss.
  scrape "${PORTS[0]}" "$name.after"
  stop_instances
}

pg_durability "$ADMIN_DB_URL" >"$OUT/pg.main.txt"
# Keys an interrupted earlier run left behind.
PREFIX='bench-*' forget_keys

# 1. Constant answers and the bare limiter, each beside its ceiling.
if want constant; then
  start_instances 1
  loadgen constant 1 --probe /health/live --users "$USERS" --ips "$USERS"
  stop_instances
fi
if want limiter_only; then
  start_instances 1 "$OUT/three.toml"
  loadgen limiter_only 1 --probe /api/limited --users "$USERS" --ips "$USERS"
  stop_instances
fi
if want ceiling_limited; then
  start_ceiling CEILING_LIMITED_THRESHOLD=1000000000
  CPU_PIDS=$CEILING_PID run_loadgen ceiling_limited --target "$CEILING_URL" --probe /api/limited --users "$USERS" --ips "$USERS" \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  stop_ceiling
fi

# 2. POST /seckill: limiting off, one dimension, three dimensions; one vs two instances.
# "3 dimensions" is also the ceiling of the open-model orders: limiter + reservation
# script per request, nothing else.
for mode in off one three; do
  want "seckill_$mode" || continue
  start_instances 1 "$OUT/$mode.toml"
  item=$(bought_item 1)
  loadgen "seckill_$mode" 1 --item "$item" --users "$USERS" --ips "$USERS"
  stop_instances
done
if want seckill_three_2x; then
  start_instances 2 "$OUT/three.toml"
  item=$(bought_item 2)
  loadgen seckill_three_2x 2 --item "$item" --users "$USERS" --ips "$USERS"
  stop_instances
fi

# 3. Refused (users over their limit, real limits) vs admitted (above).
if want refused; then
  start_instances 1
  item=$(create_item 1000000)
  # Use up every user's quota (3 per minute), slower than the api limit of 1000/s.
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users "$USERS" --ips "$USERS" \
    --requests $((USERS * 3)) --rate 800 --duration 120 >/dev/null 2>&1 || true
  loadgen refused 1 --item "$item" --users "$USERS" --ips "$USERS"
  stop_instances
fi

# 4. Refused mostly by `api` (real limits: api 1000/s, user 3/60 s, ip 5/60 s), users
# who already bought the item (admitted requests end at the reservation: 409
# ALREADY_PURCHASED), denial cache off; then the ceiling on the same scenario with
# fresh limiter keys (tokens from the app's dev login). CPU of each server over its
# measured phase.
if want refused_api ceiling_refused; then
  start_instances 1 /nonexistent.toml SECKILL_LIMITER__DENIAL_CACHE_SLOTS=0
  item=$(bought_item_real_limits "$REFUSED_USERS" refused_api_buy)
  # shellcheck disable=SC2046
  CPU_PIDS=${PIDS[0]} run_loadgen refused_api $(targets 1) --item "$item" --users "$REFUSED_USERS" --ips "$REFUSED_USERS" \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  start_ceiling
  CPU_PIDS=$CEILING_PID run_loadgen ceiling_refused --target "$CEILING_URL" --session-target "$(app_url 0)" \
    --item "$item" --users "$REFUSED_USERS" --ips "$REFUSED_USERS" --concurrency "$CONCURRENCY" \
    --duration "$SECONDS_EACH"
  stop_ceiling
  stop_instances
fi

# 5. The stampede at a sold-out item (fast path from memory), beside the ceiling's
# constant POST route (same token and body, constant answer).
if want sold_out ceiling_constant; then
  start_instances 1
  item=$(create_item 1)
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users 1 --ips 1 --requests 1 >/dev/null 2>&1 || true
  loadgen sold_out 1 --item "$item" --users "$USERS" --ips "$USERS"
  start_ceiling
  CPU_PIDS=$CEILING_PID run_loadgen ceiling_constant --target "$CEILING_URL" --session-target "$(app_url 0)" --purchase-path /constant \
    --item "$item" --users "$USERS" --ips "$USERS" --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH" \
    "${NO_LIMITS[@]}"
  stop_ceiling
  stop_instances
fi

# 6. The stampede at an item every user already bought: real limits, denial cache on
# (the default). First an open model at the stated rate (local refusals, Redis calls),
# then a closed model at the usual concurrency (throughput against the sold-out path).
if want stampede stampede_open stampede_closed; then
  start_instances 1
  log "stampede: $STAMPEDE_USERS users buy the item first (about $((STAMPEDE_USERS / 900 + 5)) s)"
  item=$(bought_item_real_limits "$STAMPEDE_USERS" stampede_buy)
  scrape "${PORTS[0]}" stampede_open.before
  # shellcheck disable=SC2046
  CPU_PIDS=${PIDS[0]} run_loadgen stampede_open $(targets 1) --item "$item" --users "$STAMPEDE_USERS" --ips "$STAMPEDE_USERS" \
    --rate "$STAMPEDE_RATE" --max-in-flight "$STAMPEDE_MAX_IN_FLIGHT" --duration "$SECONDS_EACH"
  scrape "${PORTS[0]}" stampede_open.after
  # shellcheck disable=SC2046
  CPU_PIDS=${PIDS[0]} run_loadgen stampede_closed $(targets 1) --item "$item" --users "$STAMPEDE_USERS" --ips "$STAMPEDE_USERS" \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  scrape "${PORTS[0]}" stampede_closed.after
  stop_instances
fi

# 6b. The ledger over two instances with the denial cache on: real limits, 2000 users
# behind 300 addresses (so the ip dimension binds too), closed model; loadgen's limit
# checks must pass (a breach is reported in the table).
if want ledger_2x; then
  start_instances 2
  item=$(create_item 1000000)
  # shellcheck disable=SC2046
  CPU_PIDS="${PIDS[*]}" run_loadgen ledger_2x $(targets 2) --item "$item" --users "$USERS" --ips 300 \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  stop_instances
fi

# 7. Orders per second on one item, every request a successful purchase.
if want orders; then
  start_instances 1 "$OUT/three.toml"
  item=$(create_item 1000000)
  loadgen orders 1 --item "$item" --users $((USERS * 5)) --ips $((USERS * 5)) --first-user 1000000 \
    --requests $((USERS * 5))
  stop_instances
fi

# 8. Raw EVALSHA rate of the three-key script.
if want evalsha; then
  PORT=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
  SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD < lua/sliding_window.lua)
  redis-benchmark -p "$PORT" -n 200000 -c "$CONCURRENCY" -r 100000000 --csv EVALSHA "$SHA" 3 \
    'bench:{s}:api:__rand_int__' 'bench:{s}:user:__rand_int__' 'bench:{s}:ip:__rand_int__' '' m__rand_int__ \
    1000 1000 60000 3 60000 5 | tail -n 1 > "$OUT/evalsha.csv"
fi

# 9. Orders, open model (issue 13): 1000 new orders/s for 10 s, api at 2000/s.
if want orders_open_1000; then
  open_orders orders_open_1000 1 1000 10
fi

# 10. The highest open-model order rate with p99 under 10 ms, on one instance and on two
# (loadgen alternates between them). Its ceiling is "POST /seckill, 3 dimensions" above.
if want orders_max_open; then
  max_open orders_max_open 1
fi
if want orders_max_open_2x; then
  max_open orders_max_open_2x 2
fi

# 12. On a Redis Cluster (issue 15): one hot sale, `global` scope, the "3 dimensions"
# scenario (limiter + reservation script), and how the Redis calls spread over the
# masters. The cluster's keys are wiped with it.
if want cluster_one_sale; then
  log "cluster_one_sale: starting a Redis Cluster on ports $CLUSTER_PORT-$((CLUSTER_PORT + 5))"
  start_cluster
  start_instances 1 "$OUT/three.toml" SECKILL_REDIS_CLUSTER_NODES="$CLUSTER_NODES"
  item=$(bought_item 1)
  cluster_reset_stats
  loadgen cluster_one_sale 1 --item "$item" --users "$USERS" --ips "$USERS"
  cluster_calls >"$OUT/cluster_one_sale.masters"
  stop_instances
  stop_cluster
fi

# 13. The same cluster, 100 sales at once with the `per_item` scope: user i buys item
# i % 100 (its first request an order, then 409 ALREADY_PURCHASED), so every sale's
# limiter keys and stock live in its own slot and the script calls spread over the
# masters.
if want cluster_many_sales; then
  log "cluster_many_sales: starting a Redis Cluster on ports $CLUSTER_PORT-$((CLUSTER_PORT + 5))"
  start_cluster
  start_instances 1 "$OUT/three_per_item.toml" SECKILL_REDIS_CLUSTER_NODES="$CLUSTER_NODES"
  cluster_reset_stats
  # shellcheck disable=SC2046
  CPU_PIDS="${PIDS[*]}" run_loadgen cluster_many_sales $(targets 1) --concurrency "$CONCURRENCY" \
    --duration "$SECONDS_EACH" "${NO_LIMITS[@]}" --sales 100 --stock "$USERS" \
    --users "$USERS" --ips "$USERS"
  cluster_calls >"$OUT/cluster_many_sales.masters"
  stop_instances
  stop_cluster
fi

# 11. What durability costs: orders_open_1000 against a Postgres cluster of our own with
# fsync=on and synchronous_commit=on, stopped and removed right after.
if want orders_open_durable; then
  log "orders_open_durable: starting a durable Postgres cluster on port $DURABLE_PG_PORT"
  start_durable_pg
  DB_BASE="postgres://$(pg_user)@127.0.0.1:$DURABLE_PG_PORT"
  sync_before=$(sync_write_us "$DURABLE_DIR")
  open_orders orders_open_durable 1 1000 10
  # The disk is shared: a synchronous write's time before and after the run tells a
  # figure that other processes' writes (a build, another database) stretched.
  pg_durability "$DB_BASE/postgres" >"$OUT/pg.durable.txt"
  echo "$sync_before $(sync_write_us "$DURABLE_DIR")" >"$OUT/pg.durable.sync.txt"
  DB_BASE=$DB_BASE_URL
  stop_durable_pg
fi

python3 - "$OUT" "$CONCURRENCY" "$SECONDS_EACH" "$STAMPEDE_USERS" "$STAMPEDE_RATE" "$STAMPEDE_MAX_IN_FLIGHT" \
  "$OPEN_P99_MS" "$OPEN_STEP_SECONDS" "$OPEN_MAX_IN_FLIGHT" "$BENCH_ONLY" <<'PY'
import csv, json, os, re, sys
out, conc, secs, st_users, st_rate, st_cap, p99_bound, step_secs, open_cap, only = sys.argv[1:11]
p99_bound = float(p99_bound)
def rep(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
def read(name):
    path = os.path.join(out, name)
    return open(path).read().strip() if os.path.exists(path) else None
rows = [
    ("constant", "GET /health/live (constant answer)"),
    ("limiter_only", "GET /api/limited (bare limiter, 1 key)"),
    ("ceiling_limited", "ceiling: GET /api/limited (1-key EVALSHA, constant answer)"),
    ("seckill_off", "POST /seckill, limiting off"),
    ("seckill_one", "POST /seckill, 1 dimension"),
    ("seckill_three", "POST /seckill, 3 dimensions"),
    ("seckill_three_2x", "POST /seckill, 3 dimensions, 2 instances"),
    ("refused", "POST /seckill refused (429, over the user limit)"),
    ("refused_api", "POST /seckill, real limits, mostly refused by api, bought item, denial cache off"),
    ("ceiling_refused", "ceiling: the same scenario (3-key EVALSHA, constant answer)"),
    ("sold_out", "POST /seckill at a sold-out item (fast path)"),
    ("ceiling_constant", "ceiling: POST /constant (token + body, constant answer)"),
    ("stampede_open", f"stampede: {st_users} users at an item they all bought, real limits, denial cache on, open model at {st_rate} req/s offered"),
    ("stampede_closed", f"stampede: the same, closed model, {conc} in flight"),
    ("ledger_2x", f"ledger: 2 instances, real limits, denial cache on, {conc} in flight"),
    ("orders", "POST /seckill, every request a new order"),
    ("cluster_one_sale", "POST /seckill, 3 dimensions, on a Redis Cluster (3 masters + 3 replicas), one sale, global scope"),
    ("cluster_many_sales", "the same cluster, 100 sales at once, per_item scope (each user's first request an order)"),
]
# (a) and (d) are 1000/s for 10 s; (b) and (c) list their steps in NAME.steps.
steps = {name: [int(x) for x in (read(name + ".steps") or "").split()]
         for name in ("orders_max_open", "orders_max_open_2x")}
open_runs = [("orders_open_1000", 1000, 10)]
open_runs += [(f"{name}.step-{rate}", rate, int(step_secs)) for name, rates in steps.items() for rate in rates]
open_runs += [("orders_open_durable", 1000, 10)]
r = {}
for name in [n for n, _ in rows] + [n for n, _, _ in open_runs]:
    if os.path.exists(os.path.join(out, name + ".json")):
        r[name] = rep(name)
have = lambda *names: all(n in r for n in names)
evalsha = None
if os.path.exists(os.path.join(out, "evalsha.csv")):
    with open(os.path.join(out, "evalsha.csv")) as f:
        evalsha = float(next(csv.reader(f))[1])
rps = lambda n: r[n]["requests_per_sec"]
pg_main = read("pg.main.txt") or "unknown"
pg_durable = read("pg.durable.txt") or "unknown"

def cpu_us(name):
    """µs of the servers' CPU per request over the measured phase, or None."""
    path = os.path.join(out, name + ".cpu")
    if name not in r or not os.path.exists(path) or not r[name]["requests"]:
        return None
    before, after, tck = map(int, open(path).read().split())
    return (after - before) / tck / r[name]["requests"] * 1e6

def metric(name, family, labels=None):
    """Sum of a counter family's samples (optionally those with these labels), or None."""
    path = os.path.join(out, name + ".prom")
    total, seen = 0.0, False
    for line in open(path) if os.path.exists(path) else []:
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != family:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total, seen = total + float(m.group(3)), True
    return total if seen else None

def delta(before, after, family, labels=None):
    a, b = metric(before, family, labels), metric(after, family, labels)
    return None if a is None or b is None else b - a

def stampede(phase, before):
    local = delta(before, f"{phase}.after", "seckill_limiter_local_refusals_total")
    calls = delta(before, f"{phase}.after", "seckill_redis_calls_total", {"purpose": "limiter"})
    refused = r[phase]["by_status"].get("429", 0)
    share = None if local is None or refused == 0 else local / refused
    per_sec = None if calls is None else calls / r[phase]["seconds"]
    return share, per_sec

if only:
    print(f"\nBENCH_ONLY: {only}")
if any(name in r for name, _ in rows) or evalsha is not None:
    print(f"\nclosed model, {conc} requests in flight, {secs} s per scenario (the stampede's first"
          f" run: open model, {st_rate} req/s offered, sends dropped while {st_cap} are in flight);"
          f" Postgres: {pg_main}\n")
    print("| scenario | req/s | p50 ms | p99 ms | server CPU µs/req | answers |")
    print("|---|---:|---:|---:|---:|---|")
for name, label in rows:
    if name not in r:
        continue
    x = r[name]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(x["by_status"].items()))
    if x.get("dropped"):
        answers += f", dropped: {x['dropped']}"
    if not all(c["passed"] for c in x["checks"]):
        answers += " (ledger check FAILED)"
    cpu = cpu_us(name)
    cpu = "" if cpu is None else f"{cpu:.1f}"
    print(f"| {label} | {x['requests_per_sec']:.0f} | {x['latency']['p50_ms']:.2f} | {x['latency']['p99_ms']:.2f} | {cpu} | {answers} |")
if evalsha is not None:
    print(f"| redis-benchmark EVALSHA, 3-key sliding window | {evalsha:.0f} | | | | |")

def non200(x):
    return x["requests"] - x["by_status"].get("200", 0)

def new_orders(name):
    """Orders of the run's item that Postgres gained over the run, or None."""
    counts = (read(name + ".orders") or "").split()
    return int(counts[1]) - int(counts[0]) if len(counts) == 2 else None

def verdict(name):
    """ok: p99 under the bound, every answer 200 and one order in Postgres each, nothing
    dropped; else why not."""
    x = r[name]
    if non200(x) or x["dropped"] or not x["requests"] or new_orders(name) != x["requests"]:
        return "FAILED"
    return "ok" if x["latency"]["p99_ms"] < p99_bound else "p99 over"

open_labels = {
    "orders_open_1000": ("1 instance, api 2000/s", pg_main),
    "orders_open_durable": ("1 instance, api 2000/s, durable Postgres", pg_durable),
    "orders_max_open": ("step, 1 instance, api out of the way", pg_main),
    "orders_max_open_2x": ("step, 2 instances, api out of the way", pg_main),
}
shown = [(n, rate, s) for n, rate, s in open_runs if n in r]
if shown:
    print(f"\norders, open model: the rate offered whatever the answers take, each request a new"
          f" user from a new address (every one an order), one item; sends dropped while"
          f" {open_cap} are in flight; a run is ok with p99 < {p99_bound:g} ms, every answer"
          f" 200 with its new order in Postgres, and no send dropped\n")
    print("| scenario | Postgres | offered/s | s | 200/s | p50 ms | p99 ms | max ms | non-200 | dropped | new orders in Postgres | |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, rate, s in shown:
        x = r[name]
        label, pg = open_labels[name.split(".")[0]]
        others = ", ".join(f"{k}: {v}" for k, v in sorted(x["by_status"].items()) if k != "200")
        bad = f"{non200(x)} ({others})" if non200(x) else "0"
        lat = x["latency"]
        print(f"| {name.split('.')[0]}: {label} | {pg} | {rate} | {s} | "
              f"{x['by_status'].get('200', 0) / x['seconds']:.0f} | {lat['p50_ms']:.2f} | "
              f"{lat['p99_ms']:.2f} | {lat['max_ms']:.2f} | {bad} | {x['dropped']} | {new_orders(name)} | {verdict(name)} |")
    sync = (read("pg.durable.sync.txt") or "").split()
    if "orders_open_durable" in r and len(sync) == 2:
        print(f"\ndurable Postgres: a synchronous 8 kB write (dd oflag=dsync, mean of 500) took"
              f" {sync[0]} µs on its disk before the run and {sync[1]} µs after; the disk is shared,"
              f" so other processes' writes stretch it")

ratios = []  # (label, value text, target text, status)
def ratio(label, value, target=None, fmt="{:.2f}", text=None):
    text = text or ("n/a" if value is None else fmt.format(value))
    if target is None:
        ratios.append((label, text, "", ""))
        return
    op, bound = target
    ok = None if value is None else {">=": value >= bound, "<=": value <= bound, "<": value < bound}[op]
    shown = fmt.format(bound)
    ratios.append((label, text, f"{ {'>=': '≥', '<=': '≤', '<': '<'}[op]} {shown}",
                   "n/a" if ok is None else ("ok" if ok else "MISSED")))

pct = "{:.1%}"
if have("refused_api", "ceiling_refused"):
    app_cpu, ceiling_cpu = cpu_us("refused_api"), cpu_us("ceiling_refused")
    ratio("refused (denial cache off) ÷ ceiling, same scenario (throughput)",
          rps("refused_api") / rps("ceiling_refused"), (">=", 0.90))
    ratio(f"CPU per request on that scenario, app {app_cpu:.1f} µs ÷ ceiling {ceiling_cpu:.1f} µs",
          app_cpu / ceiling_cpu, ("<=", 1.25))
if have("stampede_open", "stampede_closed"):
    open_share, open_calls = stampede("stampede_open", "stampede_open.before")
    closed_share, closed_calls = stampede("stampede_closed", "stampede_open.after")
    ratio(f"stampede at {st_rate} req/s offered: refusals answered locally", open_share, (">=", 0.95), pct)
    ratio(f"stampede at {st_rate} req/s offered: Redis limiter calls/s", open_calls, None, "{:.0f}")
    ratio(f"stampede, closed model: refusals answered locally", closed_share, (">=", 0.95), pct)
    ratio(f"stampede, closed model: Redis limiter calls/s", closed_calls, None, "{:.0f}")
if have("stampede_closed", "sold_out"):
    ratio("stampede, closed model ÷ sold-out fast path (throughput)",
          rps("stampede_closed") / rps("sold_out"), (">=", 0.90))
if have("sold_out", "constant"):
    ratio("sold-out fast path ÷ constant route GET /health/live (throughput)",
          rps("sold_out") / rps("constant"), (">=", 0.80))
if have("sold_out", "ceiling_constant"):
    ratio("sold-out fast path ÷ ceiling POST /constant (throughput)",
          rps("sold_out") / rps("ceiling_constant"), (">=", 0.80))
if have("limiter_only", "ceiling_limited"):
    ratio("GET /api/limited admitted ÷ ceiling (throughput)",
          rps("limiter_only") / rps("ceiling_limited"), (">=", 0.85))
if have("ledger_2x"):
    ledger = r["ledger_2x"]["checks"]
    ratio(f"ledger over 2 instances, denial cache on: limit checks passed ({', '.join(c['name'] for c in ledger)})",
          sum(c["passed"] for c in ledger) / max(len(ledger), 1), (">=", 1.0), pct)
if have("seckill_three", "seckill_off"):
    ratio("3 dimensions ÷ no limiting (throughput)", rps("seckill_three") / rps("seckill_off"))
if have("seckill_three", "seckill_one"):
    ratio("3 dimensions ÷ 1 dimension (throughput)", rps("seckill_three") / rps("seckill_one"))
if have("refused", "seckill_three"):
    ratio("refused ÷ admitted (throughput)", rps("refused") / rps("seckill_three"))
if have("refused", "limiter_only"):
    ratio("refused ÷ bare limiter route (throughput)", rps("refused") / rps("limiter_only"))
if have("seckill_three_2x", "seckill_three"):
    ratio("2 instances ÷ 1 instance (throughput)", rps("seckill_three_2x") / rps("seckill_three"))
if have("refused") and evalsha is not None:
    ratio("limiter decisions/s (refused path) ÷ raw EVALSHA/s", rps("refused") / evalsha)
if have("orders"):
    ratio("orders per second on one item (closed model)", r["orders"]["by_status"].get("200", 0) / r["orders"]["seconds"],
          None, "{:.0f}")

# Orders, open model (issue 13).
for name, what in (("orders_open_1000", pg_main), ("orders_open_durable", pg_durable)):
    if not have(name):
        continue
    x = r[name]
    where = "" if name == "orders_open_1000" else f", durable Postgres ({what})"
    ratio(f"orders, open model, 1000/s for 10 s{where}: p99 ms (p50 {x['latency']['p50_ms']:.2f},"
          f" max {x['latency']['max_ms']:.2f})", x["latency"]["p99_ms"],
          ("<", p99_bound) if name == "orders_open_1000" else None)
    missing = abs(x["by_status"].get("200", 0) - (new_orders(name) or 0))
    ratio(f"orders, open model, 1000/s for 10 s{where}: failed requests (non-200, dropped, 200"
          f" without its order in Postgres)", non200(x) + x["dropped"] + missing, ("<=", 0), "{:.0f}")

def best(name):
    """(highest rate of an ok step, text): 0 when the first step missed."""
    tried = [rate for rate in steps[name] if f"{name}.step-{rate}" in r]
    good = [rate for rate in tried if verdict(f"{name}.step-{rate}") == "ok"]
    value = max(good, default=0)
    if not tried:
        return None, "n/a"
    if not good:
        return 0, f"< {tried[0]} (first step missed)"
    if value == tried[-1]:
        return value, f"≥ {value} (every step ok)"
    return value, f"{value} ({tried[-1]} missed)"

if steps["orders_max_open"] and have("seckill_three"):
    value, text = best("orders_max_open")
    ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 1 instance (orders/s)", value, None, text=text)
    ceiling = rps("seckill_three")
    ratio(f"that ÷ ceiling: limiter + reservation, POST /seckill 3 dimensions, 409 ALREADY_PURCHASED,"
          f" closed model, {conc} in flight ({ceiling:.0f} req/s)",
          None if value is None else value / ceiling, (">=", 0.40))
elif steps["orders_max_open"]:
    value, text = best("orders_max_open")
    ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 1 instance (orders/s;"
          f" run seckill_three too for its ceiling)", value, None, text=text)
if steps["orders_max_open_2x"]:
    value, text = best("orders_max_open_2x")
    ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 2 instances (orders/s)", value, None, text=text)

for name in ("cluster_one_sale", "cluster_many_sales"):
    if not read(name + ".masters"):
        continue
    calls = [tuple(map(int, line.split())) for line in read(name + ".masters").splitlines()]
    total = sum(n for _, n in calls) or 1
    shares = ", ".join(f"{port}: {n / total:.0%}" for port, n in calls)
    print(f"\n{name}: script calls (EVALSHA) per master, {total} in all: {shares}")
    if name == "cluster_many_sales":
        top = max(n for _, n in calls) / total
        ratios.append(("cluster_many_sales: the busiest master's share of script calls",
                       f"{top:.0%}", "<= 40%", "met" if top <= 0.40 else "MISSED"))
if ratios:
    print()
    print("| ratio | value | target | |")
    print("|---|---:|---:|---|")
    for label, value, target, status in ratios:
        print(f"| {label} | {value} | {target} | {status} |")
PY
