# shellcheck shell=bash
# scripts/bench.sh, the edge (issue 40; docs/edge.md, "Measured"): Envoy's rate-limit
# gRPC API (`ShouldRateLimit`) with three descriptors, driven by `rls-load`
# (loadtest/rls-bench), against
#   - ours: an app instance's gRPC listener (SECKILL_RLS_PORT), the domain `bench`
#     (fixed_window) or `bench_sliding` (sliding_window), seeded from $OUT/rls;
#   - rls-ceiling: the same script call behind a minimal tonic front, nothing else;
#   - rls-limitador: Kuadrant's Limitador engine (the `limitador` crate) on its Redis
#     storage behind the same front, exact mode, or cached with BENCH_LIMITADOR_MODE.
# All on the same Redis, with the same three limits: `user` 1000, `ip` 10 000 and `route`
# 100 000 per minute, fixed windows. Admitted mix: each value one of BENCH_RLS_VALUES
# (10 000) per descriptor, so no limit is reached and a domain's distinct counters stay
# under SECKILL_RLS_MAX_KEYS (100 000; past it ours refuses); refused mix: one hot value
# (new each run) for all three, so after the first 1000 of a minute every decision is a
# refusal, and every OK answer is held against the limits (the ledger: over-admission).
#
# Scenarios (BENCH_ONLY names; `edge` names them all):
#   rls_fixed rls_ceiling rls_limitador     admitted, run in turn BENCH_EDGE_PAIRS times
#   rls_sliding rls_ceiling_sliding         admitted, sliding_window, in turn the same
#   rls_limitador_cached                    admitted, once
#   rls_refused rls_ceiling_refused         refused, denial cache off, in turn the same
#   rls_refused_cache                       refused, denial cache on, reported apart with
#                                           the share of refusals it answered
#   rls_limitador_refused rls_limitador_cached_refused   refused, once each
#   nginx_gate (with nginx_plain)           NGINX with the gate ÷ without, in turn the same
# The ratio to the HTTP path needs `limiter_only` (GET /api/limited) in the same run.

