#!/usr/bin/env bash
# Regenerates `.sqlx/`, the offline cache of sqlx's compile-time checked queries, against
# a scratch database migrated from `migrations/`. Run it after changing any query or
# migration, and commit the result.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(scripts/services.sh up)"
scratch=seckill_sqlx_prepare
base=${DATABASE_URL%/*}
psql "$base/postgres" -qc "DROP DATABASE IF EXISTS $scratch" -c "CREATE DATABASE $scratch"
for migration in migrations/*.sql; do
  psql "$base/$scratch" -q -v ON_ERROR_STOP=1 -f "$migration"
done
rm -rf .sqlx && mkdir .sqlx
touch src/lib.rs
SQLX_OFFLINE=false SQLX_OFFLINE_DIR="$PWD/.sqlx" DATABASE_URL="$base/$scratch" cargo check --lib --quiet
psql "$base/postgres" -qc "DROP DATABASE $scratch"
echo "sqlx-prepare: $(ls .sqlx | wc -l) queries cached in .sqlx/"
