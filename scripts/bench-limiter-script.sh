#!/usr/bin/env bash
# Redis cost of the limiter scripts, before and after a change, admitted and refused,
# with AOF off and on.
#
#   scripts/bench-limiter-script.sh [requests]        (default 100000 per measured run)
#
# Environment: BEFORE_REV (default af6b8d4: the scripts before the compact replies),
# AFTER_REV (default: lua/ as it is in the working tree), CLIENTS (50), ROUNDS (1; with
# more, each cell keeps the lowest CPU per call and the highest rate of its rounds),
# PORT_OFF / PORT_ON (6391 / 6392).
#
# It starts two private redis-server instances on 127.0.0.1 (data in a temporary
# folder, removed at exit): one with `--appendonly no`, one with `--appendonly yes
# --appendfsync everysec`, both `--save ""` and without automatic AOF rewrites (the AOF
# is rewritten while idle between runs, so no fork lands inside a measurement). The
# shared development Redis (6380) is not touched. Every run is `redis-benchmark -c 50
# -r 100000000 EVALSHA …` with `__rand_int__` keys and members, after FLUSHALL.
#
# Redis CPU per call = (used_cpu_user + used_cpu_sys from INFO cpu, after − before) / N:
# the whole server process (main thread, socket I/O, AOF writes and the fsync thread),
# not only the script. "exec µs" is INFO commandstats usec_per_call of EVALSHA, the time
# inside the command alone. The PING line under the table is the floor of a call at the
# same concurrency.
#
# Patterns (key order = rule order; the app's default limits unless said otherwise):
#   admitted 3 keys        the `seckill` policy shape: api (1000 ms window, limit 1e9 so it
#                          never refuses; token bucket: capacity 1e9, 1e9 per 1000 ms) on a
#                          random key, user (3 per 60 s) and ip (5 per 60 s) on random
#                          keys: every call creates three fresh keys.
#   admitted 3 keys, hot api   the same, but api is the app's single fixed key
#                          (`api:purchase`): its sorted set holds every call of the last
#                          second, so its size grows with the rate (far beyond the app's
#                          1000) — the worst case for the sliding window.
#   refused 3 keys         rule 1 on a fixed key that is full (3 per 60 s, filled by three
#                          admitted calls just before; token bucket: capacity 3, 3 per
#                          60 s, drained by three calls), rules 2 and 3 as user and ip
#                          above on random keys: every call refused by rule 1.
#   admitted 1 key         the `limited` policy shape (`GET /api/limited`): 100 per 60 s on
#                          a random key.
#   refused 1 key          one fixed full key, 3 per 60 s as above.
# Each run is checked from commandstats: exactly N EVALSHA calls, none failed, and the
# writes (ZADD / HSET) are N × keys when admitted and none when refused. A refused run
# must finish within the 20 s a drained 3-per-60-s bucket takes to refill one token.
#
# Loopback only; bounded by -n; stops by itself.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "bench-limiter-script: $*" >&2; }
die() { log "error: $*"; exit 1; }
# stop_process, wait_for
. scripts/lib.sh

N=${1:-${N:-100000}}
CLIENTS=${CLIENTS:-50}
ROUNDS=${ROUNDS:-1}
BEFORE_REV=${BEFORE_REV:-af6b8d4}
AFTER_REV=${AFTER_REV:-}
PORT_OFF=${PORT_OFF:-6391}
PORT_ON=${PORT_ON:-6392}
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 1000 ] || die "requests must be a number >= 1000, got '$N'"

for tool in redis-server redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null; then
    log "$tool missing: installing through scripts/services.sh up"
    scripts/services.sh up >/dev/null
    command -v "$tool" >/dev/null || die "$tool still missing"
  fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-limiter.XXXXXX")
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do stop_process "$pid"; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the scripts ---------------------------------------------------------------------
for alg in sliding_window token_bucket; do
  git show "$BEFORE_REV:lua/$alg.lua" >"$TMP/before-$alg.lua" ||
    die "cannot read lua/$alg.lua at $BEFORE_REV"
  if [ -n "$AFTER_REV" ]; then
    git show "$AFTER_REV:lua/$alg.lua" >"$TMP/after-$alg.lua"
  else
    cp "lua/$alg.lua" "$TMP/after-$alg.lua"
  fi
