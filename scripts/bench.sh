#!/usr/bin/env bash
# `make bench`: the performance tables of docs/performance.md, from one run on this machine.
#
# Builds release, starts the private services, then for each scenario starts fresh app
# instances (own Redis key prefix, own item, own database) on loopback, drives them with
# `loadgen` (closed model, fixed concurrency and duration, unless said otherwise) and
# keeps its JSON report. Beside the app runs `ceiling` (loadtest/ceiling), a minimal
# server doing only the app's unavoidable work per request, so each figure has its
# ceiling from the same run. The app runs at its default log level and format: the
# figures are what users get. Prints a table of scenarios and a table of ratios with
# their targets. Everything stops by itself; traffic only goes to 127.0.0.1.
#
# Orders, open model (issue 13): closed-loop figures measure queueing, so orders are also
# offered at a fixed rate, whatever the answers take, each request by a user and from an
# address never seen before (so user and ip limits never refuse: every request is a real
# order), on one item with stock to spare, `api` raised in the scenario's own config
# (real user 3/60 s and ip 5/60 s rules). A non-200 answer, a dropped send or a 200
# without its order in Postgres (counted before and after) fails the run.
#   orders_open_1000     1000/s for 10 s, api 2000/s: p50/p99/max, target p99 < 10 ms.
#   orders_max_open      the offered rate stepped up (3 s a step, new users each step)
#                        until a step's p99 reaches 10 ms or it has a non-200 answer or a
#                        dropped send; the last good step is the figure, compared with
#                        the limiter + reservation ceiling ("POST /seckill, 3 dimensions":
#                        users who already bought, 409 ALREADY_PURCHASED, closed model),
#                        target >= 0.40 of it.
#   orders_max_open_2x   the same over two instances.
#   orders_open_durable  orders_open_1000 against a second Postgres cluster the script
#                        starts itself with fsync=on and synchronous_commit=on (under
#                        $BENCH_OUT/pg-durable, stopped and removed at the end).
# Each orders run is preceded by an unmeasured second at its first rate (fresh users), so
# the app's lazily opened Postgres connections are not counted as latency.
#
# The limiting algorithms on one trace (`limiting`, limiting.sh): a generated trace of a
# million-odd requests over ten thousand-odd keys through each algorithm's script in the
# private Redis, on the trace's own clock, every decision held against the exact
# sliding-window log's; memory per key and Redis CPU per call. Redis only, a few minutes;
# its tables go between the markers of docs/limiting.md, not into the tables printed here.
#
#   BENCH_ONLY="seckill_three orders_max_open" (run only these scenarios; names as in the
#   table: constant limiter_only ceiling_limited seckill_off seckill_one seckill_three
#   seckill_three_2x refused refused_api sold_out stampede ledger_2x orders evalsha
#   orders_open_1000 orders_max_open orders_max_open_2x orders_open_durable
#   cluster_one_sale cluster_many_sales queue_fairness queue_fairness_direct queue_fifo
#   queue_poll_cost queue_inlet queue_inlet_cap queue_exactness limiting rls_fixed rls_ceiling
#   rls_limitador rls_sliding rls_ceiling_sliding rls_limitador_cached rls_refused
#   rls_ceiling_refused rls_refused_cache rls_limitador_refused rls_limitador_cached_refused
#   nginx_gate nginx_plain; `queue` names the seven queue_* ones, `edge` the rls_* and
#   nginx_* ones. With BENCH_ONLY=limiting BENCH_BUILD=0 the setup builds nothing
#   (the trace binary only when it is missing) and starts nothing already up)
#   BENCH_CLUSTER_PORT=7401 (the first of the 6 ports of cluster_one_sale's own cluster)
#   BENCH_OPEN_RATES="1000 1500 2000 3000 4000 5000 6000 8000 10000 12000" (integers/s)
#   BENCH_OPEN_STEP_SECONDS=3 BENCH_OPEN_MAX_IN_FLIGHT=1024 (sends beyond it are dropped)
#   BENCH_SECONDS=8 BENCH_CONCURRENCY=64 BENCH_USERS=2000 scripts/bench.sh
#   BENCH_REFUSED_USERS=10000 (users of the scenario refused mostly by api)
#   BENCH_STAMPEDE_USERS=20000 BENCH_STAMPEDE_RATE=15000 (the stampede's offered req/s)
#   BENCH_STAMPEDE_MAX_IN_FLIGHT=1024 BENCH_PORT_BASE=18081 (ports BASE..BASE+12: two
#   instances, the ceiling, the durable Postgres, the edge's five gRPC listeners, nginx's
#   three servers and the gate's listener)
#   BENCH_PROFILE="refused_api ceiling_refused" (perf record -g of those runs' servers,
#   into target/bench/NAME.perf.data; needs linux-perf)
#   BENCH_PAIRS=3 (how many times each app scenario that has a ceiling runs, alternating
#   with it: app, ceiling, app, ceiling, ...; its ratio is reported as the median of the
#   pairs with their range, its row in the table is the run with the median req/s)
#   BENCH_QUEUE_HUMANS=18000 BENCH_QUEUE_OPERATORS=10 BENCH_QUEUE_PER_OPERATOR=200 (the
#   waiting room's fairness crowd, scenarios-queue.sh) BENCH_QUEUE_MAX_ACTIVE=500 (its room's
#   maxActive)
#   BENCH_BUILD=0 (use the release binaries already built instead of building them)
#   BENCH_TRACE_SEED=20261203 (the seed of limiting's trace)
#   BENCH_EDGE_PAIRS=5 (how many times the edge's gRPC scenarios run in turn with their
#   ceiling and peer) BENCH_RLS_CONNECTIONS=4 (HTTP/2 connections of rls-load)
#   BENCH_RLS_VALUES=10000 (distinct values per descriptor of the admitted mix)
#
# The edge (issue 40, scenarios-edge.sh): Envoy's rate-limit gRPC API, three
# descriptors, admitted and refused, ours (ports BASE+4..) beside `rls-ceiling` and the
# peer on Limitador's engine (loadtest/rls-bench, outside the workspace, built here
# only); NGINX with the gate (deploy/nginx/gate.conf) ÷ NGINX without it; docs/edge.md,
# "Measured".
#
# This file is the driver: its knobs, then the jobs in order. The jobs live in
# scripts/bench/: setup.sh (services, build, limiter configs, clean-up), servers.sh (app
# instances and the ceiling), load.sh (loadgen runs, items, CPU, pairs), one file per
# group of scenarios (scenarios-limiter.sh, scenarios-stampede.sh, scenarios-orders.sh
# with orders-open.sh, scenarios-queue.sh, cluster.sh, durable.sh, limiting.sh), and
# report.py for the tables (results.py reads the runs, ratios.py the ratios,
# waiting_room.py the waiting room's figures).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "bench: $*" >&2; }
die() { log "error: $*"; exit 1; }
# start_app, wait_for, stop_process, port_in_use, make_database, drop_database, pg_bin,
# pg_user, as_pg
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

