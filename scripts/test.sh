#!/usr/bin/env bash
# `make test`: private Redis and Postgres up, then the whole suite against them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/services.sh up)"
# Tests wait on I/O far more than on CPU: more threads than the two cores finish sooner.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}

# `failpoints` compiles in the fault-injection points the crash tests use.
cargo test --locked --workspace --all-targets --no-fail-fast --features seckill/failpoints

# The deployment files, checked without a Docker engine: promtool, a real Prometheus
# scraping a real instance, docker-compose config, nginx -t.
scripts/check-deploy.sh

# The shopper page and the admin dashboard in headless Chromium (installs chromium and
# playwright-core when missing); screenshots land in test-artifacts/e2e/.
scripts/e2e.sh
