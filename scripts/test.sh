#!/usr/bin/env bash
# `make test`: private Redis and Postgres up, then the whole suite against them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

eval "$(scripts/services.sh up)"
# Tests wait on I/O far more than on CPU: more threads than the two cores finish sooner.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-6}

# Lints first, so a formatting slip or a stale query cache fails in seconds: rustfmt,
# clippy with warnings as errors, and the committed sqlx offline data regenerated into a
# temporary folder and compared.
cargo fmt --all --check
cargo clippy --locked --workspace --all-targets --features seckill/failpoints -- -D warnings
scripts/sqlx-prepare.sh --check

# `failpoints` compiles in the fault-injection points the crash tests use.
cargo test --locked --workspace --all-targets --no-fail-fast --features seckill/failpoints

# The HTTP suite again, on a Redis Cluster of 3 masters and 3 replicas (127.0.0.1:7001-7006,
# data in .local/redis-cluster): every script, pipeline, read across items and the
# sold-out subscription must work there too. In a subshell, so the cluster setting does
# not reach the checks below.
(
  eval "$(scripts/services.sh cluster-up)"
  cargo test --locked -p seckill --test api --no-fail-fast --features seckill/failpoints
)

# The API contract under attack: /api/openapi.json validated, then schemathesis against a
# live instance of its own (private virtualenv in .local/venv-api; about 40 s).
scripts/api-fuzz.sh

# The deployment files, checked without a Docker engine: promtool, a real Prometheus
# scraping a real instance, docker-compose config, nginx -t.
scripts/check-deploy.sh

# The shopper page and the admin dashboard in headless Chromium (installs chromium and
# playwright-core when missing); screenshots land in test-artifacts/e2e/.
scripts/e2e.sh
