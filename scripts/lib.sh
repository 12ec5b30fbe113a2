# Shell helpers shared by scripts/services.sh, scripts/e2e.sh and loadtest/jmeter/run.sh.
# Source it after defining `log` (progress to stderr) and `die` (log and exit).

# Runs a command as root: directly when we are root, through sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    die "need root (or sudo) to run: $*"; fi
}

# Installs Debian packages without recommends. Updates the lists first: on a fresh
# machine they may be empty or stale.
apt_install() {
  log "installing $* with apt-get"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

# Stops a process we started: SIGTERM first, so the app drains in-flight requests
# (shutdown_timeout_secs), SIGKILL only when that takes longer than 15 s.
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
