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
