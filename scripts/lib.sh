# shellcheck shell=bash
# Shell helpers shared by the scripts that install tools, start Redis, Postgres or the app,
# or make databases: scripts/services.sh and its parts in scripts/services/, e2e.sh,
# check-deploy.sh, bench.sh, bench-limiter-script.sh, soak.sh, memory-*.sh and
# loadtest/jmeter/run.sh. One copy of each, so a fix to how we start, wait for or stop
# something reaches every script. The one exception: the soak's program starts its own
# redis-server and app instances (scripts/soak/processes.py), because it must be their
# parent to kill and restart them mid-run; a change to start_redis_server or start_app
# goes there too.
# Source it after defining `log` (progress to stderr) and `die` (log and exit).

# The checkout this file belongs to (target/, migrations/ are found from it).
SECKILL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# --- root and packages -------------------------------------------------------------------

# Runs a command as root: directly when we are root, through sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root (or sudo) to run: $*"; fi
}

# apt-get as root, one at a time: `make test` runs scripts that install packages side by
# side, and a second apt-get would fail at once on dpkg's lock instead of waiting.
APT_LOCK=/var/lock/seckill-apt.lock
apt_get() {
  as_root flock "$APT_LOCK" env DEBIAN_FRONTEND=noninteractive apt-get "$@"
}

# Installs Debian packages without recommends. Updates the lists first: on a fresh
# machine they may be empty or stale.
apt_install() {
  log "installing $* with apt-get"
  apt_get update -qq >&2
  apt_get install -y -qq --no-install-recommends "$@" >&2
}

# --- processes -----------------------------------------------------------------------------

# wait_for WHAT DEADLINE PID CMD...: runs CMD (its output discarded) every 0.2 s until it
# succeeds. Waiting is polled, never a fixed sleep. Gives up, saying why on stderr and
# returning 1, after DEADLINE seconds, or as soon as process PID has exited: a server that
# died while starting will never answer. PID "" watches no process.
wait_for() {
  local what=$1 deadline=$2 pid=$3; shift 3
  local end=$((SECONDS + deadline))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then log "$what: the process exited"; return 1; fi
    if [ $SECONDS -ge $end ]; then log "$what: not within ${deadline}s"; return 1; fi
    sleep 0.2
  done
}

# Stops a process we started: SIGTERM first, so the app drains in-flight requests
# (shutdown_timeout_secs), SIGKILL only when that takes longer than 15 s. Works on
# processes another subshell started too (then there is nothing to reap).
stop_process() {
  local pid=$1
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local end=$((SECONDS + 15))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# --- ports ---------------------------------------------------------------------------------

# free_port: a TCP port free on 127.0.0.1 now, picked by the OS (python3 or node, whichever
# the machine has). Another process can take it before the caller binds it: start_app
# retries on a new one.
free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
  elif command -v node >/dev/null; then
    node -e '
      const s = require("net").createServer();
      s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
  else
    die "free_port needs python3 or node"
  fi
}

# port_in_use PORT: whether something accepts connections on 127.0.0.1:PORT. Something
# else on a fixed port would answer our readiness polls, so starters refuse it.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# stop_processes PID...: stops several processes we started together: SIGTERM to all of
# them first, then waits for each (stop_process). One at a time, a Redis master would wait
# for its replica while the others keep running, and a replica or a sentinel could start
# a failover from a master already stopped.
stop_processes() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do stop_process "$pid"; done
}

# --- Redis ---------------------------------------------------------------------------------

# need_redis: installs redis-server and redis-cli (Debian's packages) when missing.
need_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  command -v redis-cli >/dev/null || apt_install redis-tools
}

# redis_answers PORT: whether the Redis on 127.0.0.1:PORT answers PONG (not LOADING).
redis_answers() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }

# redis_field TEXT FIELD: FIELD's value in TEXT, the "field:value" lines of an INFO or a
# CLUSTER INFO reply (carriage returns removed); nothing when the field is absent.
redis_field() { sed -n "s/^$2://p" <<<"$1"; }

