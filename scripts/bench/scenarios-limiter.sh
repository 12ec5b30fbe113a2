# shellcheck shell=bash
# scripts/bench.sh, scenarios 1-4 and 8: what deciding costs. Constant answers and the
# bare limiter beside its ceiling; POST /seckill with limiting off, one dimension, three
# dimensions, and over two instances; refusals by the user limit; refusals mostly by
# `api` beside the ceiling on the same scenario; and the raw EVALSHA rate of the
# three-key script.

scenarios_limiter() {
  local mode item
  # 1. Constant answers and the bare limiter, each beside its ceiling (the bare limiter
  # and its ceiling alternate, BENCH_PAIRS pairs).
  if want constant; then
    start_instances 1
    loadgen constant 1 --probe /health/live --users "$USERS" --ips "$USERS"
    stop_instances
  fi
  if want limiter_only ceiling_limited; then
    if want limiter_only; then start_instances 1 "$OUT/three.toml"; fi
    pairs limiter_only_run ceiling_limited_run
    stop_instances
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
  # measured phase. BENCH_PAIRS pairs, alternated; each pair's users (and addresses) are
  # its own, all bought beforehand, so no user's quota carries over from a pair to the next.
  if want refused_api ceiling_refused; then
    start_instances 1 /nonexistent.toml SECKILL_LIMITER__DENIAL_CACHE_SLOTS=0
    REFUSED_ITEM=$(bought_item_real_limits $((REFUSED_USERS * PAIRS)) refused_api_buy)
    pairs refused_api_run ceiling_refused_run
    stop_instances
  fi
}

# The sides of the pairs above; each takes the pair's number K.
limiter_only_run() {
  want limiter_only || return 0
  loadgen "limiter_only.pair-$1" 1 --probe /api/limited --users "$USERS" --ips "$USERS"
}
ceiling_limited_run() {
  want ceiling_limited || return 0
  start_ceiling CEILING_LIMITED_THRESHOLD=1000000000 CEILING_LIMITED_IP_THRESHOLD=1000000000 \
    CEILING_LIMITED_NETWORK_THRESHOLD=1000000000
  CPU_PIDS=$CEILING_PID run_loadgen "ceiling_limited.pair-$1" --target "$CEILING_URL" --probe /api/limited \
    --users "$USERS" --ips "$USERS" --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  stop_ceiling
}
# refused_users K: loadgen's options for pair K's block of REFUSED_USERS users and addresses.
refused_users() {
  local first=$((($1 - 1) * REFUSED_USERS))
  echo "--users $REFUSED_USERS --ips $REFUSED_USERS --first-user $((first + 1)) --first-ip $first"
}
refused_api_run() {
  # shellcheck disable=SC2046
  CPU_PIDS=${PIDS[0]} run_loadgen "refused_api.pair-$1" $(targets 1) --item "$REFUSED_ITEM" $(refused_users "$1") \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
}
ceiling_refused_run() {
  start_ceiling
  # shellcheck disable=SC2046
  CPU_PIDS=$CEILING_PID run_loadgen "ceiling_refused.pair-$1" --target "$CEILING_URL" --session-target "$(app_url 0)" \
    --item "$REFUSED_ITEM" $(refused_users "$1") --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  stop_ceiling
}

# 8. Raw EVALSHA rate of the three-key script.
scenario_evalsha() {
  want evalsha || return 0
  local port sha
  port=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
  sha=$(redis-cli -p "$port" -x SCRIPT LOAD < lua/sliding_window.lua)
  redis-benchmark -p "$port" -n 200000 -c "$CONCURRENCY" -r 100000000 --csv EVALSHA "$sha" 3 \
    'bench:{s}:api:__rand_int__' 'bench:{s}:user:__rand_int__' 'bench:{s}:ip:__rand_int__' '' m__rand_int__ 3 \
    1000 1000 60000 3 60000 5 | tail -n 1 > "$OUT/evalsha.csv"
}
