#!/usr/bin/env bash
# Regenerates `.sqlx/`, the offline cache of sqlx's compile-time checked queries, against
# a scratch database migrated from `migrations/`. Run it after changing any query or
# migration, and commit the result.
#
#   scripts/sqlx-prepare.sh                   rewrite .sqlx/
#   scripts/sqlx-prepare.sh --check           regenerate into a temporary folder and fail
#                                             when it differs from the committed .sqlx/
#   scripts/sqlx-prepare.sh --check -- CMD…   the same, with CMD as the compile that runs
#                                             the query macros (make test passes its one
#                                             build of everything, so the check costs no
#                                             compile of its own); `cargo check --lib`
#                                             when none is given
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=false
[ "${1:-}" = --check ] && { check=true; shift; }
[ "${1:-}" = -- ] && shift
[ $# -gt 0 ] || set -- cargo check --lib --quiet
eval "$(scripts/services.sh up)"
scratch=seckill_sqlx_prepare_$$
base=${DATABASE_URL%/*}
psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $scratch" -c "CREATE DATABASE $scratch"
trap 'psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $scratch" >/dev/null 2>&1 || true' EXIT
for migration in migrations/*.sql; do
  psql "$base/$scratch" -q -v ON_ERROR_STOP=1 -f "$migration"
done
if $check; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"; psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $scratch" >/dev/null 2>&1 || true' EXIT
else
  out="$PWD/.sqlx"
  rm -rf .sqlx && mkdir .sqlx
fi
# The macros write the cache only when they run: a library cargo thinks fresh would
# write nothing.
touch src/lib.rs
SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$out" DATABASE_URL="$base/$scratch" "$@"
if $check; then
  if ! diff -r .sqlx "$out" >/dev/null; then
    echo "sqlx-prepare: .sqlx/ is not current; run scripts/sqlx-prepare.sh and commit it" >&2
    diff -r .sqlx "$out" | head -20 >&2 || true
    exit 1
  fi
  echo "sqlx-prepare: .sqlx/ is current ($(ls "$out" | wc -l) queries)"
else
  echo "sqlx-prepare: $(ls .sqlx | wc -l) queries cached in .sqlx/"
fi