# redis_info PORT [SECTION...]: `INFO SECTION` of the Redis on PORT without carriage
# returns, nothing when it does not answer.
redis_info() { local port=$1; shift; redis-cli -p "$port" info "$@" 2>/dev/null | tr -d '\r' || true; }

# redis_pidfile_pid PIDFILE PORT: the pid in PIDFILE when that process is still a
# redis-server or redis-sentinel listening on PORT (a pidfile outlives its process, and
# its pid may be reused), on stdout; returns 1 otherwise. Stopping by pidfile this way
# never stops a server another checkout started on the same port.
redis_pidfile_pid() {
  local pidfile=$1 port=$2 pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && ps -o args= -p "$pid" 2>/dev/null | grep -Eq "^redis-(server|sentinel) .*:$port\b" || return 1
  echo "$pid"
}

# start_redis_server PORT DIR [ARG...]: a redis-server of the caller's own on
# 127.0.0.1:PORT (no snapshots; data and log in DIR; more settings in ARG...), in the
# background; polls it until it answers, 30 s at most. Sets REDIS_SERVER_PID; returns 1,
# with the log's tail, when it does not come up.
start_redis_server() {
  local port=$1 dir=$2; shift 2
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --save "" --logfile "$dir/redis.log" "$@" &
  REDIS_SERVER_PID=$!
  wait_for "redis on $port" 30 "$REDIS_SERVER_PID" redis_answers "$port" \
    || { tail -n 20 "$dir/redis.log" >&2; return 1; }
}

# --- Postgres ------------------------------------------------------------------------------

# The newest installed Postgres server's bin folder (Debian: /usr/lib/postgresql/N/bin).
# shellcheck disable=SC2012 # version folders are plain numbers
pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && echo "$d"
}