EDGE_PAIRS=${BENCH_EDGE_PAIRS:-5}
[[ "$EDGE_PAIRS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_EDGE_PAIRS must be a whole number from 1, not '$EDGE_PAIRS'"
# HTTP/2 connections rls-load opens (Envoy speaks to its rate-limit service over a few).
RLS_CONNECTIONS=${BENCH_RLS_CONNECTIONS:-4}
RLS_VALUES=${BENCH_RLS_VALUES:-10000}
RLS_LIMITS=1000,10000,100000
RLS_PORT=$((PORT_BASE + 4))
RLS_CEILING_PORT=$((PORT_BASE + 5))
RLS_CEILING_SLIDING_PORT=$((PORT_BASE + 6))
RLS_PEER_PORT=$((PORT_BASE + 7))
RLS_PEER_CACHED_PORT=$((PORT_BASE + 8))
EDGE_SCENARIOS="rls_fixed rls_ceiling rls_limitador rls_sliding rls_ceiling_sliding rls_limitador_cached
  rls_refused rls_ceiling_refused rls_refused_cache rls_limitador_refused rls_limitador_cached_refused"

# want_edge NAME...: want, with `edge` standing for every edge scenario.
want_edge() { want edge "$@"; }

# The domains of our instances, in envoyproxy/ratelimit's format (docs/edge.md).
write_rls_domains() {
  local dir=$1 domain algorithm
  mkdir -p "$dir"
  for domain in bench:fixed_window bench_sliding:sliding_window; do
    algorithm=${domain#*:}
    domain=${domain%%:*}
    {
      echo "domain: $domain"
      echo "algorithm: $algorithm"
      echo 'descriptors:'
      echo '  - key: user'
      echo '    rate_limit: { unit: minute, requests_per_unit: 1000 }'
      echo '  - key: ip'
      echo '    rate_limit: { unit: minute, requests_per_unit: 10000 }'
      echo '  - key: route'
      echo '    rate_limit: { unit: minute, requests_per_unit: 100000 }'
    } >"$dir/$domain.yaml"
  done
}

# start_rls_server BIN PORT LOG [ENV=VALUE...]: a bench gRPC server (no HTTP health), ready
# when its port accepts connections. Sets RLS_PID.
start_rls_server() {
  local bin=$1 port=$2 logfile=$3 end=$((SECONDS + READY_DEADLINE)); shift 3
  ensure_port_free "$port"
  env REDIS_URL="$REDIS_URL" SECKILL_RLS_PORT="$port" SECKILL_WORKERS=2 BENCH_RLS_LIMITS="$RLS_LIMITS" \
    BENCH_RLS_WINDOW_S=60 "$@" "$bin" >"$logfile" 2>&1 &
  RLS_PID=$!
  until port_in_use "$port"; do
    kill -0 "$RLS_PID" 2>/dev/null || { cat "$logfile" >&2; die "$bin exited during start-up"; }
    [ $SECONDS -lt $end ] || { stop_process "$RLS_PID"; die "$bin: port $port not open within ${READY_DEADLINE}s"; }
    sleep 0.05
  done
}

EDGE_PIDS=()
# start_edge_servers: the ceiling (fixed and sliding) and Limitador (exact and cached)
# on their ports, each on keys of its own.
start_edge_servers() {
  local stamp
  stamp=$(date +%s%N)
  start_rls_server "$RLS_BIN/rls-ceiling" "$RLS_CEILING_PORT" "$OUT/rls-ceiling.log" \
    SECKILL_REDIS_KEY_PREFIX="rls-ceiling-$stamp"
  RLS_CEILING_PID=$RLS_PID
  start_rls_server "$RLS_BIN/rls-ceiling" "$RLS_CEILING_SLIDING_PORT" "$OUT/rls-ceiling-sliding.log" \
    SECKILL_REDIS_KEY_PREFIX="rls-ceiling-$stamp" CEILING_RLS_ALGORITHM=sliding_window
  RLS_CEILING_SLIDING_PID=$RLS_PID
  start_rls_server "$RLS_BIN/rls-limitador" "$RLS_PEER_PORT" "$OUT/rls-limitador.log" BENCH_LIMITADOR_MODE=exact
  RLS_LIMITADOR_PID=$RLS_PID
  start_rls_server "$RLS_BIN/rls-limitador" "$RLS_PEER_CACHED_PORT" "$OUT/rls-limitador-cached.log" \
    BENCH_LIMITADOR_MODE=cached
  RLS_LIMITADOR_CACHED_PID=$RLS_PID
  EDGE_PIDS=("$RLS_CEILING_PID" "$RLS_CEILING_SLIDING_PID" "$RLS_LIMITADOR_PID" "$RLS_LIMITADOR_CACHED_PID")
}
stop_edge_servers() {
  [ ${#EDGE_PIDS[@]} -gt 0 ] || return 0
  stop_processes "${EDGE_PIDS[@]}"
  EDGE_PIDS=()
  local port
  port=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
  # Limitador's keys (`namespace:{bench},counter:...`) and the ceiling's.
  for pattern in 'namespace:{bench}*' 'rls-ceiling-*'; do
    redis-cli -p "$port" --scan --pattern "$pattern" | xargs -r -n 1000 redis-cli -p "$port" UNLINK >/dev/null
  done
}

# rls NAME PORT PID [ARGS...]: one measured rls-load run at 127.0.0.1:PORT, closed
# model, CPU of PID.
rls() {
  local name=$1 port=$2 pid=$3; shift 3
  CPU_PIDS=$pid measure "$name" "$RLS_LOAD" --target "http://127.0.0.1:$port" --connections "$RLS_CONNECTIONS" \
    --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH" --values "$RLS_VALUES" "$@"
}
# rls_refused_run NAME PORT PID WINDOWS [ARGS...]: the refused mix with a hot value of its
# own and the ledger, windows `aligned` (fixed_window) or `first-hit` (Limitador).
rls_refused_run() {
  local name=$1 port=$2 pid=$3 windows=$4; shift 4
  rls "$name" "$port" "$pid" --mix refused --hot "hot-$(date +%s%N)" --limits "$RLS_LIMITS" --window-s 60 \
    --windows "$windows" "$@"
}

scenarios_edge() {
  # shellcheck disable=SC2086
  want_edge $EDGE_SCENARIOS || return 0
  local k
  write_rls_domains "$OUT/rls"
  start_edge_servers
  # Admitted: ours (fixed_window), the ceiling, Limitador exact, in turn.
  if want_edge rls_fixed rls_sliding rls_refused_cache; then
    start_instances 1 /nonexistent.toml SECKILL_RLS_PORT="$RLS_PORT" SECKILL_RLS_CONFIG_DIR="$OUT/rls"
  fi
  for ((k = 1; k <= EDGE_PAIRS; k++)); do
    if want_edge rls_fixed; then rls "rls_fixed.pair-$k" "$RLS_PORT" "${PIDS[0]}"; fi
    if want_edge rls_ceiling; then rls "rls_ceiling.pair-$k" "$RLS_CEILING_PORT" "$RLS_CEILING_PID"; fi
    if want_edge rls_limitador; then rls "rls_limitador.pair-$k" "$RLS_PEER_PORT" "$RLS_LIMITADOR_PID"; fi
  done
  for ((k = 1; k <= EDGE_PAIRS; k++)); do
    if want_edge rls_sliding; then rls "rls_sliding.pair-$k" "$RLS_PORT" "${PIDS[0]}" --domain bench_sliding; fi
    if want_edge rls_ceiling_sliding; then
      rls "rls_ceiling_sliding.pair-$k" "$RLS_CEILING_SLIDING_PORT" "$RLS_CEILING_SLIDING_PID" --domain bench_sliding
    fi
  done
  if want_edge rls_limitador_cached; then
    rls rls_limitador_cached "$RLS_PEER_CACHED_PORT" "$RLS_LIMITADOR_CACHED_PID"
  fi
  # Refused, denial cache on: the refusals it answers without Redis, apart.
  if want_edge rls_refused_cache; then
    scrape "${PORTS[0]}" rls_refused_cache.before
    rls_refused_run rls_refused_cache "$RLS_PORT" "${PIDS[0]}" aligned
    scrape "${PORTS[0]}" rls_refused_cache.after
  fi
  stop_instances
  # Refused, denial cache off: ours and the ceiling, in turn; then Limitador's two modes.
  if want_edge rls_refused rls_ceiling_refused; then
    if want_edge rls_refused; then
      start_instances 1 /nonexistent.toml SECKILL_RLS_PORT="$RLS_PORT" SECKILL_RLS_CONFIG_DIR="$OUT/rls" \
        SECKILL_LIMITER__DENIAL_CACHE_SLOTS=0
    fi
    for ((k = 1; k <= EDGE_PAIRS; k++)); do
      if want_edge rls_refused; then rls_refused_run "rls_refused.pair-$k" "$RLS_PORT" "${PIDS[0]}" aligned; fi
      if want_edge rls_ceiling_refused; then
        rls_refused_run "rls_ceiling_refused.pair-$k" "$RLS_CEILING_PORT" "$RLS_CEILING_PID" aligned
      fi
    done
    stop_instances
  fi
  if want_edge rls_limitador_refused; then
    rls_refused_run rls_limitador_refused "$RLS_PEER_PORT" "$RLS_LIMITADOR_PID" first-hit
  fi
  if want_edge rls_limitador_cached_refused; then
    rls_refused_run rls_limitador_cached_refused "$RLS_PEER_CACHED_PORT" "$RLS_LIMITADOR_CACHED_PID" first-hit
  fi
  stop_edge_servers
}

# NGINX with the gate ÷ NGINX without it: the shipped deploy/nginx/gate.conf (two
# workers; `location /`, which fails open) in front of a constant upstream, deciding
# through one instance's gate listener; beside it, in the same nginx, a server that
# proxies to the same upstream without auth_request. The upstream is a third server of
# that nginx answering 200 with a constant body, so both sides pay it alike. The domain
# `nginx_gate` limits both of gate.conf's descriptors far out of the way: every request
# is an admission, one script call on two counters (one client address: loopback).
# Alternated EDGE_PAIRS times, loadgen's closed model (GET, no logins).
NGINX_GATED_PORT=$((PORT_BASE + 9))
NGINX_PLAIN_PORT=$((PORT_BASE + 10))
NGINX_UPSTREAM_PORT=$((PORT_BASE + 11))
GATE_PORT=$((PORT_BASE + 12))
GATE_SECRET=bench-gate-secret-0123456789
NGINX_PID=""

# write_nginx_conf DIR: DIR/nginx.conf (DIR absolute: nginx runs with it as its prefix).
write_nginx_conf() {
  local dir=$1 conf
  conf=$(sed -e 's/^worker_processes auto;/worker_processes 2;/' \
    -e "s#^pid /tmp/nginx-gate.pid;#pid $dir/nginx.pid;#" \
    -e "s#^error_log /dev/stderr warn;#error_log $dir/error.log warn;#" \
    -e "s#access_log /dev/stdout;#access_log off; client_body_temp_path $dir/body; proxy_temp_path $dir/proxy;#" \
    -e "s/listen 80;/listen 127.0.0.1:$NGINX_GATED_PORT;/" \
    -e "s/server upstream:8000;/server 127.0.0.1:$NGINX_UPSTREAM_PORT;/" \
    -e "s/server app1:8090 /server 127.0.0.1:$GATE_PORT /" \
    -e '/server app2:8090 /d' \
    -e "s/\${SECKILL_GATE_SECRET}/$GATE_SECRET/" deploy/nginx/gate.conf)
  grep -q "127.0.0.1:$GATE_PORT" <<<"$conf" && grep -q "$GATE_SECRET" <<<"$conf" \
    || die "deploy/nginx/gate.conf is not what the bench rewrites"
  # The two other servers, before the http block's closing brace.
  {
    sed '$d' <<<"$conf"
    echo "    server {"
    echo "        listen 127.0.0.1:$NGINX_PLAIN_PORT;"
    echo "        location / {"
    echo "            proxy_http_version 1.1;"
    echo "            proxy_set_header Connection \"\";"
    echo "            proxy_pass http://protected;"
    echo "        }"
    echo "    }"
    echo "    server {"
    echo "        listen 127.0.0.1:$NGINX_UPSTREAM_PORT;"
    echo "        location / { default_type application/json; return 200 '{\"ok\":true}'; }"
    echo "    }"
    echo "}"
  } >"$dir/nginx.conf"
}

stop_nginx() {
  [ -n "$NGINX_PID" ] || return 0
  stop_process "$NGINX_PID"
  NGINX_PID=""
}

scenario_nginx_gate() {
  want nginx_gate nginx_plain edge || return 0
  local k dir
  mkdir -p "$OUT/nginx"
  dir=$(cd "$OUT/nginx" && pwd)
  command -v nginx >/dev/null || apt_install nginx
  mkdir -p "$OUT/gate-domains"
  {
    echo 'domain: nginx_gate'
    echo 'descriptors:'
    echo '  - key: remote_address'
    echo '    rate_limit: { unit: second, requests_per_unit: 1000000000 }'
    echo '  - key: route'
    echo '    descriptors:'
    echo '      - key: api_key'
    echo '        rate_limit: { unit: second, requests_per_unit: 1000000000 }'
  } >"$OUT/gate-domains/nginx_gate.yaml"
  write_nginx_conf "$dir"
  ensure_port_free "$GATE_PORT"
  start_instances 1 /nonexistent.toml SECKILL_GATE_PORT="$GATE_PORT" SECKILL_GATE_SECRET="$GATE_SECRET" \
    SECKILL_RLS_CONFIG_DIR="$OUT/gate-domains"
  for port in "$NGINX_GATED_PORT" "$NGINX_PLAIN_PORT" "$NGINX_UPSTREAM_PORT"; do ensure_port_free "$port"; done
  nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -g 'daemon off;' >"$dir/nginx.out" 2>&1 &
  NGINX_PID=$!
  wait_for nginx "$READY_DEADLINE" "$NGINX_PID" curl -fsS -o /dev/null "http://127.0.0.1:$NGINX_GATED_PORT/" \
    || die "nginx did not answer through the gate (see $dir/error.log)"
  for ((k = 1; k <= EDGE_PAIRS; k++)); do
    CPU_PIDS=${PIDS[0]} run_loadgen "nginx_gate.pair-$k" --target "http://127.0.0.1:$NGINX_GATED_PORT" --probe /x \
      --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
    run_loadgen "nginx_plain.pair-$k" --target "http://127.0.0.1:$NGINX_PLAIN_PORT" --probe /x \
      --concurrency "$CONCURRENCY" --duration "$SECONDS_EACH"
  done
  stop_nginx
  stop_instances
}
