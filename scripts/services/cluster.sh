# shellcheck shell=bash
# scripts/services.sh, the cluster topology: a local Redis Cluster (3 masters, 3
# replicas), for the app's cluster mode.
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
# is not consulted (scripts/run.sh --cluster takes it as given). Running cluster-up twice
# is harmless.

CLUSTER_PORT=${SECKILL_LOCAL_CLUSTER_PORT:-7001}
CLUSTER_NODE_TIMEOUT_MS=${SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS:-5000}
CLUSTER_DIR=${SECKILL_LOCAL_CLUSTER_DIR:-$LOCAL/redis-cluster}

cluster_ports() { seq "$CLUSTER_PORT" $((CLUSTER_PORT + 5)); }

cluster_check_settings() {
  if ! { [[ $CLUSTER_PORT =~ ^[0-9]+$ ]] && [ "$CLUSTER_PORT" -ge 1 ] && [ $((CLUSTER_PORT + 5 + 10000)) -le 65535 ]; }; then
    die "SECKILL_LOCAL_CLUSTER_PORT=$CLUSTER_PORT: need 1..55530 (the bus ports are the node ports + 10000)"
  fi
  if ! { [[ $CLUSTER_NODE_TIMEOUT_MS =~ ^[0-9]+$ ]] && [ "$CLUSTER_NODE_TIMEOUT_MS" -ge 100 ]; }; then
    die "SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS=$CLUSTER_NODE_TIMEOUT_MS: need a number of milliseconds >= 100"
  fi
}

# `cluster info` of one node, "" when it does not answer.
cluster_info() { redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r' || true; }

# node_ok PORT: the node sees the whole cluster healthy (all slots served, 6 nodes known)
# and, when it is a replica, its link to its master is up (a replica that never synced
# could not take over, which a chaos test started right after cluster-up relies on).
node_ok() {
  local info repl
  info=$(cluster_info "$1")
  [ "$(redis_field "$info" cluster_state)" = ok ] || return 1
  [ "$(redis_field "$info" cluster_slots_ok)" = 16384 ] || return 1
  [ "$(redis_field "$info" cluster_known_nodes)" -ge 6 ] 2>/dev/null || return 1
  repl=$(redis_info "$1" replication)
  case "$(redis_field "$repl" role)" in
    master) return 0 ;;
    slave) [ "$(redis_field "$repl" master_link_status)" = up ] ;;
    *) return 1 ;;
  esac
}
cluster_ok() { local p; for p in $(cluster_ports); do node_ok "$p" || return 1; done; }

# A node that has never joined a cluster: knows only itself, serves no slot.
node_fresh() {
  local info
  info=$(cluster_info "$1")
  [ "$(redis_field "$info" cluster_known_nodes)" = 1 ] && [ "$(redis_field "$info" cluster_slots_assigned)" = 0 ]
}

# The pid of the node on PORT when this cluster's folder started it (never another
# checkout's).
node_pid() { redis_pidfile_pid "$CLUSTER_DIR/$1/redis.pid" "$1"; }

# node_running PORT: whether a cluster node already answers on PORT (another checkout's
# is taken as is, as `up` takes any Redis on its port). Dies when the port or its bus
# port is taken by anything else: a plain Redis or another program.
node_running() {
  local port=$1
  if redis_answers "$port"; then
    redis_info "$port" cluster | grep -q '^cluster_enabled:1' \
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
  need_redis
  # All six ports are checked before any node starts: a conflict on the last one must
  # not leave the first five running.
  local p to_start=()
  for p in $(cluster_ports); do
    if node_running "$p"; then log "redis cluster node already up on $p"; else to_start+=("$p"); fi
  done
  for p in "${to_start[@]}"; do node_start "$p"; done
  for p in $(cluster_ports); do
    wait_for "redis cluster node on $p" 30 "" redis_answers "$p" \
      || { tail -n 20 "$CLUSTER_DIR/$p/redis.log" >&2 2>/dev/null; exit 1; }
  done
  local base_info fresh=0
  base_info=$(cluster_info "$CLUSTER_PORT")
  if [ "$(redis_field "$base_info" cluster_state)" = ok ] && [ "$(redis_field "$base_info" cluster_slots_assigned)" = 16384 ]; then
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

# Stops the nodes this cluster's pidfiles name (never another checkout's), all six at
# once (stop_processes: one at a time, with a short node timeout, a replica could take
# over from a master already stopped); --wipe then deletes their folders.
cluster_down() {
  local wipe=no p pid pids=() left=()
  case "${1:-}" in
    "") ;;
    --wipe) wipe=yes ;;
    *) die "usage: $0 cluster-down [--wipe]" ;;
  esac
  cluster_check_settings
  for p in $(cluster_ports); do
    if pid=$(node_pid "$p"); then
      pids+=("$pid")
    elif redis_answers "$p"; then
      left+=("$p")
    fi
  done
  stop_processes "${pids[@]}"
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
    if redis_answers "$p"; then
      info=$(cluster_info "$p")
      repl=$(redis_info "$p" replication)
      log "redis cluster node $p: up, $(redis_field "$repl" role), cluster_state:$(redis_field "$info" cluster_state), $(redis_field "$info" cluster_slots_assigned) slots assigned"
    else
      log "redis cluster node $p: down"
    fi
  done
}
