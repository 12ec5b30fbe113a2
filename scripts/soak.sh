#!/usr/bin/env bash
# `make soak`: load under faults (issues 16 and 27), a few minutes, not part of `make test`.
# docs/soak.md says what it does, what each fault is held to, and has a run's summary.
#
# This file is the set-up glue: the settings checked, the services' environment, the
# release build, a database of the soak's own on the private Postgres (scripts/lib.sh's
# make_database; dropped at the end, and never left closed to connections), then the
# slowloris. The soak itself is the typed program in scripts/soak/: its own redis-server,
# two release instances, loadgen's load and side load, the mixed traffic, the memory
# sampler, the fault schedule (which fault at which point of the load, how long, how
# recovery is detected: scripts/soak/schedule.py) and the judgement of every claim and
# check (scripts/soak/claims.py, summary.py), which writes $SOAK_OUT/summary.md and
# prints it. `python3 scripts/soak judge $SOAK_OUT` judges a soak's output again.
#
#   SOAK_SECONDS=210 SOAK_RATE=120 SOAK_USERS=24000 SOAK_IPS=1200 SOAK_STOCK=16000
#   SOAK_MIX_RATE=40 (0: no mixed traffic) SOAK_SIDE_RATE=12 (0: no side load)
#   SOAK_REDIS_OUTAGE_SECONDS=10 SOAK_REDIS_KILL_SECONDS=3 SOAK_PG_SLOW_SECONDS=20
#   SOAK_PG_SLOW_MS=200 SOAK_PG_OUTAGE_SECONDS=10 SOAK_RSS_GROWTH_MB=32
#   SOAK_SLOWLORIS=1 (0: no slowloris) SOAK_OUT=target/soak scripts/soak.sh
# Exits 0 when every check passed, 1 when one failed, 2 when the soak (or the slowloris)
# could not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "soak: $(date +%T) $*" >&2; }
die() { log "error: $*"; exit 2; }
# make_database, drop_database
. scripts/lib.sh

python3 scripts/soak check || exit 2
SOAK_OUT=${SOAK_OUT:-target/soak}
mkdir -p "$SOAK_OUT"
SOAK_OUT=$(cd "$SOAK_OUT" && pwd)
export SOAK_OUT

eval "$(scripts/services.sh up 2>/dev/null)"
log "building release binaries"
cargo build --release --locked --workspace --bins >&2

DB_NAME=""
drop() {
  # A fault may have been cut short by a failure: never leave the database closed.
  if [ -n "$DB_NAME" ]; then
    psql "$DB_ADMIN_URL" -qc "ALTER DATABASE $DB_NAME ALLOW_CONNECTIONS true" >/dev/null 2>&1 || true
    drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
  fi
  DB_NAME=""
}
trap drop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
make_database seckill_soak || die "no database"

rc=0
python3 scripts/soak run --app target/release/seckill --loadgen target/release/loadgen \
  --db-name "$DB_NAME" --db-url "$DB_URL" --db-admin-url "$DB_ADMIN_URL" || rc=$?
drop
[ "$rc" -le 1 ] || exit "$rc"
if [ "$rc" -eq 0 ]; then log "passed"; else log "FAILED (see $SOAK_OUT/loadgen.txt, $SOAK_OUT/summary.md)"; fi

# The slowloris, on two cores of its own: the soak's instances and Redis are stopped.
[ "${SOAK_SLOWLORIS:-1}" != 0 ] || exit "$rc"
SLOWLORIS_OUT="$SOAK_OUT/slowloris" scripts/slowloris.sh || { log "the slowloris could not run"; [ "$rc" -ne 0 ] || rc=2; }
exit "$rc"
