#!/usr/bin/env bash
# Private Redis and Postgres for development and tests.
#
#   scripts/services.sh up       install if missing, start, wait, create the database;
#                                prints `export REDIS_URL=… DATABASE_URL=…` on stdout
#   scripts/services.sh down     stop both
#   scripts/services.sh status   say what runs
#   scripts/services.sh env      print the exports only
#
# A local Redis Cluster (3 masters, 3 replicas), for the app's cluster mode:
#
#   scripts/services.sh cluster-up       start the six nodes, create the cluster when they
#                                        are fresh, wait until every node says
#                                        cluster_state:ok; prints
#                                        `export SECKILL_REDIS_CLUSTER_NODES=redis://…,…`
#   scripts/services.sh cluster-down     stop the six (their data is kept: the next
#                                        cluster-up brings the same cluster back)
#   scripts/services.sh cluster-down --wipe   stop them and delete their data, so the next
#                                        cluster-up creates a fresh cluster
#   scripts/services.sh cluster-status   say which nodes run, their role, the cluster state
#   scripts/services.sh cluster-env      print the export only
#
#   SECKILL_LOCAL_CLUSTER_PORT             first node's port [7001]; the nodes use it and
#                                          the next five, their cluster bus port + 10000
#   SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS  cluster-node-timeout [5000]: long enough that a
#                                          loaded 2-core machine does not fail over by accident
#   SECKILL_LOCAL_CLUSTER_DIR              data folder [.local/redis-cluster], one
#                                          sub-folder per port (nodes.conf, append-only
#                                          files, redis.pid, redis.log)
#
# A test can run its own throw-away cluster beside the developer's, e.g.
#   SECKILL_LOCAL_CLUSTER_PORT=7101 SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS=1000 \
#     SECKILL_LOCAL_CLUSTER_DIR=/tmp/x scripts/services.sh cluster-up
# and stop it with the same variables and `cluster-down --wipe`. cluster-* always manage
# the local cluster these variables describe; a SECKILL_REDIS_CLUSTER_NODES already set
# is not consulted (scripts/run.sh --cluster takes it as given).
#
# The instances listen on loopback only (Redis 6380, Postgres 5433 by default) and keep
# their data under .local/ (git-ignored), so they never touch a system-wide server.
# When REDIS_URL or DATABASE_URL is already set, that service is taken as given.
# Running `up` (or `cluster-up`) twice is harmless. Progress goes to stderr, the exports to stdout, so
# callers can `eval "$(scripts/services.sh up)"`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REDIS_PORT=${SECKILL_LOCAL_REDIS_PORT:-6380}
PG_PORT=${SECKILL_LOCAL_PG_PORT:-5433}
PG_DB=${SECKILL_LOCAL_PG_DB:-seckill}
LOCAL="$ROOT/.local"
REDIS_DIR="$LOCAL/redis"
CLUSTER_PORT=${SECKILL_LOCAL_CLUSTER_PORT:-7001}
CLUSTER_NODE_TIMEOUT_MS=${SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS:-5000}
CLUSTER_DIR=${SECKILL_LOCAL_CLUSTER_DIR:-$LOCAL/redis-cluster}

