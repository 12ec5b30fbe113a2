#!/usr/bin/env bash
# Checks the deployment files (deploy/, docker-compose.yml, Dockerfile) without a
# Docker engine, with the real tools where Debian has them:
#
#   - promtool: the Prometheus config, the alert rules and their unit tests;
#   - amtool: the Alertmanager configuration deploy/alertmanager/configure.sh generates,
#     without settings, with a webhook, with e-mail and with both (valid, routed as
#     documented), and that amtool fails on a broken one; the e-mail templates rendered;
#     every alert's runbook section in deploy/README.md;
#   - a real Prometheus, started here on loopback with the shipped config rendered for
#     this machine, scrapes a running seckill (target `up == 1`), and evaluates every
#     dashboard query (so a PromQL typo in the dashboard fails here, not in Grafana);
#   - a real Alertmanager, started as the compose service's entrypoint starts it, receives
#     that Prometheus's firing alert;
#   - the dashboard and Grafana provisioning files (JSON/YAML, datasource uid, metric
#     names, mount paths);
#   - docker-compose 1.29: `config -q`, also with `--profile cluster`, and that it refuses
#     to run without the secrets; the wiring of the default stack and of the cluster profile;
#   - nginx -t on the shipped nginx.conf (upstreams pointed at loopback), and on the
#     NGINX gate's deploy/nginx/gate.conf;
#   - every file the Dockerfile copies exists and is not excluded by .dockerignore.
#
# Usage: scripts/check-deploy.sh
#   SECKILL_BIN=path/to/seckill   binary to scrape (default target/debug/seckill, built
#                                 with `cargo build --bin seckill` only when missing)
#
# Installs missing Debian packages (prometheus, prometheus-alertmanager, docker-compose,
# nginx-light) as root or through sudo, without letting their services start. Everything
# it starts listens on 127.0.0.1 only and is stopped on exit. Prints one line per check
# and ends with `N passed, N failed`; exits non-zero when a check failed.
#
# This file is the driver: its settings, the clean-up and the list of checks. The checks
# live in scripts/check-deploy/, one file per group: packages.sh (and the apt guard),
# monitoring.sh (promtool, dashboard, Grafana), alerting.sh (amtool, the runbooks),
# live.sh (a running seckill scraped by a real Prometheus, alerting a real Alertmanager),
# compose.sh (docker-compose), nginx.sh, dockerfile.sh; runner.sh runs each check
# bounded and prints its line.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

CHECK_TIMEOUT=${CHECK_DEPLOY_CHECK_TIMEOUT:-240}   # seconds, per check
READY_DEADLINE=${CHECK_DEPLOY_READY_DEADLINE:-60}  # app /health/ready
SCRAPE_DEADLINE=${CHECK_DEPLOY_SCRAPE_DEADLINE:-60} # Prometheus target up

TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-check-deploy.XXXXXX")
PIDFILE="$TMP/pids"     # processes started by checks (checks run in subshells)
STATE="$TMP/state"      # values checks hand to later checks (ports, prefix)
touch "$PIDFILE" "$STATE"
POLICY_RC=/usr/sbin/policy-rc.d
# Debian's python3: PyYAML comes with docker-compose (a pyenv python on PATH may lack it).
PY=/usr/bin/python3

log() { echo "check-deploy: $*" >&2; }
die() { log "error: $*"; exit 2; }

cleanup() {
  set +e  # best effort: one failing step must not skip the rest
  local pid
  # Only the processes this script started, by id.
  while read -r pid; do
    [ -z "$pid" ] || stop_process "$pid"
  done <"$PIDFILE"
  restore_policy_rc
  drop_redis_keys
  drop_database "$(state_get DB_NAME)" "$(state_get DB_ADMIN_URL)"
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# as_root, wait_for, stop_process, free_port, make_database, drop_database, app_binary,
# start_app. In a check's subshell, `die` ends that check only, as failed.
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/check-deploy/runner.sh
. "$ROOT/scripts/check-deploy/runner.sh"
# shellcheck source=scripts/check-deploy/packages.sh
. "$ROOT/scripts/check-deploy/packages.sh"
# shellcheck source=scripts/check-deploy/monitoring.sh
. "$ROOT/scripts/check-deploy/monitoring.sh"
# shellcheck source=scripts/check-deploy/alerting.sh
. "$ROOT/scripts/check-deploy/alerting.sh"
# shellcheck source=scripts/check-deploy/live.sh
. "$ROOT/scripts/check-deploy/live.sh"
# shellcheck source=scripts/check-deploy/compose.sh
. "$ROOT/scripts/check-deploy/compose.sh"
# shellcheck source=scripts/check-deploy/nginx.sh
. "$ROOT/scripts/check-deploy/nginx.sh"
# shellcheck source=scripts/check-deploy/dockerfile.sh
. "$ROOT/scripts/check-deploy/dockerfile.sh"

run "packages installed"                   check_packages 900
run "promtool check config"                check_promtool_config
run "promtool check rules"                 check_promtool_rules
run "promtool test rules (alert tests)"    check_promtool_tests
run "dashboard JSON"                       check_dashboard
run "grafana provisioning"                 check_grafana_provisioning
run "amtool check-config (every variant)"  check_amtool_configs
run "amtool template render"               check_amtool_templates
run "alert runbooks"                       check_alert_runbooks
# Generous: builds target/debug/seckill when it is missing.
run "seckill instance ready"               check_app_ready 1500
run "alertmanager starts (compose's way)"  check_alertmanager_ready
run "prometheus scrapes seckill (up == 1)" check_prometheus_scrape
run "alerts reach the alertmanager"        check_alerts_reach_alertmanager
run "dashboard queries evaluate"           check_dashboard_queries
run "docker-compose config -q"             check_compose_config
run "docker-compose requires secrets"      check_compose_requires_secrets
run "docker-compose stack wiring"          check_compose_semantics
run "docker-compose config -q (cluster)"   check_compose_cluster_config
run "docker-compose cluster profile"       check_compose_cluster
run "nginx -t"                             check_nginx
run "nginx -t (real-IP block enabled)"     check_nginx_realip
run "nginx -t (gate.conf)"                 check_nginx_gate
run "Dockerfile build context"             check_dockerfile_context

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
