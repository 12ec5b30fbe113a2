# shellcheck shell=bash
# scripts/bench.sh, scenario 14: the waiting room (issue 24; method and figures in
# docs/waiting-room.md, "Numbers (make bench)"). Each scenario runs at fresh instances
# (the app's default limits) and is driven by target/release/queue
# (loadtest/queue-bench/src/), which creates its item and room and writes its figures
# and checks to $OUT/NAME.json:
#   queue_fairness         QUEUE_HUMANS humans and QUEUE_OPERATORS bot operators holding
#                          QUEUE_PER_OPERATOR accounts each (20 000, 10 % bots), 500
#                          units, through the room (random order, all in the pre-queue,
#                          admitPerSecond 50, maxActive QUEUE_MAX_ACTIVE);
#   queue_fairness_direct  the same crowd straight at POST /seckill, at a fresh instance;
#   queue_fifo             a fifo room, 3 000 joiners over 30 s after the start, 50/s in;
#   queue_poll_cost        polls ÷ the sold-out path, closed model, BENCH_CONCURRENCY in
#                          flight, BENCH_SECONDS each, BENCH_PAIRS pairs; Redis calls per poll;
#   queue_inlet            admitPerSecond 50 for 60 s, 4 000 waiting, maxActive out of the way;
#   queue_inlet_cap        maxActive 100, unused 10 s passes, 30 s;
#   queue_exactness        two instances, the first SIGKILLed 6 s into the sale.
# BENCH_ONLY=queue runs them all (about 9 minutes).
# shellcheck disable=SC2034 # LOADGEN_PID is read by cleanup (setup.sh)

QUEUE_HUMANS=${BENCH_QUEUE_HUMANS:-18000}
QUEUE_OPERATORS=${BENCH_QUEUE_OPERATORS:-10}
QUEUE_PER_OPERATOR=${BENCH_QUEUE_PER_OPERATOR:-200}
# The fairness room's maxActive (the example: 500).
QUEUE_MAX_ACTIVE=${BENCH_QUEUE_MAX_ACTIVE:-500}

# run_queue NAME ARGS...: one scenario, its output in $OUT/NAME.txt. With QUEUE_KILL_PID
# set, that process is SIGKILLed when the scenario writes $OUT/NAME.kill. A failed check
# is reported and the bench goes on; a run that could not be made stops it.
run_queue() {
  local name=$1 rc=0 kill_file="$OUT/$1.kill"; shift
  log "$name"
  rm -f "$kill_file"
  "$QUEUE" --admin-token "$ADMIN" --json "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>&1 &
  LOADGEN_PID=$!
  if [ -n "${QUEUE_KILL_PID:-}" ]; then
    while [ ! -e "$kill_file" ] && kill -0 "$LOADGEN_PID" 2>/dev/null; do sleep 0.05; done
    if [ -e "$kill_file" ]; then
      log "$name: SIGKILL pid $QUEUE_KILL_PID"
      kill -KILL "$QUEUE_KILL_PID" 2>/dev/null || true
      wait "$QUEUE_KILL_PID" 2>/dev/null || true
    fi
  fi
  wait "$LOADGEN_PID" || rc=$?
  LOADGEN_PID=""
  rm -f "$kill_file"
  case $rc in
    0) ;;
    1) log "$name: a check failed (see $OUT/$name.txt)" ;;
    *) cat "$OUT/$name.txt" >&2; die "$name: the scenario could not run" ;;
  esac
}

# The running instances' stores, for the scenarios' store checks.
queue_stores() { echo "--database-url $INSTANCE_DB_URL --redis-url $REDIS_URL --redis-prefix $PREFIX"; }

scenarios_queue() {
  QUEUE=target/release/queue
  local crowd=(--humans "$QUEUE_HUMANS" --operators "$QUEUE_OPERATORS" --per-operator "$QUEUE_PER_OPERATOR")
  if want queue queue_fairness; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_fairness $(targets 1) $(queue_stores) fairness "${crowd[@]}" --max-active "$QUEUE_MAX_ACTIVE"
    stop_instances
  fi
  if want queue queue_fairness_direct; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_fairness_direct $(targets 1) $(queue_stores) fairness --no-room "${crowd[@]}"
    stop_instances
  fi
  if want queue queue_fifo; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_fifo $(targets 1) fifo
    stop_instances
  fi
  if want queue queue_poll_cost; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_poll_cost $(targets 1) poll-cost --pairs "$PAIRS" --seconds "$SECONDS_EACH" \
      --concurrency "$CONCURRENCY" --server-pid "${PIDS[0]}" --clk-tck "$CLK_TCK"
    stop_instances
  fi
  if want queue queue_inlet; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_inlet $(targets 1) inlet
    stop_instances
  fi
  if want queue queue_inlet_cap; then
    start_instances 1
    # shellcheck disable=SC2046
    run_queue queue_inlet_cap $(targets 1) inlet --cap-only --shoppers 1500 --max-active 100 \
      --pass-ttl-secs 10 --measure 30
    stop_instances
  fi
  if want queue queue_exactness; then
    start_instances 2
    # shellcheck disable=SC2046
    QUEUE_KILL_PID=${PIDS[0]} run_queue queue_exactness $(targets 2) $(queue_stores) exactness \
      --kill-file "$OUT/queue_exactness.kill"
    stop_instances
  fi
}
