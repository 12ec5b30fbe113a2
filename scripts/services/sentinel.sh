# shellcheck shell=bash
# scripts/services.sh, the Sentinel topology: a local Redis Sentinel set (one master, one
# replica, three sentinels, quorum 2), for the app's Sentinel mode.
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
# `redis-server --sentinel`, the same program. Running sentinel-up twice is harmless.

SENTINEL_PORT=${SECKILL_LOCAL_SENTINEL_PORT:-6391}
SENTINEL_MASTER=${SECKILL_LOCAL_SENTINEL_MASTER:-seckill}
SENTINEL_DOWN_AFTER_MS=${SECKILL_LOCAL_SENTINEL_DOWN_AFTER_MS:-5000}
SENTINEL_FAILOVER_TIMEOUT_MS=${SECKILL_LOCAL_SENTINEL_FAILOVER_TIMEOUT_MS:-10000}
SENTINEL_DIR=${SECKILL_LOCAL_SENTINEL_DIR:-$LOCAL/redis-sentinel}

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

# The pid of the server or sentinel on PORT when this set's folder started it (never
# another checkout's).
sentinel_pid() { redis_pidfile_pid "$SENTINEL_DIR/$1/redis.pid" "$1"; }

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
    repl=$(redis_info "$p" replication)
    if [ "127.0.0.1:$p" = "$master" ]; then
      [ "$(redis_field "$repl" role)" = master ] || return 1
    else
      [ "$(redis_field "$repl" role)" = slave ] || return 1
      [ "$(redis_field "$repl" master_port)" = "${master##*:}" ] || return 1
      [ "$(redis_field "$repl" master_link_status)" = up ] || return 1
    fi
  done
}

sentinel_up() {
  sentinel_check_settings
  need_redis
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

# host:port of the master as the sentinel on PORT names it, "" when it does not answer.
sentinel_named_master() {
  redis-cli -p "$1" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | tr -d '\r' | paste -sd:
}

# host:port of the master, as the first sentinel that answers names it.
sentinel_master_addr() {
  local s addr
  for s in $(sentinel_ports); do
    addr=$(sentinel_named_master "$s")
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

# stop_set sentinels|servers: stops those of them this set's pidfiles name (never another
# checkout's), all at once (stop_processes); prints how many it stopped.
stop_set() {
  local p pid pids=() ports
  if [ "$1" = sentinels ]; then ports=$(sentinel_ports); else ports=$(sentinel_data_ports); fi
  for p in $ports; do
    if pid=$(sentinel_pid "$p"); then pids+=("$pid"); fi
  done
  stop_processes "${pids[@]}"
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
  local p repl view
  for p in $(sentinel_data_ports); do
    if redis_answers "$p"; then
      repl=$(redis_info "$p" replication)
      log "redis sentinel set, server $p: up, $(redis_field "$repl" role)"
    else
      log "redis sentinel set, server $p: down"
    fi
  done
  for p in $(sentinel_ports); do
    if redis_answers "$p"; then
      view=$(sentinel_view "$p")
      log "redis sentinel set, sentinel $p: up, names $(sentinel_named_master "$p") master ($(view_field "$view" flags); $(view_field "$view" num-slaves) replica(s), $(view_field "$view" num-other-sentinels) other sentinels)"
    else
      log "redis sentinel set, sentinel $p: down"
    fi
  done
}
