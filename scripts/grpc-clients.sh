#!/usr/bin/env bash
# Envoy's rate-limit gRPC API against a client that is not our code: Python grpcio, with
# stubs generated from the .proto files the envoy-types crate ships (the ones the server
# is built from), in a private virtualenv (.local/venv-grpc, tests/grpc/requirements.txt,
# reinstalled only when that file changes). Exits 0 when every case passes.
#
#   scripts/grpc-clients.sh
#
# It starts the private Redis and Postgres, a throw-away database, and the app
# (SECKILL_BIN, else target/debug/seckill) with its gRPC listener on a free port, then
# runs tests/grpc/test_rls.py against both listeners; fails too if the app panicked.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

HERE="$ROOT/tests/grpc"
VENV="$ROOT/.local/venv-grpc"
OUT=${OUT:-test-artifacts/grpc-clients}
ADMIN_SECRET=grpc-clients-admin-token

log() { echo "grpc-clients.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }

# apt_install, make_database, drop_database, app_binary, start_app, stop_process, free_port, ensure_venv
. "$ROOT/scripts/lib.sh"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# The envoy-types crate's .proto files, from the version Cargo.lock pins (cargo has
# fetched it: the app was built with it).
proto_dir() {
  local version dir
  version=$(awk '/^name = "envoy-types"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
  [ -n "$version" ] || die "envoy-types is not in Cargo.lock"
  dir=$(cargo metadata --format-version 1 --locked 2>/dev/null |
    "$VENV/bin/python" -c 'import json, sys
want = sys.argv[1]
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "envoy-types" and p["version"] == want:
        print(p["manifest_path"].rsplit("/", 1)[0])' "$version")
  [ -d "$dir/proto" ] || die "no proto folder in envoy-types $version ($dir)"
  echo "$dir/proto"
}

APP_PID=""
DB_NAME=""
DB_ADMIN_URL=""
cleanup() {
  local rc=$?
  [ -z "$APP_PID" ] || stop_process "$APP_PID"
  drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_venv "$VENV" "$HERE/requirements.txt"
STUBS="$OUT/stubs"
rm -rf "$STUBS" && mkdir -p "$STUBS"
"$VENV/bin/python" "$HERE/gen_stubs.py" "$(proto_dir)" "$STUBS"

eval "$(scripts/services.sh up)"
make_database seckill_grpc_clients || die "could not create the run's database"
RLS_PORT=$(free_port)
start_app "$(app_binary debug)" 0 "$OUT/app.log" \
  SECKILL_ADMIN_TOKEN="$ADMIN_SECRET" SECKILL_REDIS_KEY_PREFIX="grpc-clients-$(date -u +%s)-$$" \
  SECKILL_RLS_PORT="$RLS_PORT" SECKILL_LOG_LEVEL=warn REDIS_URL="$REDIS_URL" DATABASE_URL="$DB_URL"

rc=0
SECKILL_URL="$APP_URL" SECKILL_RLS="127.0.0.1:$RLS_PORT" SECKILL_ADMIN_TOKEN="$ADMIN_SECRET" \
  PYTHONPATH="$STUBS" timeout --kill-after=10 120 "$VENV/bin/python" "$HERE/test_rls.py" || rc=$?
if grep -q 'panicked' "$OUT/app.log"; then
  log "the app panicked (see ${OUT#"$ROOT"/}/app.log)"
  rc=${rc/#0/1}
fi
if [ "$rc" -ne 0 ]; then echo "GRPC CLIENTS FAILED (exit $rc)"; exit 1; fi
echo "GRPC CLIENTS PASSED"
