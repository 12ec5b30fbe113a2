#!/usr/bin/env bash
# `make slowloris` (and the end of `make soak`): a botnet's slowloris (issues 22 and 33)
# against one release instance, measured; docs/soak.md, "Slowloris", has the method and
# the figures.
#
# One instance with the default connection settings, its probe listener on a free port, a
# database and a Redis key prefix of its own. loadgen's `slowloris` first measures GET
# /health/live on both ports and purchases through 127.0.0.1 for BASELINE seconds without
# an attack, then holds SOCKETS sockets spread over ADDRESSES source addresses from
# 127.0.1.1 on, each trickling a request head a byte every 200 ms and reopened as it
# closes, for SECONDS, while it measures the same traffic again. The app's VmRSS and open
# sockets: before, every 2 s during the attack, and after the head timeout; then
# seckill_connections_cut_total from the probe listener.
#
#   SLOWLORIS_SECONDS=60 SLOWLORIS_SOCKETS=4400 SLOWLORIS_ADDRESSES=100 SLOWLORIS_OUT=target/slowloris
#   SLOWLORIS_BASELINE_SECONDS=20  the same traffic without the attack, first (0: none)
#   SLOWLORIS_REOPEN_DELAY_MS=0  wait before reopening a socket the server closed
#   SECKILL_BIN=path/to/seckill  another build, e.g. one without a probe listener
#   scripts/slowloris.sh [ENV=VALUE...]  app settings, e.g. SECKILL_MAX_CONNECTIONS=25000
# Exits 0 when the measurement was made, 2 when it could not be.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "slowloris: $(date +%T) $*" >&2; }
die() { log "error: $*"; exit 2; }
# wait_for, stop_process, free_port, start_app, make_database, drop_database
. scripts/lib.sh

DURATION=${SLOWLORIS_SECONDS:-60}
SOCKETS=${SLOWLORIS_SOCKETS:-4400}
ADDRESSES=${SLOWLORIS_ADDRESSES:-100}
BASELINE=${SLOWLORIS_BASELINE_SECONDS:-20}
REOPEN_DELAY_MS=${SLOWLORIS_REOPEN_DELAY_MS:-0}
OUT=${SLOWLORIS_OUT:-target/slowloris}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.log "$OUT"/started

# Every attacker socket is a descriptor of the tool's (and, accepted, of the app's).
want=$((SOCKETS + 1024))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$want" ]; then
  ulimit -S -n "$(ulimit -H -n)" || true
  [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$want" ] \
    || die "open files: limit $(ulimit -n) (hard $(ulimit -H -n)), the attack needs about $want"
fi

eval "$(scripts/services.sh up 2>/dev/null)"
# One workspace build, as soak.sh makes: the app built alone unifies the dependencies'
# features differently, which rebuilt a good part of the tree after `make soak` (2 min 17 s).
log "building release binaries (cargo build --release --locked --workspace --bins)"
cargo build --release --locked --workspace --bins >&2
APP=${SECKILL_BIN:-target/release/seckill}
[ -x "$APP" ] || die "SECKILL_BIN=$APP is not executable"
TOOL=target/release/slowloris

DB_NAME="" APP_PID="" TOOL_PID="" SAMPLER_PID=""
cleanup() {
  local pid
  for pid in "$SAMPLER_PID" "$TOOL_PID" "$APP_PID"; do [ -z "$pid" ] || stop_process "$pid"; done
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

make_database seckill_slowloris || die "no database"
ADMIN=slowloris-admin-token
SECKILL_PROBE_PORT=$(free_port)
start_app "$APP" 0 "$OUT/app.log" DATABASE_URL="$DB_URL" REDIS_URL="$REDIS_URL" \
  SECKILL_REDIS_KEY_PREFIX="slowloris-$(date +%s)-$$" SECKILL_ADMIN_TOKEN="$ADMIN" \
  SECKILL_CONFIG=/nonexistent.toml "$@"
PROBE_URL="http://127.0.0.1:$SECKILL_PROBE_PORT"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$APP_PID/status" 2>/dev/null || echo 0; }
sockets() { find "/proc/$APP_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }
echo "before $(rss_kb) $(sockets)" >"$OUT/app.txt"

log "${BASELINE}s without an attack, then $SOCKETS sockets from $ADDRESSES addresses (127.0.1.1 on) for ${DURATION}s on $APP_URL (probes on $PROBE_URL)"
"$TOOL" --target "$APP_URL" --probe-target "$PROBE_URL" --sockets "$SOCKETS" --duration "$DURATION" \
  --addresses "$ADDRESSES" --baseline "$BASELINE" --reopen-delay-ms "$REOPEN_DELAY_MS" \
  --admin-token "$ADMIN" --started-file "$OUT/started" --json "$OUT/slowloris.json" \
  >"$OUT/slowloris.txt" 2>"$OUT/slowloris.log" &
TOOL_PID=$!
wait_for "the attack's start" $((120 + ${BASELINE%.*})) "$TOOL_PID" test -e "$OUT/started" || true
(while :; do echo "during $(rss_kb) $(sockets)"; sleep 2; done) >>"$OUT/app.txt" &
SAMPLER_PID=$!
rc=0
wait "$TOOL_PID" || rc=$?
TOOL_PID=""
stop_process "$SAMPLER_PID"
SAMPLER_PID=""
[ "$rc" -eq 0 ] || { cat "$OUT/slowloris.log" >&2; die "the attack could not be made"; }
sleep 6 # past the 5 s head timeout: what the attack left behind
echo "after $(rss_kb) $(sockets)" >>"$OUT/app.txt"
curl -s --max-time 5 "$PROBE_URL/metrics" | grep '^seckill_connections_cut_total' >"$OUT/cuts.txt" || true

cat "$OUT/slowloris.txt"
awk '$1 == "before" { b = $2; bs = $3 } $1 == "after" { a = $2; as = $3 }
  $1 == "during" { if ($2 > p) p = $2; if ($3 > ps) ps = $3 }
  END { printf "app: VmRSS before %.1f MB, peak during %.1f MB, after %.1f MB; open sockets %d, peak %d, after %d\n",
        b / 1024, p / 1024, a / 1024, bs, ps, as }' "$OUT/app.txt" | tee "$OUT/summary.txt"
grep "^purchases' p99" "$OUT/slowloris.txt" >>"$OUT/summary.txt" || true
if [ -s "$OUT/cuts.txt" ]; then
  echo "cuts: $(sed -E 's/.*reason="([a-z_]+)"\} ([0-9.e+]+)/\1=\2/' "$OUT/cuts.txt" | tr '\n' ' ')"
else
  echo "cuts: none read (no probe listener, or no seckill_connections_cut_total: a build before the guard)"
fi | tee -a "$OUT/summary.txt"
