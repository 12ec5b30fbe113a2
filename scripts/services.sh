#!/usr/bin/env bash
# Private Redis and Postgres for development and tests, in three topologies. This is the
# one entry point; each topology is a file of scripts/services/, sourced here, whose
# header lists its subcommands and SECKILL_LOCAL_* settings:
#
#   scripts/services/single.sh    up | down | status | env: one Redis and one Postgres
#                                 (`up` is the default subcommand)
#   scripts/services/cluster.sh   cluster-up | cluster-down [--wipe] | cluster-status |
#                                 cluster-env: a Redis Cluster, 3 masters and 3 replicas
#   scripts/services/sentinel.sh  sentinel-up | sentinel-down [--wipe] | sentinel-status |
#                                 sentinel-env: a Redis Sentinel set, one master, one
#                                 replica, three sentinels
#
# What they share comes from scripts/lib.sh (installing, waiting, stopping, reading a
# Redis's INFO). The instances listen on loopback only (Redis 6380, Postgres 5433, the
# cluster 7001-7006 and the Sentinel set 6391-6395 by default) and keep their data under
# .local/ (git-ignored), so they never touch a system-wide server. Every `*-up` is
# harmless when run twice. Progress goes to stderr, the `export …` lines to stdout, so
# callers can `eval "$(scripts/services.sh up)"`. A failure exits non-zero (1 from the
# script's own checks) with its cause on stderr.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCAL="$ROOT/.local"

log() { echo "services: $*" >&2; }
die() { log "error: $*"; exit 1; }

. "$ROOT/scripts/lib.sh"
. "$ROOT/scripts/services/single.sh"
. "$ROOT/scripts/services/cluster.sh"
. "$ROOT/scripts/services/sentinel.sh"

case "${1:-up}" in
  up) redis_up; pg_up; print_env ;;
  down) down ;;
  status) status ;;
  env) print_env ;;
  cluster-up) cluster_up; cluster_env ;;
  cluster-down) cluster_down "${2:-}" ;;
  cluster-status) cluster_status ;;
  cluster-env) cluster_env ;;
  sentinel-up) sentinel_up; sentinel_env ;;
  sentinel-down) sentinel_down "${2:-}" ;;
  sentinel-status) sentinel_status ;;
  sentinel-env) sentinel_env ;;
  *) die "usage: $0 up|down|status|env|cluster-up|cluster-down [--wipe]|cluster-status|cluster-env|sentinel-up|sentinel-down [--wipe]|sentinel-status|sentinel-env" ;;
esac
