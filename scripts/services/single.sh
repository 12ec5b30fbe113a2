# shellcheck shell=bash
# scripts/services.sh, the single topology: one private Redis and one private Postgres.
#
#   scripts/services.sh up       install if missing, start, wait, create the database;
#                                prints `export REDIS_URL=… DATABASE_URL=…` on stdout
#   scripts/services.sh down     stop both
#   scripts/services.sh status   say what runs
#   scripts/services.sh env      print the exports only
#
#   SECKILL_LOCAL_REDIS_PORT   Redis's port [6380]; its data (append-only) in .local/redis
#   SECKILL_LOCAL_PG_PORT      Postgres's port [5433]; its data in .local/pg (as root,
#                              where the `postgres` user cannot reach it, a folder under
#                              /var/tmp named after the checkout)
#   SECKILL_LOCAL_PG_DB        the database `up` creates [seckill]
#
# When REDIS_URL or DATABASE_URL is already set, that service is taken as given: `up`
# neither starts nor checks it, and the exports repeat it.

REDIS_PORT=${SECKILL_LOCAL_REDIS_PORT:-6380}
PG_PORT=${SECKILL_LOCAL_PG_PORT:-5433}
PG_DB=${SECKILL_LOCAL_PG_DB:-seckill}
REDIS_DIR="$LOCAL/redis"

# The data folder must be reachable by the Postgres user; a checkout under /root is not,
# so fall back to a folder under /var/tmp named after the checkout.
pg_dir() {
  if [ "$(id -u)" -ne 0 ]; then echo "$LOCAL/pg"; return; fi
  mkdir -p "$LOCAL"
  chmod 755 "$LOCAL" 2>/dev/null || true
  if runuser -u postgres -- test -x "$LOCAL"; then echo "$LOCAL/pg"; else
    echo "/var/tmp/seckill-$(echo "$ROOT" | md5sum | cut -c1-12)/pg"; fi
}

redis_url() { echo "redis://127.0.0.1:$REDIS_PORT"; }
pg_url() { echo "postgres://$(pg_user)@127.0.0.1:$PG_PORT/$PG_DB"; }

redis_up() {
  if [ -n "${REDIS_URL:-}" ]; then log "using REDIS_URL from the environment"; return; fi
  need_redis
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then log "redis already up on $REDIS_PORT"; return; fi
  mkdir -p "$REDIS_DIR"
  # Append-only persistence: a restart keeps the stock counters and buyer sets.
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$REDIS_DIR" \
    --appendonly yes --save "" --daemonize yes \
    --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" >&2
  wait_for "redis on $REDIS_PORT" 30 "" redis-cli -p "$REDIS_PORT" ping || exit 1
  log "redis up on $REDIS_PORT"
}

pg_up() {
  if [ -n "${DATABASE_URL:-}" ]; then log "using DATABASE_URL from the environment"; return; fi
  [ -n "$(pg_bin)" ] || apt_install postgresql
  local bin dir
  bin=$(pg_bin); dir=$(pg_dir)
  command -v psql >/dev/null || apt_install postgresql-client
  if ! "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
    if [ ! -f "$dir/PG_VERSION" ]; then
      log "initialising postgres in $dir"
      mkdir -p "$dir"
      [ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"
      chmod 700 "$dir"
      # Trust on loopback only: a throw-away private instance, never a shared server.
      as_pg "$bin/initdb" -D "$dir" -U "$(pg_user)" --auth=trust -E UTF8 >/dev/null
    fi
    as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $dir -c max_connections=400 -c fsync=off -c synchronous_commit=off" >&2 \
      || { tail -n 20 "$dir/server.log" >&2; die "postgres did not start"; }
  else
    log "postgres already up on $PG_PORT"
  fi
  wait_for "postgres on $PG_PORT" 60 "" "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" || exit 1
  if [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U "$(pg_user)" -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname='$PG_DB'")" != 1 ]; then
    psql -h 127.0.0.1 -p "$PG_PORT" -U "$(pg_user)" -d postgres -qc "CREATE DATABASE $PG_DB" >&2
  fi
  log "postgres up on $PG_PORT, database $PG_DB"
}

print_env() {
  echo "export REDIS_URL=${REDIS_URL:-$(redis_url)}"
  echo "export DATABASE_URL=${DATABASE_URL:-$(pg_url)}"
}

down() {
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
    redis-cli -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || true; log "redis stopped"; fi
  local bin dir; bin=$(pg_bin || true); dir=$(pg_dir)
  if [ -n "$bin" ] && [ -f "$dir/postmaster.pid" ]; then
    as_pg "$bin/pg_ctl" -D "$dir" -m fast -w stop >&2 || true; log "postgres stopped"; fi
}

status() {
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then log "redis: up on $REDIS_PORT"; else log "redis: down"; fi
  local bin; bin=$(pg_bin || true)
  if [ -n "$bin" ] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then log "postgres: up on $PG_PORT"; else log "postgres: down"; fi
}
