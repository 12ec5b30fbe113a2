#!/usr/bin/env bash
# `make run`: private Redis and Postgres up, release build, migrate (at start-up), serve.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/services.sh up)"
# Local conveniences, documented in the README; production sets its own.
export SECKILL_ADMIN_TOKEN=${SECKILL_ADMIN_TOKEN:-dev-admin-token}  # = LOCAL_ADMIN_TOKEN
# Something to sell on a fresh install (only when there is no item at all).
export SECKILL_SEED_DEMO_ITEM=${SECKILL_SEED_DEMO_ITEM:-true}

cargo build --release --locked --bin seckill
exec target/release/seckill "$@"
