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
# A local Redis Sentinel set (one master, one replica, three sentinels, quorum 2), for the
# app's Sentinel mode:
#
#   scripts/services.sh sentinel-up      start the five, wait until the replica is in sync
#                                        and every sentinel knows it and the two others;
#                                        prints `export SECKILL_REDIS_SENTINELS=redis://…,…`
#                                        and `export SECKILL_REDIS_SENTINEL_MASTER=<name>`
#   scripts/services.sh sentinel-down [--wipe]   stop them (sentinels first, so that none
#                                        fails the master over while it stops); --wipe
#                                        deletes their data and configuration
#   scripts/services.sh sentinel-status  each server's role, the master each sentinel names
#   scripts/services.sh sentinel-env     print the exports only
#
#   SECKILL_LOCAL_SENTINEL_PORT        first port [6391]: the master; the replica on the
#                                      next one, the three sentinels on the three after
#   SECKILL_LOCAL_SENTINEL_MASTER      the name the sentinels monitor the master under [seckill]
#   SECKILL_LOCAL_SENTINEL_DOWN_AFTER_MS       down-after-milliseconds [5000]
#   SECKILL_LOCAL_SENTINEL_FAILOVER_TIMEOUT_MS failover-timeout [10000]
#   SECKILL_LOCAL_SENTINEL_DIR         data folder [.local/redis-sentinel], one sub-folder
#                                      per port (redis.conf or sentinel.conf, which the
#                                      sentinels rewrite as roles change, append-only
#                                      files, redis.pid, redis.log)
#
# The configuration files are written once: a set restarted after a failover keeps its
# roles, and new timeouts need `sentinel-down --wipe` first. A test runs its own set the
# way it runs its own cluster (tests/sentinel_failover.rs: port 7501, 1000 ms down-after).
# Debian's redis-sentinel is installed when missing; without it the sentinels are
# `redis-server --sentinel`, the same program.
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
SENTINEL_PORT=${SECKILL_LOCAL_SENTINEL_PORT:-6391}
SENTINEL_MASTER=${SECKILL_LOCAL_SENTINEL_MASTER:-seckill}
SENTINEL_DOWN_AFTER_MS=${SECKILL_LOCAL_SENTINEL_DOWN_AFTER_MS:-5000}
SENTINEL_FAILOVER_TIMEOUT_MS=${SECKILL_LOCAL_SENTINEL_FAILOVER_TIMEOUT_MS:-10000}
SENTINEL_DIR=${SECKILL_LOCAL_SENTINEL_DIR:-$LOCAL/redis-sentinel}

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

# --- the local Redis Sentinel set ------------------------------------------------------

sentinel_data_ports() { seq "$SENTINEL_PORT" $((SENTINEL_PORT + 1)); }
sentinel_ports() { seq $((SENTINEL_PORT + 2)) $((SENTINEL_PORT + 4)); }

sentinel_check_settings() {
  if ! { [[ $SENTINEL_PORT =~ ^[0-9]+$ ]] && [ "$SENTINEL_PORT" -ge 1 ] && [ $((SENTINEL_PORT + 4)) -le 65535 ]; }; then
    die "SECKILL_LOCAL_SENTINEL_PORT=$SENTINEL_PORT: need 1..65531 (it and the next four)"
  fi
  [[ $SENTINEL_MASTER =~ ^[A-Za-z0-9._-]+$ ]] \
    || die "SECKILL_LOCAL_SENTINEL_MASTER=$SENTINEL_MASTER: letters, digits, '.', '_' and '-' only"
  local knob
  for knob in SENTINEL_DOWN_AFTER_MS SENTINEL_FAILOVER_TIMEOUT_MS; do
    if ! { [[ ${!knob} =~ ^[0-9]+$ ]] && [ "${!knob}" -ge 100 ]; }; then
      die "SECKILL_LOCAL_$knob=${!knob}: need a number of milliseconds >= 100"
    fi
  done
}

# The pid in PORT's pidfile when that process is still a Redis server or sentinel on PORT.
sentinel_pid() {
  local pidfile="$SENTINEL_DIR/$1/redis.pid" pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && ps -o args= -p "$pid" 2>/dev/null | grep -Eq "^redis-(server|sentinel) .*:$1\b" || return 1
  echo "$pid"
}

# The sentinel program: Debian's redis-sentinel, installed when missing; when apt cannot
# install it, redis-server in sentinel mode (the same binary: redis-sentinel is a link).
sentinel_program() {
  command -v redis-sentinel >/dev/null \
    || apt_install redis-sentinel \
    || log "redis-sentinel could not be installed; the sentinels run as redis-server --sentinel"
  if command -v redis-sentinel >/dev/null; then echo redis-sentinel; else echo redis-server; fi
}

