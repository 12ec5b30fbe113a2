#!/usr/bin/env bash
# `make bench`: the performance table of the README, from one run on this machine.
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
#   BENCH_SECONDS=8 BENCH_CONCURRENCY=64 BENCH_USERS=2000 scripts/bench.sh
#   BENCH_REFUSED_USERS=10000 (users of the scenario refused mostly by api)
#   BENCH_STAMPEDE_USERS=20000 BENCH_STAMPEDE_RATE=15000 (the stampede's offered req/s)
#   BENCH_STAMPEDE_MAX_IN_FLIGHT=1024 BENCH_PORT_BASE=18081 (ports BASE..BASE+2)
#   BENCH_PROFILE="refused_api ceiling_refused" (perf record -g of those runs' servers,
#   into target/bench/NAME.perf.data; needs linux-perf)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }
# stop_process
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
OUT=${BENCH_OUT:-target/bench}
# Two app instances and the ceiling on consecutive loopback ports.
PORT_BASE=${BENCH_PORT_BASE:-18081}
PORTS=("$PORT_BASE" $((PORT_BASE + 1)))
CEILING_PORT=$((PORT_BASE + 2))
ADMIN=bench-admin-token
# Checks in the ledger are off for runs whose limits are raised out of the way.
NO_LIMITS=(--user-limit 1000000000 --ip-limit 1000000000 --api-limit 1000000000)
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.cpu "$OUT"/*.prom "$OUT"/*.started

eval "$(scripts/services.sh up)"
# Every scenario gets a database of its own: rate-limit rules are seeded from the
# settings only into an empty database (then Postgres is their truth), and benchmark
# items never show up in the development database.
DB_BASE_URL=${DATABASE_URL%/*}
ADMIN_DB_URL="$DB_BASE_URL/postgres"
BENCH_DBS=()
log "building release binaries"
cargo build --release --locked --workspace --bins >&2
# BENCH_APP: another build of the app (e.g. `--no-default-features`, glibc malloc).
APP=${BENCH_APP:-target/release/seckill}
LOADGEN=target/release/loadgen
CEILING=target/release/ceiling
CLK_TCK=$(getconf CLK_TCK)

# A limiter configuration for the seckill policy: "off", "one" (api only) or "three";
# thresholds far above the load, so they measure the cost of deciding, not of refusing.
write_config() {
  local file=$1 mode=$2 enabled=true
  [ "$mode" = off ] && enabled=false
  {
    echo '[limiter.policies.seckill]'
    echo 'algorithm = "sliding_window"'
    echo 'fail_mode = "closed"'
    echo "enabled = $enabled"
    echo '[[limiter.policies.seckill.rules]]'
    echo 'name = "api"'
    echo 'key = { literal = "purchase" }'
    echo 'window_ms = 1000'
    echo 'threshold = 1000000000'
    echo 'message = "System busy, please try again later"'
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
for mode in off one three; do write_config "$OUT/$mode.toml" "$mode"; done

# A port something else listens on would answer our readiness checks: refuse to start.
ensure_port_free() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    die "port $1 is already in use (set BENCH_PORT_BASE to move the bench's ports)"
  fi
}

# wait_serving PID URL LOG WHAT: until URL answers, while PID lives, for at most 30 s.
wait_serving() {
  local pid=$1 url=$2 file=$3 what=$4 end=$((SECONDS + 30))
  until curl -sf "$url" >/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $end ]; then
      cat "$file" >&2
      die "$what did not start"
    fi
    sleep 0.1
  done
}

PIDS=()
PREFIX=""
# start_instances COUNT [CONFIG_FILE [ENV=VALUE...]]: fresh instances sharing one fresh
# key prefix and one fresh database, at the default log level and format.
start_instances() {
  local count=$1 config=${2:-/nonexistent.toml} i db
  shift $(($# < 2 ? $# : 2))
  PREFIX="bench-$(date +%s%N)"
  db="seckill_bench_$$_${#BENCH_DBS[@]}"
  psql "$ADMIN_DB_URL" -qc "CREATE DATABASE $db"
  BENCH_DBS+=("$db")
  PIDS=()
  for ((i = 0; i < count; i++)); do
    ensure_port_free "${PORTS[$i]}"
    env DATABASE_URL="$DB_BASE_URL/$db" \
      SECKILL_CONFIG="$config" SECKILL_PORT="${PORTS[$i]}" SECKILL_REDIS_KEY_PREFIX="$PREFIX" \
      SECKILL_ADMIN_TOKEN=$ADMIN SECKILL_WORKERS=2 "$@" \
      "$APP" >"$OUT/app-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for ((i = 0; i < count; i++)); do
    wait_serving "${PIDS[$i]}" "http://127.0.0.1:${PORTS[$i]}/health/ready" "$OUT/app-$i.log" "instance $i"
  done
}

stop_instances() {
  [ ${#PIDS[@]} -gt 0 ] || return 0
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
}

CEILING_PID=""
# start_ceiling [ENV=VALUE...]: the ceiling server on a fresh key prefix (empty limiter
# keys), two workers like the app.
start_ceiling() {
  ensure_port_free "$CEILING_PORT"
  env SECKILL_PORT=$CEILING_PORT SECKILL_REDIS_KEY_PREFIX="ceiling-$(date +%s%N)" \
    SECKILL_WORKERS=2 "$@" "$CEILING" >"$OUT/ceiling.log" 2>&1 &
  CEILING_PID=$!
  wait_serving "$CEILING_PID" "http://127.0.0.1:$CEILING_PORT/health/live" "$OUT/ceiling.log" "the ceiling server"
}
stop_ceiling() {
  [ -n "$CEILING_PID" ] || return 0
  stop_process "$CEILING_PID"
  CEILING_PID=""
}

cleanup() {
  stop_ceiling
  stop_instances
  local db
  for db in "${BENCH_DBS[@]}"; do
    psql "$ADMIN_DB_URL" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

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
  while [ ! -e "$started" ] && kill -0 "$lg" 2>/dev/null; do sleep 0.01; done
  # shellcheck disable=SC2086
  before=$(cpu_ticks ${CPU_PIDS:-})
  local perf=""
  if [ -n "${CPU_PIDS:-}" ] && [[ " ${BENCH_PROFILE:-} " == *" $name "* ]]; then
    perf record -F 999 -g -p "${CPU_PIDS// /,}" -o "$OUT/$name.perf.data" >/dev/null 2>&1 &
    perf=$!
  fi
  wait "$lg" || rc=$?
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
  "$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users "$users" --ips "$users" \
    --requests "$users" --rate 900 --duration 300 --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  bought=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_status"].get("200", 0))' \
    "$OUT/$name.json" 2>/dev/null || echo 0)
  [ "$bought" -eq "$users" ] || log "warning: only $bought of $users users bought item $item beforehand"
  echo "$item"
}

# scrape PORT NAME: the instance's metrics, kept as $OUT/NAME.prom (empty when unreachable).
scrape() { curl -sf "http://127.0.0.1:$1/metrics" >"$OUT/$2.prom" || : >"$OUT/$2.prom"; }

# 1. Constant answers and the bare limiter, each beside its ceiling.
start_instances 1
loadgen constant 1 --probe /health/live --users "$USERS" --ips "$USERS"
stop_instances
start_instances 1 "$OUT/three.toml"
loadgen limiter_only 1 --probe /api/limited --users "$USERS" --ips "$USERS"
stop_instances
start_ceiling CEILING_LIMITED_THRESHOLD=1000000000
CPU_PIDS=$CEILING_PID run_loadgen ceiling_limited --target "$CEILING_URL" --probe /api/limited --users "$USERS" --ips "$USERS" \
  --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
stop_ceiling

# 2. POST /seckill: limiting off, one dimension, three dimensions; one vs two instances.
for mode in off one three; do
  start_instances 1 "$OUT/$mode.toml"
  item=$(bought_item 1)
  loadgen "seckill_$mode" 1 --item "$item" --users "$USERS" --ips "$USERS"
  stop_instances
done
start_instances 2 "$OUT/three.toml"
item=$(bought_item 2)
loadgen seckill_three_2x 2 --item "$item" --users "$USERS" --ips "$USERS"
stop_instances

# 3. Refused (users over their limit, real limits) vs admitted (above).
start_instances 1
item=$(create_item 1000000)
# Use up every user's quota (3 per minute), slower than the api limit of 1000/s.
"$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users "$USERS" --ips "$USERS" \
  --requests $((USERS * 3)) --rate 800 --duration 120 >/dev/null 2>&1 || true
loadgen refused 1 --item "$item" --users "$USERS" --ips "$USERS"
stop_instances

# 4. Refused mostly by `api` (real limits: api 1000/s, user 3/60 s, ip 5/60 s), users
# who already bought the item (admitted requests end at the reservation: 409
# ALREADY_PURCHASED), denial cache off; then the ceiling on the same scenario with
# fresh limiter keys (tokens from the app's dev login). CPU of each server over its
# measured phase.
start_instances 1 /nonexistent.toml SECKILL_LIMITER__DENIAL_CACHE_SLOTS=0
item=$(bought_item_real_limits "$REFUSED_USERS" refused_api_buy)
CPU_PIDS=${PIDS[0]} run_loadgen refused_api $(targets 1) --item "$item" --users "$REFUSED_USERS" --ips "$REFUSED_USERS" \
  --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
start_ceiling
CPU_PIDS=$CEILING_PID run_loadgen ceiling_refused --target "$CEILING_URL" --session-target "$(app_url 0)" \
  --item "$item" --users "$REFUSED_USERS" --ips "$REFUSED_USERS" --concurrency "$CONCURRENCY" \
  --duration "$SECONDS_EACH"
stop_ceiling
stop_instances

# 5. The stampede at a sold-out item (fast path from memory), beside the ceiling's
# constant POST route (same token and body, constant answer).
start_instances 1
item=$(create_item 1)
"$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users 1 --ips 1 --requests 1 >/dev/null 2>&1 || true
loadgen sold_out 1 --item "$item" --users "$USERS" --ips "$USERS"
start_ceiling
CPU_PIDS=$CEILING_PID run_loadgen ceiling_constant --target "$CEILING_URL" --session-target "$(app_url 0)" --purchase-path /constant \
  --item "$item" --users "$USERS" --ips "$USERS" --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH" \
  "${NO_LIMITS[@]}"
stop_ceiling
stop_instances

# 6. The stampede at an item every user already bought: real limits, denial cache on
# (the default). First an open model at the stated rate (local refusals, Redis calls),
# then a closed model at the usual concurrency (throughput against the sold-out path).
start_instances 1
log "stampede: $STAMPEDE_USERS users buy the item first (about $((STAMPEDE_USERS / 900 + 5)) s)"
item=$(bought_item_real_limits "$STAMPEDE_USERS" stampede_buy)
scrape "${PORTS[0]}" stampede_open.before
CPU_PIDS=${PIDS[0]} run_loadgen stampede_open $(targets 1) --item "$item" --users "$STAMPEDE_USERS" --ips "$STAMPEDE_USERS" \
  --rate "$STAMPEDE_RATE" --max-in-flight "$STAMPEDE_MAX_IN_FLIGHT" --duration "$SECONDS_EACH"
scrape "${PORTS[0]}" stampede_open.after
CPU_PIDS=${PIDS[0]} run_loadgen stampede_closed $(targets 1) --item "$item" --users "$STAMPEDE_USERS" --ips "$STAMPEDE_USERS" \
  --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
scrape "${PORTS[0]}" stampede_closed.after
stop_instances

# 6b. The ledger over two instances with the denial cache on: real limits, 2000 users
# behind 300 addresses (so the ip dimension binds too), closed model; loadgen's limit
# checks must pass (a breach is reported in the table).
start_instances 2
item=$(create_item 1000000)
# shellcheck disable=SC2046
CPU_PIDS="${PIDS[*]}" run_loadgen ledger_2x $(targets 2) --item "$item" --users "$USERS" --ips 300 \
  --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
stop_instances

# 7. Orders per second on one item, every request a successful purchase.
start_instances 1 "$OUT/three.toml"
item=$(create_item 1000000)
loadgen orders 1 --item "$item" --users $((USERS * 5)) --ips $((USERS * 5)) --first-user 1000000 \
  --requests $((USERS * 5))
stop_instances

# 8. Raw EVALSHA rate of the three-key script.
PORT=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD < lua/sliding_window.lua)
redis-benchmark -p "$PORT" -n 200000 -c "$CONCURRENCY" -r 100000000 --csv EVALSHA "$SHA" 3 \
  'bench:{s}:api:__rand_int__' 'bench:{s}:user:__rand_int__' 'bench:{s}:ip:__rand_int__' '' m__rand_int__ \
  1000 1000 60000 3 60000 5 | tail -n 1 > "$OUT/evalsha.csv"

python3 - "$OUT" "$CONCURRENCY" "$SECONDS_EACH" "$STAMPEDE_USERS" "$STAMPEDE_RATE" "$STAMPEDE_MAX_IN_FLIGHT" <<'PY'
import csv, json, os, re, sys
out, conc, secs, st_users, st_rate, st_cap = sys.argv[1:7]
def rep(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
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
]
r = {name: rep(name) for name, _ in rows}
with open(os.path.join(out, "evalsha.csv")) as f:
    evalsha = float(next(csv.reader(f))[1])
rps = lambda n: r[n]["requests_per_sec"]

def cpu_us(name):
    """µs of the servers' CPU per request over the measured phase, or None."""
    path = os.path.join(out, name + ".cpu")
    if not os.path.exists(path) or not r[name]["requests"]:
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

print(f"\nclosed model, {conc} requests in flight, {secs} s per scenario (the stampede's first"
      f" run: open model, {st_rate} req/s offered, sends dropped while {st_cap} are in flight)\n")
print("| scenario | req/s | p50 ms | p99 ms | server CPU µs/req | answers |")
print("|---|---:|---:|---:|---:|---|")
for name, label in rows:
    x = r[name]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(x["by_status"].items()))
    if x.get("dropped"):
        answers += f", dropped: {x['dropped']}"
    if not all(c["passed"] for c in x["checks"]):
        answers += " (ledger check FAILED)"
    cpu = cpu_us(name)
    cpu = "" if cpu is None else f"{cpu:.1f}"
    print(f"| {label} | {x['requests_per_sec']:.0f} | {x['latency']['p50_ms']:.2f} | {x['latency']['p99_ms']:.2f} | {cpu} | {answers} |")
print(f"| redis-benchmark EVALSHA, 3-key sliding window | {evalsha:.0f} | | | | |")

ratios = []  # (label, value text, target text, status)
def ratio(label, value, target=None, fmt="{:.2f}"):
    text = "n/a" if value is None else fmt.format(value)
    if target is None:
        ratios.append((label, text, "", ""))
        return
    op, bound = target
    ok = None if value is None else (value >= bound if op == ">=" else value <= bound)
    shown = fmt.format(bound)
    ratios.append((label, text, f"{'≥' if op == '>=' else '≤'} {shown}",
                   "n/a" if ok is None else ("ok" if ok else "MISSED")))

app_cpu, ceiling_cpu = cpu_us("refused_api"), cpu_us("ceiling_refused")
open_share, open_calls = stampede("stampede_open", "stampede_open.before")
closed_share, closed_calls = stampede("stampede_closed", "stampede_open.after")
pct = "{:.1%}"
ratio("refused (denial cache off) ÷ ceiling, same scenario (throughput)",
      rps("refused_api") / rps("ceiling_refused"), (">=", 0.90))
ratio(f"CPU per request on that scenario, app {app_cpu:.1f} µs ÷ ceiling {ceiling_cpu:.1f} µs",
      app_cpu / ceiling_cpu, ("<=", 1.25))
ratio(f"stampede at {st_rate} req/s offered: refusals answered locally", open_share, (">=", 0.95), pct)
ratio(f"stampede at {st_rate} req/s offered: Redis limiter calls/s", open_calls, None, "{:.0f}")
ratio(f"stampede, closed model: refusals answered locally", closed_share, (">=", 0.95), pct)
ratio(f"stampede, closed model: Redis limiter calls/s", closed_calls, None, "{:.0f}")
ratio("stampede, closed model ÷ sold-out fast path (throughput)",
      rps("stampede_closed") / rps("sold_out"), (">=", 0.90))
ratio("sold-out fast path ÷ constant route GET /health/live (throughput)",
      rps("sold_out") / rps("constant"), (">=", 0.80))
ratio("sold-out fast path ÷ ceiling POST /constant (throughput)",
      rps("sold_out") / rps("ceiling_constant"), (">=", 0.80))
ratio("GET /api/limited admitted ÷ ceiling (throughput)",
      rps("limiter_only") / rps("ceiling_limited"), (">=", 0.85))
ledger = r["ledger_2x"]["checks"]
ratio(f"ledger over 2 instances, denial cache on: limit checks passed ({', '.join(c['name'] for c in ledger)})",
      sum(c["passed"] for c in ledger) / max(len(ledger), 1), (">=", 1.0), pct)
ratio("3 dimensions ÷ no limiting (throughput)", rps("seckill_three") / rps("seckill_off"))
ratio("3 dimensions ÷ 1 dimension (throughput)", rps("seckill_three") / rps("seckill_one"))
ratio("refused ÷ admitted (throughput)", rps("refused") / rps("seckill_three"))
ratio("refused ÷ bare limiter route (throughput)", rps("refused") / rps("limiter_only"))
ratio("2 instances ÷ 1 instance (throughput)", rps("seckill_three_2x") / rps("seckill_three"))
ratio("limiter decisions/s (refused path) ÷ raw EVALSHA/s", rps("refused") / evalsha)
ratio("orders per second on one item", r["orders"]["by_status"].get("200", 0) / r["orders"]["seconds"],
      None, "{:.0f}")
print()
print("| ratio | value | target | |")
print("|---|---:|---:|---|")
for label, value, target, status in ratios:
    print(f"| {label} | {value} | {target} | {status} |")
PY
