#!/usr/bin/env bash
# `make bench`: the performance table of the README, from one run on this machine.
#
# Builds release, starts the private services, then for each scenario starts fresh app
# instances (own Redis key prefix, own item) on loopback, drives them with `loadgen`
# (closed model, fixed concurrency and duration) and keeps its JSON report. Prints one
# table with the ratios the README discusses. Everything stops by itself; traffic only
# goes to 127.0.0.1.
#
#   BENCH_SECONDS=8 BENCH_CONCURRENCY=64 BENCH_USERS=2000 scripts/bench.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SECONDS_EACH=${BENCH_SECONDS:-8}
CONCURRENCY=${BENCH_CONCURRENCY:-64}
USERS=${BENCH_USERS:-2000}
OUT=${BENCH_OUT:-target/bench}
PORTS=(18081 18082)
ADMIN=bench-admin-token
mkdir -p "$OUT"
rm -f "$OUT"/*.json

eval "$(scripts/services.sh up)"
# Every scenario gets a database of its own: rate-limit rules are seeded from the
# settings only into an empty database (then Postgres is their truth), and benchmark
# items never show up in the development database.
DB_BASE_URL=${DATABASE_URL%/*}
ADMIN_DB_URL="$DB_BASE_URL/postgres"
BENCH_DBS=()
echo "bench: building release binaries" >&2
cargo build --release --locked --workspace --bins >&2
APP=target/release/seckill
LOADGEN=target/release/loadgen

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

PIDS=()
PREFIX=""
# start_instances COUNT [CONFIG_FILE]: fresh instances sharing one fresh key prefix and
# one fresh database.
start_instances() {
  local count=$1 config=${2:-/nonexistent.toml} i db
  PREFIX="bench-$(date +%s%N)"
  db="seckill_bench_$$_${#BENCH_DBS[@]}"
  psql "$ADMIN_DB_URL" -qc "CREATE DATABASE $db"
  BENCH_DBS+=("$db")
  PIDS=()
  for ((i = 0; i < count; i++)); do
    DATABASE_URL="$DB_BASE_URL/$db" \
    SECKILL_CONFIG=$config SECKILL_PORT=${PORTS[$i]} SECKILL_REDIS_KEY_PREFIX=$PREFIX \
      SECKILL_ADMIN_TOKEN=$ADMIN SECKILL_LOG_LEVEL=error SECKILL_WORKERS=2 \
      "$APP" >"$OUT/app-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for ((i = 0; i < count; i++)); do
    local end=$((SECONDS + 30))
    until curl -sf "http://127.0.0.1:${PORTS[$i]}/health/ready" >/dev/null; do
      [ $SECONDS -lt $end ] || { echo "bench: instance $i did not get ready" >&2; cat "$OUT/app-$i.log" >&2; exit 1; }
      sleep 0.1
    done
  done
}

stop_instances() {
  [ ${#PIDS[@]} -gt 0 ] || return 0
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
}
cleanup() {
  stop_instances
  local db
  for db in "${BENCH_DBS[@]}"; do
    psql "$ADMIN_DB_URL" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT

targets() {
  local count=$1 i
  for ((i = 0; i < count; i++)); do printf -- '--target http://127.0.0.1:%s ' "${PORTS[$i]}"; done
}

# loadgen NAME TARGET_COUNT ARGS...: one measured run, its report in $OUT/NAME.json.
loadgen() {
  local name=$1 count=$2; shift 2
  echo "bench: $name" >&2
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets "$count") --quiet --no-store-checks --admin-token "$ADMIN" \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH" \
    --user-limit 1000000000 --ip-limit 1000000000 --api-limit 1000000000 \
    --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 || { cat "$OUT/$name.txt" >&2; exit 1; }
}

# Create an item on the first instance; print its id.
create_item() {
  curl -sf "http://127.0.0.1:${PORTS[0]}/admin/api/items" -H "Authorization: Bearer $ADMIN" \
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
  "$LOADGEN" $(targets "$count") --quiet --no-store-checks --item "$item" --users "$USERS" --ips "$USERS" \
    --requests "$USERS" --concurrency "$CONCURRENCY" --duration 120 \
    --user-limit 1000000000 --ip-limit 1000000000 --api-limit 1000000000 >/dev/null 2>&1 || true
  echo "$item"
}

# 1. Ceilings on this machine.
start_instances 1
loadgen constant 1 --probe /health/live --users "$USERS" --ips "$USERS"
stop_instances
start_instances 1 "$OUT/three.toml"
loadgen limiter_only 1 --probe /api/limited --users "$USERS" --ips "$USERS"
stop_instances

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

# 4. The stampede at a sold-out item (fast path from memory).
start_instances 1
item=$(create_item 1)
"$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$item" --users 1 --ips 1 --requests 1 >/dev/null 2>&1 || true
loadgen sold_out 1 --item "$item" --users "$USERS" --ips "$USERS"
stop_instances

# 5. Orders per second on one item, every request a successful purchase.
start_instances 1 "$OUT/three.toml"
item=$(create_item 1000000)
loadgen orders 1 --item "$item" --users $((USERS * 5)) --ips $((USERS * 5)) --first-user 1000000 \
  --requests $((USERS * 5))
stop_instances

# 6. Raw EVALSHA rate of the three-key script.
PORT=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD < lua/sliding_window.lua)
redis-benchmark -p "$PORT" -n 200000 -c "$CONCURRENCY" -r 100000000 --csv EVALSHA "$SHA" 3 \
  'bench:{s}:api:__rand_int__' 'bench:{s}:user:__rand_int__' 'bench:{s}:ip:__rand_int__' '' m__rand_int__ \
  1000 1000 60000 3 60000 5 | tail -n 1 > "$OUT/evalsha.csv"

python3 - "$OUT" "$CONCURRENCY" "$SECONDS_EACH" <<'PY'
import csv, json, os, sys
out, conc, secs = sys.argv[1], sys.argv[2], sys.argv[3]
def rep(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
rows = [
    ("constant", "GET /health/live (constant answer)"),
    ("limiter_only", "GET /api/limited (bare limiter, 1 key)"),
    ("seckill_off", "POST /seckill, limiting off"),
    ("seckill_one", "POST /seckill, 1 dimension"),
    ("seckill_three", "POST /seckill, 3 dimensions"),
    ("seckill_three_2x", "POST /seckill, 3 dimensions, 2 instances"),
    ("refused", "POST /seckill refused (429, over the user limit)"),
    ("sold_out", "POST /seckill at a sold-out item (fast path)"),
    ("orders", "POST /seckill, every request a new order"),
]
r = {name: rep(name) for name, _ in rows}
with open(os.path.join(out, "evalsha.csv")) as f:
    evalsha = float(next(csv.reader(f))[1])
print(f"\nclosed model, {conc} requests in flight, {secs} s per scenario\n")
print(f"| scenario | req/s | p50 ms | p99 ms | answers |")
print(f"|---|---:|---:|---:|---|")
for name, label in rows:
    x = r[name]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted({**x["by_status"]}.items()))
    print(f"| {label} | {x['requests_per_sec']:.0f} | {x['latency']['p50_ms']:.2f} | {x['latency']['p99_ms']:.2f} | {answers} |")
print(f"| redis-benchmark EVALSHA, 3-key sliding window | {evalsha:.0f} | | | |")
rps = lambda n: r[n]["requests_per_sec"]
print()
print(f"| ratio | value |")
print(f"|---|---:|")
print(f"| 3 dimensions ÷ no limiting (throughput) | {rps('seckill_three') / rps('seckill_off'):.2f} |")
print(f"| 3 dimensions ÷ 1 dimension (throughput) | {rps('seckill_three') / rps('seckill_one'):.2f} |")
print(f"| refused ÷ admitted (throughput) | {rps('refused') / rps('seckill_three'):.2f} |")
print(f"| refused ÷ bare limiter route (throughput) | {rps('refused') / rps('limiter_only'):.2f} |")
print(f"| 2 instances ÷ 1 instance (throughput) | {rps('seckill_three_2x') / rps('seckill_three'):.2f} |")
print(f"| limiter decisions/s (refused path) ÷ raw EVALSHA/s | {rps('refused') / evalsha:.2f} |")
print(f"| sold-out fast path ÷ constant route (throughput) | {rps('sold_out') / rps('constant'):.2f} |")
print(f"| orders per second on one item | {r['orders']['by_status'].get('200', 0) / r['orders']['seconds']:.0f} |")
PY
