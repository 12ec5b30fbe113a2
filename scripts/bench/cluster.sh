# shellcheck shell=bash
# scripts/bench.sh, scenarios 12 and 13: on a Redis Cluster of the bench's own (issue
# 15). One hot sale with the `global` scope, then 100 sales at once with the `per_item`
# scope, each with how the script calls spread over the cluster's masters.

# A Redis Cluster of the bench's own (3 masters, 3 replicas on CLUSTER_PORT..+5, data
# under $OUT), so its figures and its keys never mix with the development cluster's.
CLUSTER_PORT=${BENCH_CLUSTER_PORT:-7401}
CLUSTER_UP=""
cluster_services() {
  SECKILL_LOCAL_CLUSTER_PORT=$CLUSTER_PORT SECKILL_LOCAL_CLUSTER_DIR="$PWD/$OUT/redis-cluster" \
    scripts/services.sh "$@"
}
start_cluster() {
  CLUSTER_NODES=$(cluster_services cluster-up | sed 's/^export SECKILL_REDIS_CLUSTER_NODES=//')
  CLUSTER_UP=1
}
stop_cluster() {
  [ -n "$CLUSTER_UP" ] || return 0
  cluster_services cluster-down --wipe >/dev/null 2>&1 || true
  CLUSTER_UP=""
}
# The cluster's masters' ports, one per line.
cluster_masters() {
  local port
  for ((port = CLUSTER_PORT; port < CLUSTER_PORT + 6; port++)); do
    [ "$(redis-cli -p "$port" role 2>/dev/null | head -1)" = master ] && echo "$port"
  done
}
# Zeroes every master's command statistics; then cluster_calls writes "PORT CALLS" per
# master: the script calls (EVALSHA: limiter decisions and reservations) it ran since.
# Scripts, not all commands: commandstats also counts the commands a script runs inside
# Redis, which would weigh a script by its length.
cluster_reset_stats() {
  local port
  for port in $(cluster_masters); do redis-cli -p "$port" config resetstat >/dev/null; done
}
cluster_calls() {
  local port
  for port in $(cluster_masters); do
    echo "$port $(redis-cli -p "$port" info commandstats | tr -d '\r' |
      awk -F'[:=,]' '$1 == "cmdstat_evalsha" { n += $3 } END { print n + 0 }')"
  done
}

scenarios_cluster() {
  local item
  # 12. On a Redis Cluster (issue 15): one hot sale, `global` scope, the "3 dimensions"
  # scenario (limiter + reservation script), and how the Redis calls spread over the
  # masters. The cluster's keys are wiped with it.
  if want cluster_one_sale; then
    log "cluster_one_sale: starting a Redis Cluster on ports $CLUSTER_PORT-$((CLUSTER_PORT + 5))"
    start_cluster
    start_instances 1 "$OUT/three.toml" SECKILL_REDIS_CLUSTER_NODES="$CLUSTER_NODES"
    item=$(bought_item 1)
    cluster_reset_stats
    loadgen cluster_one_sale 1 --item "$item" --users "$USERS" --ips "$USERS"
    cluster_calls >"$OUT/cluster_one_sale.masters"
    stop_instances
    stop_cluster
  fi

  # 13. The same cluster, 100 sales at once with the `per_item` scope: user i buys item
  # i % 100 (its first request an order, then 409 ALREADY_PURCHASED), so every sale's
  # limiter keys and stock live in its own slot and the script calls spread over the
  # masters.
  if want cluster_many_sales; then
    log "cluster_many_sales: starting a Redis Cluster on ports $CLUSTER_PORT-$((CLUSTER_PORT + 5))"
    start_cluster
    start_instances 1 "$OUT/three_per_item.toml" SECKILL_REDIS_CLUSTER_NODES="$CLUSTER_NODES"
    cluster_reset_stats
    # shellcheck disable=SC2046
    CPU_PIDS="${PIDS[*]}" run_loadgen cluster_many_sales $(targets 1) --concurrency "$CONCURRENCY" \
      --duration "$SECONDS_EACH" "${NO_LIMITS[@]}" --sales 100 --stock "$USERS" \
      --users "$USERS" --ips "$USERS"
    cluster_calls >"$OUT/cluster_many_sales.masters"
    stop_instances
    stop_cluster
  fi
}
