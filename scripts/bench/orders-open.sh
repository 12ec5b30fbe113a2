# shellcheck shell=bash
# scripts/bench.sh: orders in the open model (issue 13). fresh_orders offers orders at a
# fixed rate, each by a user and from an address never seen before, and counts the
# item's orders in Postgres around the run; open_ok judges a run; open_orders is one
# rate at fresh instances, max_open the step search for the highest rate that stays
# fast.

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