log() { echo "services: $*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root, apt_install, wait_for, pg_bin, pg_user, as_pg
. "$ROOT/scripts/lib.sh"

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
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
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

# --- the local Redis Cluster ----------------------------------------------------------

cluster_ports() { seq "$CLUSTER_PORT" $((CLUSTER_PORT + 5)); }

cluster_check_settings() {
  if ! { [[ $CLUSTER_PORT =~ ^[0-9]+$ ]] && [ "$CLUSTER_PORT" -ge 1 ] && [ $((CLUSTER_PORT + 5 + 10000)) -le 65535 ]; }; then
    die "SECKILL_LOCAL_CLUSTER_PORT=$CLUSTER_PORT: need 1..55530 (the bus ports are the node ports + 10000)"
  fi
  if ! { [[ $CLUSTER_NODE_TIMEOUT_MS =~ ^[0-9]+$ ]] && [ "$CLUSTER_NODE_TIMEOUT_MS" -ge 100 ]; }; then
    die "SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS=$CLUSTER_NODE_TIMEOUT_MS: need a number of milliseconds >= 100"
  fi
}

# `cluster info` / `info replication` of one node, "" when it does not answer.
cluster_info() { redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r' || true; }
node_field() { sed -n "s/^$2://p" <<<"$1"; }

# node_ok PORT: the node sees the whole cluster healthy (all slots served, 6 nodes known)
# and, when it is a replica, its link to its master is up (a replica that never synced
# could not take over, which a chaos test started right after cluster-up relies on).
node_ok() {
  local info repl
  info=$(cluster_info "$1")
  [ "$(node_field "$info" cluster_state)" = ok ] || return 1
  [ "$(node_field "$info" cluster_slots_ok)" = 16384 ] || return 1
  [ "$(node_field "$info" cluster_known_nodes)" -ge 6 ] 2>/dev/null || return 1
  repl=$(redis-cli -p "$1" info replication 2>/dev/null | tr -d '\r')
  case "$(node_field "$repl" role)" in
    master) return 0 ;;
    slave) [ "$(node_field "$repl" master_link_status)" = up ] ;;
    *) return 1 ;;
  esac
}
cluster_ok() { local p; for p in $(cluster_ports); do node_ok "$p" || return 1; done; }

# A node that has never joined a cluster: knows only itself, serves no slot.
node_fresh() {
  local info
  info=$(cluster_info "$1")
  [ "$(node_field "$info" cluster_known_nodes)" = 1 ] && [ "$(node_field "$info" cluster_slots_assigned)" = 0 ]
}

# The pid in PORT's pidfile when that process is still the redis-server on PORT.
node_pid() {
  local pidfile="$CLUSTER_DIR/$1/redis.pid" pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && ps -o args= -p "$pid" 2>/dev/null | grep -q "^redis-server .*:$1\b" || return 1
  echo "$pid"
}

# node_running PORT: whether a cluster node already answers on PORT (another checkout's
# is taken as is, as `up` takes any Redis on its port). Dies when the port or its bus
# port is taken by anything else: a plain Redis or another program.
node_running() {
  local port=$1
  if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
    redis-cli -p "$port" info cluster 2>/dev/null | grep -q '^cluster_enabled:1' \
      || die "a Redis without cluster mode answers on $port; stop it or set SECKILL_LOCAL_CLUSTER_PORT"
    return 0
  fi
  ! port_in_use "$port" || die "port $port is taken by something that is not Redis; set SECKILL_LOCAL_CLUSTER_PORT"
  ! port_in_use $((port + 10000)) || die "bus port $((port + 10000)) is taken; set SECKILL_LOCAL_CLUSTER_PORT"
  return 1
}

node_start() {
  local port=$1 dir="$CLUSTER_DIR/$1"
  mkdir -p "$dir"
  # Append-only like the single node; nodes.conf (the node's id and view of the cluster)
  # lives in the same folder, so a restart brings back the same cluster.
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
    --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS" \
    --appendonly yes --save "" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >&2
}

