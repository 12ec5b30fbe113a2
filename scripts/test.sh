#!/usr/bin/env bash
# `make test`: private Redis and Postgres up, then the whole suite against them. Each step
# is timed, and a table of the times is printed at the end, also when a step fails
# (docs/testing.md, "Where the time goes").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

STEP_NAMES=()
STEP_SECONDS=()
STEP_RESULTS=()
RUN_START=$SECONDS
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/seckill-test.XXXXXX")

# step NAME CMD…: runs CMD, and notes how long it took and whether it passed.
step() {
  local name=$1 start=$SECONDS status=0; shift
  echo "==> $name" >&2
  "$@" || status=$?
  note "$name" $((SECONDS - start)) "$([ "$status" = 0 ] && echo ok || echo "FAILED ($status)")"
  return "$status"
}
note() { STEP_NAMES+=("$1"); STEP_SECONDS+=("$2"); STEP_RESULTS+=("$3"); }

# The time of each test binary a `cargo test` log ran, from libtest's own figure: the
# lines cargo prints before a binary ("Running tests/api/main.rs (…/api-…)") and after
# it ("test result: … finished in 12.34s").
binary_times() {
  awk '/^ *Running / { name = $2; sub(/^(src|tests)\//, "", name); sub(/(\/main)?\.rs$/, "", name) }
       /^ *Doc-tests / { name = "doc-tests " $2 }
       /^test result:/ && /finished in/ { t = $NF; sub(/s$/, "", t); if (t + 0 >= 1) printf "  %s %d\n", name, t }' "$1"
}

print_steps() {
  local i
  {
    printf '\n%-30s %8s  %s\n' step seconds result
    for i in "${!STEP_NAMES[@]}"; do
      printf '%-30s %8s  %s\n' "${STEP_NAMES[$i]}" "${STEP_SECONDS[$i]}" "${STEP_RESULTS[$i]}"
    done
    printf '%-30s %8s\n' total $((SECONDS - RUN_START))
  } >&2
  rm -rf "$LOGS"
}
trap print_steps EXIT

services_up() { eval "$(scripts/services.sh up)"; }
step services services_up
# tests/api/nginx_gate.rs runs a real nginx: installed here, before the suite, when
# missing (the test installs it too when run alone, and fails rather than skips).
step nginx scripts/install-nginx.sh
# Tests wait on I/O far more than on CPU: more threads than the two cores finish sooner.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}
# A clean clone gains nothing from incremental compilation's bookkeeping (docs/testing.md).
[ -d target/debug ] || export CARGO_INCREMENTAL=0

step fmt cargo fmt --all --check

# One compile of the whole workspace, dependencies once: clippy's driver is the compiler
# of the workspace's own crates (what `cargo clippy` does, but with code generated, so the
# tests below run what it linted; warnings are errors), and the query macros regenerate
# the sqlx offline data into a temporary folder, compared with the committed `.sqlx/`.
# `failpoints` compiles in the fault-injection points the crash tests use.
CLIPPY_DRIVER=$(command -v clippy-driver || echo "$(rustc --print sysroot)/bin/clippy-driver")
export RUSTC_WORKSPACE_WRAPPER=$CLIPPY_DRIVER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
step lint-and-build scripts/sqlx-prepare.sh --check -- \
  cargo test --locked --workspace --all-targets --features seckill/failpoints --no-run

suite() {
  cargo test --locked --workspace --all-targets --no-fail-fast --features seckill/failpoints \
    2>&1 | tee "$LOGS/suite"
}
step suite suite || suite_status=$?
while read -r name seconds; do note "  $name" "$seconds" ""; done < <(binary_times "$LOGS/suite")
[ "${suite_status:-0}" = 0 ] || exit "$suite_status"

# The tests whose code depends on the Redis topology (scripts, pipelines, reads across
# items and keys, the sold-out channel, the waiting room's scripts) again, on a Redis
# Cluster of 3 masters and 3 replicas (127.0.0.1:7001-7006, data in .local/redis-cluster).
# They are the tests in a module named `topology` (docs/testing.md, "The cluster pass"):
# libtest's filter picks them by that path, so a renamed test stays in. In a subshell, so
# the cluster setting does not reach the checks below.
cluster_pass() (
  eval "$(scripts/services.sh cluster-up)"
  cargo test --locked -p seckill --test api --no-fail-fast --features seckill/failpoints \
    -- topology:: 2>&1 | tee "$LOGS/cluster"
  # A filter that matches nothing passes; a cluster pass that ran no test fails here.
  grep -qE '^running [1-9][0-9]* tests?$' "$LOGS/cluster" ||
    { echo "cluster pass: no test in a \`topology\` module ran" >&2; exit 1; }
)
step cluster-pass cluster_pass

# The four checks of a live instance of their own, at once: each waits on a browser, a
# scraper or its own app much of the time, and none reads the others' data (own
# database, own key prefix, own ports). Each one's output is printed whole when all
# four are done, so it reads as if they had run one after another.
#   api-fuzz:       /api/openapi.json validated, then schemathesis against the app
#                   (private virtualenv in .local/venv-api);
#   deploy-checks:  the deployment files without a Docker engine: promtool, a real
#                   Prometheus scraping a real instance, docker-compose config, nginx -t;
#   grpc-clients:   Envoy's rate-limit gRPC API from Python grpcio (stubs generated from
#                   envoy-types' protos; private virtualenv in .local/venv-grpc);
#   browser-tests:  the shopper page and the admin dashboard in headless Chromium
#                   (installs chromium and playwright-core when missing); screenshots
#                   land in test-artifacts/e2e/.
# Packages they install meanwhile wait for each other (`apt_get` in scripts/lib.sh).
live_checks() {
  local name pids=() names=(api-fuzz deploy-checks grpc-clients browser-tests)
  local scripts=(scripts/api-fuzz.sh scripts/check-deploy.sh scripts/grpc-clients.sh scripts/e2e.sh)
  local i status=0
  for i in "${!names[@]}"; do
    ( start=$SECONDS; status=0; "${scripts[$i]}" >"$LOGS/${names[$i]}" 2>&1 || status=$?
      echo "$((SECONDS - start)) $status" >"$LOGS/${names[$i]}.result" ) &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  for i in "${!names[@]}"; do
    name=${names[$i]}
    echo "==> $name" >&2
    cat "$LOGS/$name" >&2
    read -r seconds result <"$LOGS/$name.result"
    note "  $name" "$seconds" "$([ "$result" = 0 ] && echo ok || echo "FAILED ($result)")"
    [ "$result" = 0 ] || status=$result
  done
  return "$status"
}
step live-checks live_checks
