# shellcheck shell=bash
# scripts/bench.sh: setup and teardown. bench_setup starts the private services, builds
# the release binaries (the app, loadgen, the ceiling; the edge's tools when wanted), writes the limiter configurations
# the scenarios start the app with, and arms `cleanup`, which stops whatever the bench
# started (loadgen, the ceiling, app instances, the durable Postgres, the Redis Cluster)
# and drops the scenarios' databases, on any exit.
# shellcheck disable=SC2034 # the paths and settings set here are read by the other parts

bench_setup() {
  eval "$(scripts/services.sh up)"
  # Every scenario gets a database of its own: rate-limit rules are seeded from the
  # settings only into an empty database (then Postgres is their truth), and benchmark
  # items never show up in the development database.
  DB_BASE_URL=${DATABASE_URL%/*}
  ADMIN_DB_URL="$DB_BASE_URL/postgres"
  BENCH_DBS=()
  # The Postgres server the next start_instances creates its database on (the durable
  # scenario points it at its own cluster, whose databases go with it).
  DB_BASE=$DB_BASE_URL
  if [ "${BENCH_BUILD:-1}" = 0 ]; then
    log "BENCH_BUILD=0: using the release binaries already built"
  else
    log "building release binaries"
    cargo build --release --locked --workspace --bins >&2
    # The edge's tools (loadtest/rls-bench): outside the workspace, with their own lockfile.
    # shellcheck disable=SC2086
    if want edge $EDGE_SCENARIOS; then
      limitador_source
      cargo build --release --locked --manifest-path loadtest/rls-bench/Cargo.toml --target-dir target/rls-bench >&2
    fi
  fi
  # BENCH_APP: another build of the app (e.g. `--no-default-features`, glibc malloc).
  APP=${BENCH_APP:-target/release/seckill}
  LOADGEN=target/release/loadgen
  CEILING=target/release/ceiling
  RLS_BIN=target/rls-bench/release
  RLS_LOAD=$RLS_BIN/rls-load
  CLK_TCK=$(getconf CLK_TCK)

  local mode
  for mode in off one three three_per_item; do write_config "$OUT/$mode.toml" "$mode"; done
  # Orders at 1000/s under an api limit of 2000/s; the step search with api out of the way.
  write_config "$OUT/orders_open.toml" real 2000
  write_config "$OUT/orders_max_open.toml" real 1000000000

  trap cleanup EXIT
  # A signal ends the script through `exit`, so the EXIT trap still stops everything.
  trap 'exit 130' INT
  trap 'exit 143' TERM

  pg_durability "$ADMIN_DB_URL" >"$OUT/pg.main.txt"
  # Keys an interrupted earlier run left behind.
  PREFIX='bench-*' forget_keys
}

# write_config FILE MODE [API_PER_SEC]: a limiter configuration for the seckill policy:
# "off", "one" (api only) or "three", thresholds far above the load, so they measure the
# cost of deciding, not of refusing; or "real": the default rules (user 3 per 60 s, ip 5
# per 60 s) with `api` at API_PER_SEC, for the open-model orders.
write_config() {
  local file=$1 mode=$2 api=${3:-1000000000} enabled=true scope=global
  [ "$mode" = off ] && enabled=false
  # three_per_item: "three" with the policy's keys in each item's slot (issue 15).
  [ "$mode" = three_per_item ] && mode=three && scope=per_item
  {
    echo '[limiter.policies.seckill]'
    echo "scope = \"$scope\""
    echo 'algorithm = "sliding_window"'
    echo 'fail_mode = "closed"'
    echo "enabled = $enabled"
    echo '[[limiter.policies.seckill.rules]]'
    echo 'name = "api"'
    echo 'key = { literal = "purchase" }'
    echo 'window_ms = 1000'
    echo "threshold = $api"
    echo 'message = "System busy, please try again later"'
    if [ "$mode" = real ]; then
      echo '[[limiter.policies.seckill.rules]]'
      echo 'name = "user"'
      echo 'key = "user"'
      echo 'window_ms = 60000'
      echo 'threshold = 3'
      echo 'message = "No duplicate submissions"'
      echo '[[limiter.policies.seckill.rules]]'
      echo 'name = "ip"'
      echo 'key = "ip"'
      echo 'window_ms = 60000'
      echo 'threshold = 5'
      echo 'message = "Too frequent, please slow down"'
    fi
    if [ "$mode" = three ]; then
      for rule in user ip; do
        echo '[[limiter.policies.seckill.rules]]'
        echo "name = \"$rule\""
        echo "key = \"$rule\""
        echo 'window_ms = 60000'
        echo 'threshold = 1000000000'
        echo "message = \"$rule limit\""
      done
    fi
    echo '[limiter.policies.limited]'
    echo 'algorithm = "sliding_window"'
    echo '[[limiter.policies.limited.rules]]'
    echo 'name = "client"'
    echo 'key = "client_id"'
    echo 'window_ms = 60000'
    echo 'threshold = 1000000000'
    echo 'message = "Rate limit exceeded, slow down"'
    # The default's per-address and per-network rules, out of the way like the client's:
    # the call decides the same three keys as the default policy.
    for rule in ip network; do
      echo '[[limiter.policies.limited.rules]]'
      echo "name = \"$rule\""
      echo "key = \"$rule\""
      echo 'window_ms = 60000'
      echo 'threshold = 1000000000'
      echo "message = \"$rule limit\""
    done
  } > "$file"
}

LOADGEN_PID=""
cleanup() {
  [ -z "$LOADGEN_PID" ] || stop_process "$LOADGEN_PID"
  stop_ceiling
  stop_edge_servers
  stop_nginx
  stop_instances
  stop_durable_pg
  stop_cluster
  local db
  for db in "${BENCH_DBS[@]}"; do
    drop_database "$db" "$ADMIN_DB_URL" || true
  done
}

# limitador_source: the source loadtest/rls-bench builds Limitador from (its Cargo.toml's
# [patch]): the crates.io crate, unpacked under target/rls-bench, with two cfg lines widened.
# limitador 0.13.0 and 0.14.0 do not compile with `redis_storage` alone (the issue's
# `default-features = false`): storage/keys.rs calls its `bin` module, compiled only with
# `disk_storage` (RocksDB, a C++ build of many minutes), and so is the counter method it
# calls. The change compiles those two with `redis_storage` too; nothing else differs.
limitador_source() {
  local version=0.14.0 dir=target/rls-bench fetch=target/rls-bench/fetch-limitador crate
  [ -e "$dir/limitador-$version/.bench-patched" ] && return 0
  mkdir -p "$fetch/src"
  : >"$fetch/src/lib.rs"
  printf '%s\n' '[package]' 'name = "fetch-limitador"' 'version = "0.0.0"' 'edition = "2021"' \
    '[dependencies]' "limitador = { version = \"=$version\", default-features = false }" '[workspace]' >"$fetch/Cargo.toml"
  cargo fetch --manifest-path "$fetch/Cargo.toml" >&2
  crate=$(find "${CARGO_HOME:-$HOME/.cargo}/registry/cache" -name "limitador-$version.crate" | head -n 1)
  [ -n "$crate" ] || die "limitador $version: not in cargo's cache after cargo fetch"
  rm -rf "$dir/limitador-$version"
  tar -xzf "$crate" -C "$dir"
  local src=$dir/limitador-$version/src
  sed -i '/^ *#\[cfg(feature = "disk_storage")\]$/{N;/\n *\(pub mod bin \|pub(crate) fn variables_for_key\)/s/(feature = "disk_storage")/(any(feature = "disk_storage", feature = "redis_storage"))/}' \
    "$src/storage/keys.rs" "$src/counter.rs"
  [ "$(grep -c 'feature = "redis_storage"))\]' "$src/storage/keys.rs" "$src/counter.rs" | grep -c ':1$')" = 2 ] \
    || die "limitador $version: its source is not what the patch expects"
  touch "$dir/limitador-$version/.bench-patched"
}
