# shellcheck shell=bash
# scripts/check-deploy.sh: docker-compose 1.29 on docker-compose.yml, with dummy secrets
# and an empty env file: `config -q` with and without the cluster profile, the refusal
# to render without each secret, and the wiring of the default stack and of the cluster
# profile, read from the configuration compose renders (compose_stack.py and
# compose_cluster.py, beside this file).

# Dummy secrets for the compose checks only; never exported to this shell.
COMPOSE_SECRETS=(POSTGRES_PASSWORD=check-deploy-dummy SECKILL_JWT_SECRET=check-deploy-dummy-secret-of-at-least-32-bytes
  SECKILL_QUEUE_SECRET=check-deploy-dummy-queue-key-of-at-least-32-bytes
  SECKILL_ADMIN_TOKEN=check-deploy-dummy-admin GRAFANA_ADMIN_PASSWORD=check-deploy-dummy)

# compose [--profile NAME] [VAR=VALUE...]: `docker-compose config -q` with only these
# variables (and the profile, when given).
compose() {
  local profile=()
  if [ "${1:-}" = --profile ]; then profile=(--profile "$2"); shift 2; fi
  # An empty env file, so a developer's own .env cannot change the result.
  : >"$TMP/empty.env"
  env -u POSTGRES_PASSWORD -u SECKILL_JWT_SECRET -u SECKILL_QUEUE_SECRET -u SECKILL_ADMIN_TOKEN -u GRAFANA_ADMIN_PASSWORD \
    "$@" docker-compose --env-file "$TMP/empty.env" -f docker-compose.yml --project-directory "$ROOT" \
    "${profile[@]}" config -q
}

check_compose_config() {
  compose "${COMPOSE_SECRETS[@]}"
  docker-compose --version
}

check_compose_cluster_config() {
  compose --profile cluster "${COMPOSE_SECRETS[@]}"
  echo "valid with --profile cluster"
}

# What the stack relies on, read from the configuration compose itself renders (anchors
# merged, variables filled in with their defaults).
check_compose_semantics() {
  compose "${COMPOSE_SECRETS[@]}" >/dev/null
  : >"$TMP/empty.env"
  env "${COMPOSE_SECRETS[@]}" docker-compose --env-file "$TMP/empty.env" -f docker-compose.yml \
    --project-directory "$ROOT" config >"$TMP/compose.rendered.yml"
  $PY scripts/check-deploy/compose_stack.py "$TMP/compose.rendered.yml"
}

# The cluster profile, read from the configuration compose renders with it (1.29 renders
# every service, each with its `profiles`).
check_compose_cluster() {
  compose --profile cluster "${COMPOSE_SECRETS[@]}" >/dev/null
  : >"$TMP/empty.env"
  env "${COMPOSE_SECRETS[@]}" docker-compose --env-file "$TMP/empty.env" -f docker-compose.yml \
    --project-directory "$ROOT" --profile cluster config >"$TMP/compose.cluster.yml"
  $PY scripts/check-deploy/compose_cluster.py "$TMP/compose.cluster.yml"
}

check_compose_requires_secrets() {
  local var others out
  for var in POSTGRES_PASSWORD SECKILL_JWT_SECRET SECKILL_QUEUE_SECRET SECKILL_ADMIN_TOKEN GRAFANA_ADMIN_PASSWORD; do
    others=()
    for kv in "${COMPOSE_SECRETS[@]}"; do [ "${kv%%=*}" = "$var" ] || others+=("$kv"); done
    if out=$(compose "${others[@]}" 2>&1); then echo "compose accepted a missing $var"; return 1; fi
    grep -q "$var" <<<"$out" || { echo "unexpected error without $var: $out"; return 1; }
  done
  echo "refuses to render without each of the 5 secrets"
}
