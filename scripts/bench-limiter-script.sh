#!/usr/bin/env bash
# Raw cost of the limiter scripts inside Redis: redis-benchmark sends EVALSHA with random
# keys (so every call creates fresh sorted sets, the worst case) to the local Redis.
# Loopback only; bounded by -n. Usage: scripts/bench-limiter-script.sh [requests]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
eval "$(scripts/services.sh up)"
N=${1:-200000}
PORT=$(echo "$REDIS_URL" | sed -E 's#.*:([0-9]+).*#\1#')
SHA=$(redis-cli -p "$PORT" -x SCRIPT LOAD < lua/sliding_window.lua)
run() { redis-benchmark -p "$PORT" -n "$N" -c "$1" -r 100000000 --csv "${@:2}" | tail -n 1; }
echo "clients,test,rps,avg_ms,min_ms,p50_ms,p95_ms,p99_ms,max_ms"
for c in 1 50; do
  echo "$c,$(run "$c" -t ping | cut -d, -f1-8)"
  echo "$c,\"EVALSHA sliding_window 1 key\",$(run "$c" EVALSHA "$SHA" 1 'bench:{s}:user:__rand_int__' '' m__rand_int__ 60000 3 | cut -d, -f2-8)"
  echo "$c,\"EVALSHA sliding_window 3 keys\",$(run "$c" EVALSHA "$SHA" 3 'bench:{s}:api:__rand_int__' 'bench:{s}:user:__rand_int__' 'bench:{s}:ip:__rand_int__' '' m__rand_int__ 1000 1000 60000 3 60000 5 | cut -d, -f2-8)"
done