done
after_desc=${AFTER_REV:-"working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lua/sliding_window.lua lua/token_bucket.lua || echo ', lua/ modified'))"}

# ---- the servers ---------------------------------------------------------------------
rcli() { redis-cli -h 127.0.0.1 -p "$@"; }

start_redis() {
  local port=$1; shift
  if rcli "$port" PING >/dev/null 2>&1; then die "something already answers on port $port"; fi
  mkdir -p "$TMP/$port"
  redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes --dir "$TMP/$port" \
    --logfile "$TMP/$port/redis.log" --daemonize no --save "" \
    --auto-aof-rewrite-percentage 0 "$@" &
  PIDS+=($!)
  wait_for "redis-server on $port" 10 "${PIDS[-1]}" rcli "$port" PING ||
    die "redis-server on $port did not start: $(tail -n 5 "$TMP/$port/redis.log")"
}
start_redis "$PORT_OFF" --appendonly no
start_redis "$PORT_ON" --appendonly yes --appendfsync everysec
declare -A PORT=([off]=$PORT_OFF [on]=$PORT_ON)

# Since the shadow rules, ARGV[3] says how many rules are enforced (the contract in
# src/limiter/backend.rs); scripts from before take the rules' numbers right after the
# request id. enforced V ALG N → the arguments to put between the id and the rules.
declare -A COUNTS_RULES
for v in before after; do
  for alg in sliding_window token_bucket; do
    grep -q 'local m = tonumber(ARGV\[3\])' "$TMP/$v-$alg.lua" && COUNTS_RULES[$v.$alg]=1
  done
done
enforced() { if [ -n "${COUNTS_RULES[$1.$2]:-}" ]; then echo "$3"; fi; }

declare -A SHA
for aof in off on; do
  for v in before after; do
    for alg in sliding_window token_bucket; do
      SHA[$aof.$v.$alg]=$(rcli "${PORT[$aof]}" -x SCRIPT LOAD <"$TMP/$v-$alg.lua")
    done
  done
done

# Total CPU seconds of the server process so far.
cpu() { rcli "$1" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
# One field of a commandstats line, 0 when the command never ran: cstat PORT CMD FIELD
cstat() {
  rcli "$1" INFO commandstats | tr -d '\r' |
    awk -v c="cmdstat_$2:" -v f="$3" 'index($0, c) == 1 {
      n = split(substr($0, length(c) + 1), kv, ","); for (i = 1; i <= n; i++) {
        split(kv[i], p, "="); if (p[1] == f) { print p[2]; exit } } }
      END {}' | { read -r v || true; echo "${v:-0}"; }
}

# Empties the server and, with AOF on, shrinks the AOF while nothing else happens.
reset() {
  local port=$1
  rcli "$port" FLUSHALL >/dev/null
  if [ "$(rcli "$port" CONFIG GET appendonly | tail -n 1)" = yes ]; then
    rcli "$port" BGREWRITEAOF >/dev/null
    local end=$((SECONDS + 30))
    while rcli "$port" INFO persistence | tr -d '\r' |
      grep -Eq '^(aof_rewrite_in_progress|aof_rewrite_scheduled):1'; do
      [ $SECONDS -lt $end ] || die "AOF rewrite on $port did not finish within 30 s"
      sleep 0.1
    done
  fi
  rcli "$port" CONFIG RESETSTAT >/dev/null
}

# One measured redis-benchmark run: measure PORT ARGS… → "cpu_us_per_call rps exec_us"
measure() {
  local port=$1; shift
  local c0 c1 out rps ex
  rcli "$port" CONFIG RESETSTAT >/dev/null
  c0=$(cpu "$port")
  out=$(redis-benchmark -h 127.0.0.1 -p "$port" -n "$N" -c "$CLIENTS" -r 100000000 --csv "$@")
  c1=$(cpu "$port")
  rps=$(echo "$out" | tail -n 1 | cut -d, -f2 | tr -d '"')
  ex=$(cstat "$port" "${1,,}" usec_per_call)
  awk -v a="$c0" -v b="$c1" -v n="$N" -v r="$rps" -v e="$ex" \
    'BEGIN { printf "%.2f %.0f %.2f\n", (b - a) * 1e6 / n, r, e }'
}