cluster_up() {
  cluster_check_settings
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
  # All six ports are checked before any node starts: a conflict on the last one must
  # not leave the first five running.
  local p to_start=()
  for p in $(cluster_ports); do
    if node_running "$p"; then log "redis cluster node already up on $p"; else to_start+=("$p"); fi
  done
  for p in "${to_start[@]}"; do node_start "$p"; done
  for p in $(cluster_ports); do
    wait_for "redis cluster node on $p" 30 "" redis-cli -p "$p" ping \
      || { tail -n 20 "$CLUSTER_DIR/$p/redis.log" >&2 2>/dev/null; exit 1; }
  done
  local base_info fresh=0
  base_info=$(cluster_info "$CLUSTER_PORT")
  if [ "$(node_field "$base_info" cluster_state)" = ok ] && [ "$(node_field "$base_info" cluster_slots_assigned)" = 16384 ]; then
    log "redis cluster already created on $CLUSTER_PORT-$((CLUSTER_PORT + 5))"
  else
    for p in $(cluster_ports); do node_fresh "$p" && fresh=$((fresh + 1)); done
    if [ "$fresh" = 6 ]; then
      local addrs=()
      for p in $(cluster_ports); do addrs+=("127.0.0.1:$p"); done
      log "creating the redis cluster (3 masters, 3 replicas, node timeout ${CLUSTER_NODE_TIMEOUT_MS} ms)"
      redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >&2 \
        || die "redis-cli --cluster create failed"
    elif [ "$fresh" != 0 ]; then
      die "$fresh of the 6 nodes are fresh, the others belong to a cluster: run \`$0 cluster-down --wipe\` and cluster-up again"
    else
      # Restarted nodes (nodes.conf kept): they find each other again by themselves.
      log "redis cluster nodes restarted; waiting for them to agree"
    fi
  fi
  wait_for "redis cluster state ok on every node" 60 "" cluster_ok || {
    cluster_status
    die "the cluster is not ok; if its data is broken, \`$0 cluster-down --wipe\` and cluster-up again"
  }
  log "redis cluster up on 127.0.0.1:$CLUSTER_PORT-$((CLUSTER_PORT + 5)) (node timeout ${CLUSTER_NODE_TIMEOUT_MS} ms, data in $CLUSTER_DIR)"
}

cluster_env() {
  local p urls=()
  for p in $(cluster_ports); do urls+=("redis://127.0.0.1:$p"); done
  echo "export SECKILL_REDIS_CLUSTER_NODES=$(IFS=,; echo "${urls[*]}")"
}

# Stops the nodes this cluster's pidfiles name (never another checkout's); --wipe then
# deletes their folders.
cluster_down() {
  local wipe=no p pid left=()
  case "${1:-}" in
    "") ;;
    --wipe) wipe=yes ;;
    *) die "usage: $0 cluster-down [--wipe]" ;;
  esac
  cluster_check_settings
  # SIGTERM to all six first, then wait for each: one at a time, a master would wait
  # for its replica's acknowledgement while the others keep running, and with a short
  # node timeout a replica could take over from a master already stopped.
  local pids=()
  for p in $(cluster_ports); do
    if pid=$(node_pid "$p"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    elif redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
      left+=("$p")
    fi
  done
  for pid in "${pids[@]}"; do stop_process "$pid"; done
  [ ${#pids[@]} -eq 0 ] || log "redis cluster nodes stopped (${#pids[@]} of 6)"
  if [ ${#left[@]} -gt 0 ]; then
    log "left running (not started from $CLUSTER_DIR): ${left[*]}"
    [ "$wipe" = no ] || die "not wiping while nodes run on ${left[*]}"
  fi
  if [ "$wipe" = yes ]; then
    for p in $(cluster_ports); do rm -rf "${CLUSTER_DIR:?}/$p"; done
    rmdir "$CLUSTER_DIR" 2>/dev/null || true
    log "redis cluster data deleted ($CLUSTER_DIR)"
  fi
}

cluster_status() {
  local p info repl
  for p in $(cluster_ports); do
    if redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
      info=$(cluster_info "$p")
      repl=$(redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r')
      log "redis cluster node $p: up, $(node_field "$repl" role), cluster_state:$(node_field "$info" cluster_state), $(node_field "$info" cluster_slots_assigned) slots assigned"
    else
      log "redis cluster node $p: down"
    fi
  done
}

case "${1:-up}" in
  up) redis_up; pg_up; print_env ;;
  down) down ;;
  status) status ;;
  env) print_env ;;
  cluster-up) cluster_up; cluster_env ;;
  cluster-down) cluster_down "${2:-}" ;;
  cluster-status) cluster_status ;;
  cluster-env) cluster_env ;;
  *) die "usage: $0 up|down|status|env|cluster-up|cluster-down [--wipe]|cluster-status|cluster-env" ;;
esac
