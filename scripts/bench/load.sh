# shellcheck shell=bash
# scripts/bench.sh: driving load and measuring it. measure makes one measured run of a
# load tool (its JSON report, the servers' CPU over the measured phase, an optional perf
# profile), run_loadgen one of loadgen; `loadgen` is its closed-model form at the app instances; `pairs` alternates
# an app scenario with its ceiling; create_item, bought_item and
# bought_item_real_limits prepare the item a scenario buys; scrape keeps an instance's
# metrics.
# shellcheck disable=SC2034 # LOADGEN_PID is read by cleanup (setup.sh)

# CPU time (user + system) the processes have used so far, in clock ticks: fields 14
# and 15 of /proc/<pid>/stat, counted after the parenthesised command name.
cpu_ticks() {
  local pid stat total=0
  for pid in "$@"; do
    stat=$(<"/proc/$pid/stat") || die "process $pid is gone"
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    total=$((total + ${12} + ${13}))
  done
  echo "$total"
}

# The machine's busy time so far (every process, loadgen and the stores included), in
# clock ticks: the first line of /proc/stat without idle and iowait.
machine_ticks() {
  local _cpu user nice system _idle _iowait irq softirq steal _rest
  read -r _cpu user nice system _idle _iowait irq softirq steal _rest </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

# run_loadgen NAME ARGS...: one measured loadgen run (targets and everything else in
# ARGS), measured as `measure` says.
run_loadgen() {
  local name=$1; shift
  measure "$name" "$LOADGEN" --quiet --no-store-checks --admin-token "$ADMIN" "$@"
}

# measure NAME TOOL ARGS...: one measured run of a load tool that takes `--json FILE` and
# `--started-file FILE` (loadgen, rls-load), its report in $OUT/NAME.json. The CPU ticks
# of the servers in CPU_PIDS over the measured phase (after the logins, the warm-up) go
# to $OUT/NAME.cpu, the whole machine's to $OUT/NAME.machine. A failed ledger check
# (exit 1) is reported and the bench goes on; a run that could not be made stops it.
measure() {
  local name=$1 rc=0 started="$OUT/$1.started" before after lg machine; shift
  log "$name"
  rm -f "$started"
  "$@" --json "$OUT/$name.json" --started-file "$started" >"$OUT/$name.txt" 2>&1 &
  lg=$!
  LOADGEN_PID=$lg
  while [ ! -e "$started" ] && kill -0 "$lg" 2>/dev/null; do sleep 0.01; done
  # shellcheck disable=SC2086
  before=$(cpu_ticks ${CPU_PIDS:-})
  machine=$(machine_ticks)
  # A scenario run in pairs (NAME.pair-K) is profiled in its first pair, as NAME.
  local perf="" profiled=${name%.pair-1}
  if [ -n "${CPU_PIDS:-}" ] && [[ " ${BENCH_PROFILE:-} " == *" $profiled "* ]]; then
    perf record -F 999 -g -p "${CPU_PIDS// /,}" -o "$OUT/$profiled.perf.data" >/dev/null 2>&1 &
    perf=$!
  fi
  wait "$lg" || rc=$?
  LOADGEN_PID=""
  # shellcheck disable=SC2086
  after=$(cpu_ticks ${CPU_PIDS:-})
  echo "$machine $(machine_ticks) $CLK_TCK" >"$OUT/$name.machine"
  if [ -n "$perf" ]; then kill -INT "$perf" 2>/dev/null || true; wait "$perf" 2>/dev/null || true; fi
  [ -z "${CPU_PIDS:-}" ] || echo "$before $after $CLK_TCK" >"$OUT/$name.cpu"
  rm -f "$started"
  case $rc in
    0) ;;
    1) log "$name: a ledger check failed (see $OUT/$name.txt)" ;;
    *) cat "$OUT/$name.txt" >&2; die "$name: $1 could not run" ;;
  esac
}

# loadgen NAME TARGET_COUNT ARGS...: a closed-model run at the app instances, limits
# unchecked, CPU of every instance.
loadgen() {
  local name=$1 count=$2; shift 2
  # shellcheck disable=SC2046
  CPU_PIDS="${PIDS[*]}" run_loadgen "$name" $(targets "$count") --concurrency "$CONCURRENCY" \
    --duration "$SECONDS_EACH" "${NO_LIMITS[@]}" "$@"
}

# Create an item on the first instance; print its id.
create_item() {
  curl -sf "$(app_url 0)/admin/api/items" -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' \
    -d "{\"name\":\"bench\",\"priceCents\":1,\"stock\":$1,\"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" \
    | sed -E 's/.*"id":([0-9]+).*/\1/'
}

# An item every benchmark user has bought once, with one unit left so it never sells
# out: later purchases are decided by the limiter and the reservation script (409
# ALREADY_PURCHASED), never by Postgres or the sold-out fast path.
bought_item() {
  local count=$1 item
  # shellcheck disable=SC2153 # USERS: the driver's knob
  item=$(create_item $((USERS + 1)))
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets "$count") --quiet --no-store-checks --admin-token "$ADMIN" --item "$item" \
    --users "$USERS" --ips "$USERS" --requests "$USERS" --concurrency "$CONCURRENCY" --duration 120 "${NO_LIMITS[@]}" >/dev/null 2>&1 || true
  echo "$item"
}

# bought_item_real_limits USERS NAME: the same under the real limits, one instance:
# every user buys once at 900 purchases/s (open model), under the api limit of 1000/s,
# so no purchase is refused; 20 000 users take about 22 s. Reports in $OUT/NAME.json;
# prints the item id.
bought_item_real_limits() {
  local users=$1 name=$2 item bought
  item=$(create_item $((users + 1)))
  # shellcheck disable=SC2046
  "$LOADGEN" $(targets 1) --quiet --no-store-checks --admin-token "$ADMIN" --item "$item" \
    --users "$users" --ips "$users" --requests "$users" --rate 900 --duration 300 --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  bought=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["by_status"].get("200", 0))' \
    "$OUT/$name.json" 2>/dev/null || echo 0)
  [ "$bought" -eq "$users" ] || log "warning: only $bought of $users users bought item $item beforehand"
  echo "$item"
}

# scrape PORT NAME: the instance's metrics, kept as $OUT/NAME.prom (empty when unreachable).
scrape() { curl -sf "http://127.0.0.1:$1/metrics" >"$OUT/$2.prom" || : >"$OUT/$2.prom"; }

# pairs APP CEILING: calls APP K then CEILING K for K = 1..PAIRS (app, ceiling, app,
# ceiling, ...). Each measures its run as NAME.pair-K; the report divides each pair's
# figures and shows the median with its range. Run back to back only once, an app figure
# and its ceiling's swing apart with whatever else the machine does in between; alternated,
# both sides see the same spells of disturbance.
pairs() {
  local k
  for ((k = 1; k <= PAIRS; k++)); do
    "$1" "$k"
    "$2" "$k"
  done
}