SECONDS_EACH=${BENCH_SECONDS:-8}
CONCURRENCY=${BENCH_CONCURRENCY:-64}
USERS=${BENCH_USERS:-2000}
# Refused mostly by `api`: enough users that none runs out of its own quota (2 left per
# minute after buying) while api admits 1000/s, for runs up to ~20 s. Each of the
# BENCH_PAIRS runs has users (and addresses) of its own: REFUSED_USERS × BENCH_PAIRS buy.
REFUSED_USERS=${BENCH_REFUSED_USERS:-10000}
STAMPEDE_USERS=${BENCH_STAMPEDE_USERS:-20000}
STAMPEDE_RATE=${BENCH_STAMPEDE_RATE:-15000}
# Open model: sends falling due while this many are in flight are dropped and counted.
STAMPEDE_MAX_IN_FLIGHT=${BENCH_STAMPEDE_MAX_IN_FLIGHT:-1024}
# Orders, open model (see above). The p99 bound is the issue's target, not a knob.
OPEN_RATES=${BENCH_OPEN_RATES:-1000 1500 2000 3000 4000 5000 6000 8000 10000 12000}
OPEN_STEP_SECONDS=${BENCH_OPEN_STEP_SECONDS:-3}
OPEN_MAX_IN_FLIGHT=${BENCH_OPEN_MAX_IN_FLIGHT:-1024}
OPEN_P99_MS=10
BENCH_ONLY=${BENCH_ONLY:-}
OUT=${BENCH_OUT:-target/bench}
# Two app instances and the ceiling on consecutive loopback ports.
PORT_BASE=${BENCH_PORT_BASE:-18081}
PORTS=("$PORT_BASE" $((PORT_BASE + 1)))
CEILING_PORT=$((PORT_BASE + 2))
DURABLE_PG_PORT=$((PORT_BASE + 3))
ADMIN=bench-admin-token
# Checks in the ledger are off for runs whose limits are raised out of the way.
NO_LIMITS=(--user-limit 1000000000 --ip-limit 1000000000 --api-limit 1000000000)
# App ÷ ceiling pairs, alternated (see above).
PAIRS=${BENCH_PAIRS:-3}
[[ "$PAIRS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PAIRS must be a whole number from 1, not '$PAIRS'"
TRACE_SEED=${BENCH_TRACE_SEED:-20261203}
[[ "$TRACE_SEED" =~ ^[0-9]+$ ]] || die "BENCH_TRACE_SEED must be a whole number, not '$TRACE_SEED'"
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.cpu "$OUT"/*.prom "$OUT"/*.started "$OUT"/*.steps "$OUT"/*.orders

# want NAME...: whether any of these scenarios is to run (all, unless BENCH_ONLY names some).
want() {
  [ -z "$BENCH_ONLY" ] && return 0
  local name
  for name in "$@"; do [[ " $BENCH_ONLY " == *" $name "* ]] && return 0; done
  return 1
}

# shellcheck source=scripts/bench/setup.sh
. scripts/bench/setup.sh
# shellcheck source=scripts/bench/servers.sh
. scripts/bench/servers.sh
# shellcheck source=scripts/bench/load.sh
. scripts/bench/load.sh
# shellcheck source=scripts/bench/orders-open.sh
. scripts/bench/orders-open.sh
# shellcheck source=scripts/bench/scenarios-limiter.sh
. scripts/bench/scenarios-limiter.sh
# shellcheck source=scripts/bench/scenarios-stampede.sh
. scripts/bench/scenarios-stampede.sh
# shellcheck source=scripts/bench/scenarios-orders.sh
. scripts/bench/scenarios-orders.sh
# shellcheck source=scripts/bench/scenarios-queue.sh
. scripts/bench/scenarios-queue.sh
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
# shellcheck source=scripts/bench/durable.sh
. scripts/bench/durable.sh
# shellcheck source=scripts/bench/limiting.sh
. scripts/bench/limiting.sh
# shellcheck source=scripts/bench/scenarios-edge.sh
. scripts/bench/scenarios-edge.sh

bench_setup
# 1-4: constant answers, the bare limiter, POST /seckill's limiting modes, refusals.
scenarios_limiter
# 5-6b: the sold-out fast path, the stampede, the ledger over two instances.
scenarios_stampede
# 7: orders per second, closed model; 8: raw EVALSHA; 9-10: orders, open model.
scenario_orders_closed
scenario_evalsha
scenarios_orders_open
# 14: the waiting room.
scenarios_queue
# 12-13: on a Redis Cluster of the bench's own.
scenarios_cluster
# 15: the limiting algorithms on one trace (Redis only; docs/limiting.md).
scenario_limiting
# 16: the edge's gRPC API beside its ceiling and Limitador; NGINX's gate (docs/edge.md).
scenarios_edge
scenario_nginx_gate
# 11: durability's cost (last: it starts a Postgres cluster of its own).
scenario_orders_durable

python3 -B scripts/bench/report.py "$OUT" "$CONCURRENCY" "$SECONDS_EACH" "$STAMPEDE_USERS" "$STAMPEDE_RATE" \
  "$STAMPEDE_MAX_IN_FLIGHT" "$OPEN_P99_MS" "$OPEN_STEP_SECONDS" "$OPEN_MAX_IN_FLIGHT" "$BENCH_ONLY"