# Postgres refuses to run as root: as root it runs as the `postgres` user, otherwise as us.
pg_user() { if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# make_database PREFIX [SERVER_URL]: a fresh database for one run, named
# PREFIX_<UTC time>_<pid>_<n>, created through the `postgres` database of the server in
# SERVER_URL [DATABASE_URL] (the database named in that URL does not matter; its query
# string is kept). Each run gets its own because the app seeds limiter rules only into an
# empty database, and because a run's items and orders must be its alone and stay out of
# the developer database. Sets DB_NAME, DB_URL (for the app) and DB_ADMIN_URL (to drop
# it). Returns 1 with DB_NAME empty, saying why, when psql is missing or the server
# refuses; the caller decides whether that is fatal.
DB_SEQ=0
make_database() {
  local prefix=$1 server=${2:-${DATABASE_URL:-}} base query
  DB_NAME="" DB_URL="" DB_ADMIN_URL=""
  [ -n "$server" ] || { log "make_database: no DATABASE_URL"; return 1; }
  command -v psql >/dev/null || { log "make_database: psql not found (scripts/services.sh up installs it)"; return 1; }
  base=${server%%\?*}
  query=${server#"$base"}
  base=${base%/*}
  DB_SEQ=$((DB_SEQ + 1))
  local name
  name="${prefix}_$(date -u +%Y%m%d%H%M%S)_$$_$DB_SEQ"
  if ! psql "$base/postgres$query" -qc "CREATE DATABASE $name" >/dev/null; then
    log "make_database: could not create $name through $base/postgres"
    return 1
  fi
  # shellcheck disable=SC2034 # for the caller
  DB_NAME=$name DB_URL="$base/$name$query" DB_ADMIN_URL="$base/postgres$query"
  log "database $DB_NAME"
}

# drop_database NAME ADMIN_URL: drops a database make_database made, even with sessions
# still connected, within 20 s. Returns 1 when it could not.
drop_database() {
  [ -n "$1" ] || return 0
  timeout 20 psql "$2" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 \
    || { log "could not drop database $1"; return 1; }
}

# --- the app -------------------------------------------------------------------------------

# app_binary debug|release: the app binary to run, on stdout. $SECKILL_BIN when set (it
# must be executable); else target/PROFILE/seckill of this checkout. A debug binary is
# built only when missing (make test has just built one, with the test features); a
# release build is asked of cargo every time (a no-op when it is current).
app_binary() {
  local profile=$1 bin
  if [ -n "${SECKILL_BIN:-}" ]; then
    [ -x "$SECKILL_BIN" ] || die "SECKILL_BIN=$SECKILL_BIN is not executable"
    echo "$SECKILL_BIN"
    return
  fi
  bin="$SECKILL_ROOT/target/$profile/seckill"
  case $profile in
    debug)
      if [ ! -x "$bin" ]; then
        log "building the app (cargo build --bin seckill)"
        (cd "$SECKILL_ROOT" && cargo build --bin seckill >&2)
      fi ;;
    release)
      log "building the app (cargo build --release --locked --bin seckill)"
      (cd "$SECKILL_ROOT" && cargo build --release --locked --bin seckill >&2) ;;
    *) die "app_binary: debug or release, not '$profile'" ;;
  esac
  echo "$bin"
}

# start_app BIN PORT LOG [ENV=VALUE...]: starts the app as a local-environment instance
# on 127.0.0.1:PORT, with the caller's ENV on top (its DATABASE_URL, Redis key prefix,
# tokens, log level...), its output in LOG; then polls GET $READY_PATH [/health/ready]
# until it answers 200, for at most READY_DEADLINE [60] seconds. PORT 0 = a free port:
# as another process can take it between the probe and the bind, a start that dies early
# is retried on a new port (three tries). A fixed PORT something already answers on is
# refused. Sets APP_PID, APP_PORT and APP_URL. When the app does not become ready it
# stops it, shows the log's tail and dies, so nothing is left running.
start_app() {
  local bin=$1 want_port=$2 logfile=$3; shift 3
  local path=${READY_PATH:-/health/ready} deadline=${READY_DEADLINE:-60} attempt tries=1
  [ "$want_port" != 0 ] || tries=3
  if [ "$want_port" != 0 ] && port_in_use "$want_port"; then
    die "port $want_port is already in use"
  fi
  for ((attempt = 1; attempt <= tries; attempt++)); do
    APP_PORT=$want_port
    [ "$APP_PORT" != 0 ] || APP_PORT=$(free_port)
    APP_URL="http://127.0.0.1:$APP_PORT"
    : >"$logfile"
    env SECKILL_ENVIRONMENT=local SECKILL_HOST=127.0.0.1 SECKILL_PORT="$APP_PORT" \
      SECKILL_PROBE_PORT="${SECKILL_PROBE_PORT:-0}" "$@" \
      "$bin" >>"$logfile" 2>&1 &
    APP_PID=$!
    log "app pid $APP_PID on $APP_URL (attempt $attempt)"
    if wait_for "$APP_URL$path" "$deadline" "$APP_PID" curl -fsS -o /dev/null --max-time 2 "$APP_URL$path"; then
      log "app ready on $APP_URL"
      return 0
    fi
    tail -n 20 "$logfile" >&2
    if kill -0 "$APP_PID" 2>/dev/null; then
      stop_process "$APP_PID"
      APP_PID=""
      die "$APP_URL$path did not answer 200 within ${deadline}s (see $logfile)"
    fi
    wait "$APP_PID" 2>/dev/null || true
    APP_PID=""
    log "the app exited during start-up"
  done
  die "the app did not start (see $logfile)"
}

# ensure_venv VENV REQUIREMENTS: a private virtualenv at VENV with the packages of
# REQUIREMENTS, made again only when that file changed (its hash is kept in the venv);
# installs python3 and python3-venv when missing.
ensure_venv() {
  local venv=$1 requirements=$2 stamp="$1/.requirements" want
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  command -v python3 >/dev/null || apt_install python3
  rm -rf "$venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt_install python3-venv
    python3 -m venv "$venv"
  fi
  log "installing $(grep -cv '^#' "$requirements") packages into ${venv#"$SECKILL_ROOT"/}"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
  echo "$want" >"$stamp"
}