# sentinel_node_start PORT [MASTER_PORT]: a data node (a replica of MASTER_PORT when given).
# Its configuration file is written once: the sentinels rewrite it (CONFIG REWRITE) when
# they change its role, and a restart keeps what they wrote.
sentinel_node_start() {
  local port=$1 dir="$SENTINEL_DIR/$1"
  mkdir -p "$dir"
  if [ ! -f "$dir/redis.conf" ]; then
    {
      echo "bind 127.0.0.1"; echo "port $port"; echo "dir $dir"
      echo "appendonly yes"; echo 'save ""'; echo "daemonize yes"
      echo "pidfile $dir/redis.pid"; echo "logfile $dir/redis.log"
      [ -z "${2:-}" ] || echo "replicaof 127.0.0.1 $2"
    } >"$dir/redis.conf"
  fi
  redis-server "$dir/redis.conf" >&2
}

# sentinel_start PROGRAM PORT: one sentinel; its file, too, is written once and then
# kept up to date by the sentinel itself (the replicas and sentinels it met, the epoch).
sentinel_start() {
  local program=$1 port=$2 dir="$SENTINEL_DIR/$2"
  mkdir -p "$dir"
  if [ ! -f "$dir/sentinel.conf" ]; then
    {
      echo "bind 127.0.0.1"; echo "port $port"; echo "dir $dir"; echo "daemonize yes"
      echo "pidfile $dir/redis.pid"; echo "logfile $dir/redis.log"
      echo "sentinel monitor $SENTINEL_MASTER 127.0.0.1 $SENTINEL_PORT 2"
      echo "sentinel down-after-milliseconds $SENTINEL_MASTER $SENTINEL_DOWN_AFTER_MS"
      echo "sentinel failover-timeout $SENTINEL_MASTER $SENTINEL_FAILOVER_TIMEOUT_MS"
      echo "sentinel parallel-syncs $SENTINEL_MASTER 1"
    } >"$dir/sentinel.conf"
  fi
  if [ "$program" = redis-sentinel ]; then
    redis-sentinel "$dir/sentinel.conf" >&2
  else
    redis-server "$dir/sentinel.conf" --sentinel >&2
  fi
}

# `SENTINEL MASTER <name>` of the sentinel on PORT as "field<TAB>value" lines.
sentinel_view() {
  redis-cli -p "$1" sentinel master "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste - - || true
}
view_field() { awk -F'\t' -v k="$2" '$1 == k { print $2 }' <<<"$1"; }

