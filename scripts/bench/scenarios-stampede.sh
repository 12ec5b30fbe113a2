# shellcheck shell=bash
# scripts/bench.sh, scenarios 5, 6 and 6b: a crowd at an item it cannot buy. The
# sold-out fast path beside the ceiling's constant POST route; the stampede at an item
# every user already bought (open model, then closed), with the share of refusals the
# denial cache answers and the Redis calls it still makes; and the ledger over two
# instances with loadgen's limit checks.

scenarios_stampede() {
  local item
  # 5. The stampede at a sold-out item (fast path from memory), beside the ceiling's
  # constant POST route (same token and body, constant answer): BENCH_PAIRS pairs,
  # alternated.
  if want sold_out ceiling_constant; then
    start_instances 1
    SOLD_OUT_ITEM=$(create_item 1)
    # shellcheck disable=SC2046
    "$LOADGEN" $(targets 1) --quiet --no-store-checks --item "$SOLD_OUT_ITEM" --users 1 --ips 1 --requests 1 \
      >/dev/null 2>&1 || true
    pairs sold_out_run ceiling_constant_run
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
}

# The sides of the sold-out pairs; each takes the pair's number K.
sold_out_run() {
  loadgen "sold_out.pair-$1" 1 --item "$SOLD_OUT_ITEM" --users "$USERS" --ips "$USERS"
}
ceiling_constant_run() {
  start_ceiling
  CPU_PIDS=$CEILING_PID run_loadgen "ceiling_constant.pair-$1" --target "$CEILING_URL" --session-target "$(app_url 0)" \
    --purchase-path /constant --item "$SOLD_OUT_ITEM" --users "$USERS" --ips "$USERS" --concurrency "$CONCURRENCY" \
    --duration "$SECONDS_EACH" "${NO_LIMITS[@]}"
  stop_ceiling
}