# Asserts the first element of a script reply: expect_reply WANT PORT EVALSHA-ARGS…
expect_reply() {
  local want=$1 port=$2; shift 2
  local got
  got=$(rcli "$port" "$@" | head -n 1)
  [ "$got" = "$want" ] || die "expected reply [1] = $want from '$*' on $port, got '$got'"
}

# Rules per pattern and algorithm: the ARGV after now and member.
declare -A RULE=(
  [sliding_window.huge]="1000 1000000000"
  [sliding_window.user]="60000 3"
  [sliding_window.ip]="60000 5"
  [sliding_window.full]="60000 3"
  [sliding_window.client]="60000 100"
  [token_bucket.huge]="1000000000 1000000000 1000"
  [token_bucket.user]="3 3 60000"
  [token_bucket.ip]="5 5 60000"
  [token_bucket.full]="3 3 60000"
  [token_bucket.client]="100 100 60000"
)
PATTERNS=("admitted 3 keys" "admitted 3 keys, hot api" "refused 3 keys" "admitted 1 key" "refused 1 key")

# run_one AOF VERSION ALG PATTERN → "cpu_us rps exec_us"
run_one() {
  local aof=$1 v=$2 alg=$3 pattern=$4
  local port=${PORT[$aof]} sha=${SHA[$aof.$v.$alg]}
  local p="bench:{seckill}:$alg"
  local -a keys rules
  case $pattern in
    "admitted 3 keys") keys=("$p:api:__rand_int__" "$p:user:__rand_int__" "$p:ip:__rand_int__"); rules=(huge user ip) ;;
    "admitted 3 keys, hot api") keys=("$p:api:purchase" "$p:user:__rand_int__" "$p:ip:__rand_int__"); rules=(huge user ip) ;;
    "refused 3 keys") keys=("$p:user:full" "$p:user:__rand_int__" "$p:ip:__rand_int__"); rules=(full user ip) ;;
    "admitted 1 key") keys=("$p:client:id:__rand_int__"); rules=(client) ;;
    "refused 1 key") keys=("$p:client:id:full"); rules=(full) ;;
  esac
  local -a args=()
  local r
  for r in "${rules[@]}"; do
    # shellcheck disable=SC2206 # the rule's numbers, split on purpose
    args+=(${RULE[$alg.$r]})
  done
  reset "$port"
  local refused=0
  if [[ $pattern == refused* ]]; then
    refused=1
    local i
    # shellcheck disable=SC2086
    for i in 1 2 3; do expect_reply 1 "$port" EVALSHA "$sha" 1 "${keys[0]}" "" "fill$i" $(enforced "$v" "$alg" 1) ${RULE[$alg.full]}; done
    # shellcheck disable=SC2086
    expect_reply 0 "$port" EVALSHA "$sha" 1 "${keys[0]}" "" probe $(enforced "$v" "$alg" 1) ${RULE[$alg.full]}
  fi
  local t0=$SECONDS result
  # shellcheck disable=SC2046 # nothing, or the one count
  result=$(measure "$port" EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "" "m__rand_int__" $(enforced "$v" "$alg" "${#keys[@]}") "${args[@]}")
  # Every call answered, none failed, and the writes are what the pattern promises.
  local calls failed writes want
  calls=$(cstat "$port" evalsha calls)
  failed=$(( $(cstat "$port" evalsha failed_calls) + $(cstat "$port" evalsha rejected_calls) ))
  if [ "$alg" = sliding_window ]; then writes=$(cstat "$port" zadd calls); else writes=$(cstat "$port" hset calls); fi
  if [ $refused = 1 ]; then want=0; else want=$((N * ${#keys[@]})); fi
  [ "$calls" = "$N" ] && [ "$failed" = 0 ] ||
    die "$aof/$v/$alg/$pattern: $calls EVALSHA calls ($failed failed), expected $N"
  [ "$writes" = "$want" ] ||
    die "$aof/$v/$alg/$pattern: $writes key writes, expected $want: a call was admitted or refused unexpectedly (the run took $((SECONDS - t0)) s)"
  echo "$result"
}

# Keeps the best of rounds: lowest CPU per call, highest rate, lowest exec time.
best() {
  awk 'NR == 1 || $1 < c { c = $1 } NR == 1 || $2 > r { r = $2 } NR == 1 || $3 < e { e = $3 }
    END { printf "%s %s %s\n", c, r, e }'
}

log "before: lua/ at $BEFORE_REV; after: $after_desc"
log "$N calls per run, $CLIENTS clients, $ROUNDS round(s); redis $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/') on 127.0.0.1:$PORT_OFF (AOF off) and :$PORT_ON (AOF on, everysec)"

declare -A RES PING
for aof in off on; do
  reset "${PORT[$aof]}"
  PING[$aof]=$(measure "${PORT[$aof]}" PING)
  for pattern in "${PATTERNS[@]}"; do
    for alg in sliding_window token_bucket; do
      for v in before after; do
        rounds=""
        for ((k = 1; k <= ROUNDS; k++)); do
          rounds+="$(run_one "$aof" "$v" "$alg" "$pattern")"$'\n'
        done
        RES[$aof.$v.$alg.$pattern]=$(printf '%s' "$rounds" | best)
        log "AOF $aof, $pattern, $alg, $v: $(echo "${RES[$aof.$v.$alg.$pattern]}" | awk '{ printf "%s µs/call, %s calls/s, exec %s µs", $1, $2, $3 }')"
      done
    done
  done
done

echo
echo "Redis CPU per EVALSHA call, before = lua/ at $BEFORE_REV, after = $after_desc;"
echo "$N calls per run, $CLIENTS clients, best of $ROUNDS round(s)."
echo
echo "| pattern | algorithm | AOF | before µs/call | after µs/call | after/before | before calls/s | after calls/s | before exec µs | after exec µs |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
for pattern in "${PATTERNS[@]}"; do
  for alg in sliding_window token_bucket; do
    for aof in off on; do
      read -r bc br be <<<"${RES[$aof.before.$alg.$pattern]}"
      read -r ac ar ae <<<"${RES[$aof.after.$alg.$pattern]}"
      ratio=$(awk -v a="$ac" -v b="$bc" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
      echo "| $pattern | $alg | $aof | $bc | $ac | $ratio | $br | $ar | $be | $ae |"
    done
  done
done
echo
for aof in off on; do
  read -r pc pr _ <<<"${PING[$aof]}"
  echo "Floor, PING at the same concurrency, AOF $aof: $pc µs/call of Redis CPU, $pr calls/s."
done

# What the scripts answer: the same four calls to each, at fixed times 10 ms apart, with
# the seckill shape (api never refuses, user 3 per 60 s, ip 5 per 60 s) on one user and
# one ip: three admitted, the fourth refused by rule 2 (user).
echo
echo "Replies to four calls at now = 1000000, +10, +20, +30 ms (rules api, user, ip):"
echo
echo "| version | algorithm | call 1 | call 2 | call 3 | call 4 (refused by user) |"
echo "|---|---|---|---|---|---|"
port=${PORT[off]}
for alg in sliding_window token_bucket; do
  for v in before after; do
    reset "$port"
    p="sample:{seckill}:$alg"
    # shellcheck disable=SC2206
    args=(${RULE[$alg.huge]} ${RULE[$alg.user]} ${RULE[$alg.ip]})
    row="| $v | $alg |"
    for k in 0 1 2 3; do
      # shellcheck disable=SC2046 # nothing, or the one count
      reply=$(rcli "$port" EVALSHA "${SHA[off.$v.$alg]}" 3 "$p:api:purchase" "$p:user:42" \
        "$p:ip:127.0.0.1" $((1000000 + 10 * k)) "req$k" $(enforced "$v" "$alg" 3) "${args[@]}" | paste -sd, -)
      row+=" {$reply} |"
    done
    echo "$row"
  done
done
