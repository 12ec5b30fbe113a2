# shellcheck shell=bash
# scripts/bench.sh: the servers a scenario measures. start_instances starts one or two
# fresh app instances (own Redis key prefix, own database) and stop_instances stops them
# and deletes their keys; start_ceiling and stop_ceiling do the same for `ceiling`
# (loadtest/ceiling). Both refuse a port something else listens on.
# shellcheck disable=SC2034 # READY_DEADLINE (start_app) and CEILING_URL are read elsewhere

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
      SECKILL_ADMIN_TOKEN="$ADMIN" SECKILL_WORKERS=2 "$@"
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

app_url() { echo "http://127.0.0.1:${PORTS[$1]}"; }
CEILING_URL="http://127.0.0.1:$CEILING_PORT"
targets() {
  local count=$1 i
  for ((i = 0; i < count; i++)); do printf -- '--target %s ' "$(app_url "$i")"; done
}