# The set is ready: every sentinel names the same master, sees it up, one replica and the
# two other sentinels (so a failover can be authorised); that server is master and the
# other one its replica with its link up (a replica that never synced could not take
# over, which a failover test started right after sentinel-up relies on; and an old
# master restarted after a failover comes back as master until the sentinels turn it
# into a replica).
sentinel_ok() {
  local s view p repl master="" named
  for s in $(sentinel_ports); do
    view=$(sentinel_view "$s")
    [ "$(view_field "$view" flags)" = master ] || return 1
    [ "$(view_field "$view" num-slaves)" -ge 1 ] 2>/dev/null || return 1
    [ "$(view_field "$view" num-other-sentinels)" -ge 2 ] 2>/dev/null || return 1
    named="$(view_field "$view" ip):$(view_field "$view" port)"
    [ -z "$master" ] || [ "$named" = "$master" ] || return 1
    master=$named
  done
  for p in $(sentinel_data_ports); do
    repl=$(redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r')
    if [ "127.0.0.1:$p" = "$master" ]; then
      [ "$(node_field "$repl" role)" = master ] || return 1
    else
      [ "$(node_field "$repl" role)" = slave ] || return 1
      [ "$(node_field "$repl" master_port)" = "${master##*:}" ] || return 1
      [ "$(node_field "$repl" master_link_status)" = up ] || return 1
    fi
  done
}

sentinel_up() {
  sentinel_check_settings
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
  local program p
  program=$(sentinel_program)
  # Every port is checked before anything starts: a conflict on the last one must not
  # leave the first four running.
  local to_start=()
  for p in $(sentinel_data_ports) $(sentinel_ports); do
    if sentinel_pid "$p" >/dev/null; then log "redis sentinel set: $p already up"; continue; fi
    ! port_in_use "$p" || die "port $p is taken by something this set did not start; set SECKILL_LOCAL_SENTINEL_PORT"
    to_start+=("$p")
  done
  # The data nodes first, and the replica in sync before the sentinels start: a sentinel
  # learns the replicas from the master's INFO, at once when they are already there.
  for p in $(sentinel_data_ports); do
    [[ " ${to_start[*]} " == *" $p "* ]] || continue
    if [ "$p" = "$SENTINEL_PORT" ]; then sentinel_node_start "$p"; else sentinel_node_start "$p" "$SENTINEL_PORT"; fi
  done
  for p in $(sentinel_data_ports); do
    wait_for "redis on $p" 30 "" redis_answers "$p" || { tail -n 20 "$SENTINEL_DIR/$p/redis.log" >&2 2>/dev/null; exit 1; }
  done
  for p in $(sentinel_ports); do
    [[ " ${to_start[*]} " != *" $p "* ]] || sentinel_start "$program" "$p"
  done
  for p in $(sentinel_ports); do
    wait_for "sentinel on $p" 30 "" redis_answers "$p" || { tail -n 20 "$SENTINEL_DIR/$p/redis.log" >&2 2>/dev/null; exit 1; }
  done
  wait_for "the sentinels agreeing on master $SENTINEL_MASTER" 60 "" sentinel_ok || {
    sentinel_status
    die "the sentinel set is not ready; if its data is broken, \`$0 sentinel-down --wipe\` and sentinel-up again"
  }
  log "redis sentinel set up: master $SENTINEL_MASTER at $(sentinel_master_addr), sentinels on 127.0.0.1:$((SENTINEL_PORT + 2))-$((SENTINEL_PORT + 4)) (down-after ${SENTINEL_DOWN_AFTER_MS} ms, $program, data in $SENTINEL_DIR)"
}

# host:port of the master, as the first sentinel that answers names it.
sentinel_master_addr() {
  local s addr
  for s in $(sentinel_ports); do
    addr=$(redis-cli -p "$s" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste -sd:)
    [ -z "$addr" ] || { echo "$addr"; return 0; }
  done
  echo "unknown"
}

sentinel_env() {
  local p urls=()
  for p in $(sentinel_ports); do urls+=("redis://127.0.0.1:$p"); done
  echo "export SECKILL_REDIS_SENTINELS=$(IFS=,; echo "${urls[*]}")"
  echo "export SECKILL_REDIS_SENTINEL_MASTER=$SENTINEL_MASTER"
}

# stop_set sentinels|servers: SIGTERM to each of them this set's pidfiles name (never
# another checkout's), then waits for them all; prints how many it stopped.
stop_set() {
  local p pid pids=() ports
  if [ "$1" = sentinels ]; then ports=$(sentinel_ports); else ports=$(sentinel_data_ports); fi
  for p in $ports; do
    if pid=$(sentinel_pid "$p"); then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
  done
  for pid in "${pids[@]}"; do stop_process "$pid"; done
  echo "${#pids[@]}"
}

sentinel_down() {
  local wipe=no stopped p
  case "${1:-}" in
    "") ;;
    --wipe) wipe=yes ;;
    *) die "usage: $0 sentinel-down [--wipe]" ;;
  esac
  sentinel_check_settings
  # The sentinels first: with them gone, stopping the master cannot start a failover.
  stopped=$(stop_set sentinels)
  stopped=$((stopped + $(stop_set servers)))
  [ "$stopped" = 0 ] || log "redis sentinel set stopped ($stopped of 5)"
  if [ "$wipe" = yes ]; then
    for p in $(sentinel_data_ports) $(sentinel_ports); do
      ! sentinel_pid "$p" >/dev/null || die "not wiping: $p still runs"
      rm -rf "${SENTINEL_DIR:?}/$p"
    done
    rmdir "$SENTINEL_DIR" 2>/dev/null || true
    log "redis sentinel set data deleted ($SENTINEL_DIR)"
  fi
}

sentinel_status() {
  local p repl
  for p in $(sentinel_data_ports); do
    if redis_answers "$p"; then
      repl=$(redis-cli -p "$p" info replication 2>/dev/null | tr -d '\r')
      log "redis sentinel set, server $p: up, $(node_field "$repl" role)"
    else
      log "redis sentinel set, server $p: down"
    fi
  done
  for p in $(sentinel_ports); do
    if redis_answers "$p"; then
      local view; view=$(sentinel_view "$p")
      log "redis sentinel set, sentinel $p: up, names $(redis-cli -p "$p" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste -sd:) master ($(view_field "$view" flags); $(view_field "$view" num-slaves) replica(s), $(view_field "$view" num-other-sentinels) other sentinels)"
    else
      log "redis sentinel set, sentinel $p: down"
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
  sentinel-up) sentinel_up; sentinel_env ;;
  sentinel-down) sentinel_down "${2:-}" ;;
  sentinel-status) sentinel_status ;;
  sentinel-env) sentinel_env ;;
  *) die "usage: $0 up|down|status|env|cluster-up|cluster-down [--wipe]|cluster-status|cluster-env|sentinel-up|sentinel-down [--wipe]|sentinel-status|sentinel-env" ;;
esac
