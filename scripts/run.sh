#!/usr/bin/env bash
# `make run`: private Redis and Postgres up, release build, migrate (at start-up), serve.
# `make run-cluster` = `scripts/run.sh --cluster`: the same, with the app on the local
# Redis Cluster (scripts/services.sh cluster-up) through SECKILL_REDIS_CLUSTER_NODES;
# a SECKILL_REDIS_CLUSTER_NODES already set is taken as given (no local cluster then).
# `make run-sentinel` = `scripts/run.sh --sentinel`: the same, with the app finding its
# master through the local sentinels (scripts/services.sh sentinel-up) by
# SECKILL_REDIS_SENTINELS and SECKILL_REDIS_SENTINEL_MASTER; a SECKILL_REDIS_SENTINELS
# already set is taken as given (no local set then).
# Other arguments go to the app.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

topology=single
case "${1:-}" in
  --cluster) topology=cluster; shift ;;
  --sentinel) topology=sentinel; shift ;;
esac

eval "$(scripts/services.sh up)"
if [ "$topology" = sentinel ]; then
  if [ -n "${SECKILL_REDIS_SENTINELS:-}" ]; then
    echo "run: using SECKILL_REDIS_SENTINELS from the environment" >&2
  else
    eval "$(scripts/services.sh sentinel-up)"
  fi
  # REDIS_URL stays set: its address is unused, its password and database are the master's.
  echo "run: Redis master ${SECKILL_REDIS_SENTINEL_MASTER:-seckill} through the sentinels $SECKILL_REDIS_SENTINELS" >&2
fi
if [ "$topology" = cluster ]; then
  if [ -n "${SECKILL_REDIS_CLUSTER_NODES:-}" ]; then
    echo "run: using SECKILL_REDIS_CLUSTER_NODES from the environment" >&2
  else
    eval "$(scripts/services.sh cluster-up)"
  fi
  # REDIS_URL stays set: the app uses the cluster when SECKILL_REDIS_CLUSTER_NODES is.
  echo "run: Redis Cluster $SECKILL_REDIS_CLUSTER_NODES" >&2
fi
# Local conveniences, documented in the README; production sets its own.
export SECKILL_ADMIN_TOKEN=${SECKILL_ADMIN_TOKEN:-dev-admin-token}  # = LOCAL_ADMIN_TOKEN
# Something to sell on a fresh install (only when there is no item at all).
export SECKILL_SEED_DEMO_ITEM=${SECKILL_SEED_DEMO_ITEM:-true}
# Envoy's rate-limit gRPC service on 127.0.0.1:8181 (docs/edge.md; no authentication).
export SECKILL_RLS_PORT=${SECKILL_RLS_PORT:-8181}

# The commit `seckill_build_info` names (none outside a git checkout): the `commit`
# setting, read at start, so a new commit never makes cargo rebuild an unchanged tree.
SECKILL_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
export SECKILL_COMMIT
cargo build --release --locked --bin seckill
exec target/release/seckill "$@"
