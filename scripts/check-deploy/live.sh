# shellcheck shell=bash
# scripts/check-deploy.sh: the live checks. A seckill instance of our own (own database,
# own Redis key prefix), a real Prometheus on loopback with the shipped config pointed at
# it (target up, alert rules loaded), every dashboard query evaluated by that
# Prometheus; and, for the exit trap, deleting the instance's Redis keys.

check_app_ready() {
  local bin prefix db_url
  bin=$(app_binary debug)
  eval "$(scripts/services.sh up)"
  prefix="check-deploy-$$-$RANDOM"
  state_set REDIS_PREFIX "$prefix"
  state_set REDIS_URL "$REDIS_URL"
  # A database of its own, dropped on exit: the instance runs its migrations and loads
  # items at start-up, and a binary older or newer than the tests' database must not
  # meet migrations it does not know. Without the right to create one, share the given.
  if make_database seckill_check_deploy; then
    state_set DB_NAME "$DB_NAME"
    state_set DB_ADMIN_URL "$DB_ADMIN_URL"
    # shellcheck disable=SC2153 # set by make_database (lib.sh)
    db_url=$DB_URL
  else
    echo "could not create a database; using DATABASE_URL as given"
    db_url=$DATABASE_URL
  fi
  # Its own Redis key prefix keeps it away from any other instance or test sharing the
  # same Redis.
  # The probe listener on a port of its own choosing, which Prometheus then scrapes.
  local probe_port
  probe_port=$(free_port)
  SECKILL_PROBE_PORT=$probe_port start_app "$bin" 0 "$TMP/app.log" SECKILL_REDIS_KEY_PREFIX="$prefix" \
    SECKILL_LOG_LEVEL=warn REDIS_URL="$REDIS_URL" DATABASE_URL="$db_url"
  echo "$APP_PID" >>"$PIDFILE"
  # shellcheck disable=SC2153 # set by start_app (lib.sh)
  state_set APP_PORT "$APP_PORT"
  state_set PROBE_PORT "$probe_port"
  # Read the whole answer first: `curl | grep -q` fails under pipefail when grep stops
  # reading early.
  local metrics
  metrics=$(curl -fsS --max-time 2 "http://127.0.0.1:$probe_port/metrics")
  grep -q '^seckill_' <<<"$metrics" || { echo "the probe listener's /metrics has no seckill_ series"; return 1; }
  echo "seckill ($bin) ready on $APP_URL, database ${db_url##*/}"
}

check_prometheus_scrape() {
  local app_port prom_port dir=$TMP/prometheus
  # Prometheus scrapes the probe listener (the shipped config names it, 8081).
  app_port=$(state_get PROBE_PORT)
  [ -n "$app_port" ] || { echo "no app running (an earlier check failed)"; return 1; }
  prom_port=$(free_port)
  mkdir -p "$dir/data"
  cp deploy/prometheus/alerts.yml "$dir/alerts.yml"
  # The shipped config, pointed at this machine: both app targets -> the running
  # instance, Prometheus's own target -> this Prometheus, and 1 s intervals so the
  # check is quick. Everything else (rule_files, job names, metrics_path) is kept.
  APP="127.0.0.1:$app_port" PROM="127.0.0.1:$prom_port" $PY - deploy/prometheus/prometheus.yml "$dir/prometheus.yml" <<'EOF'
import os, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
assert jobs["seckill"].get("metrics_path", "/metrics") == "/metrics"
targets = [t for sc in jobs["seckill"]["static_configs"] for t in sc["targets"]]
assert sorted(targets) == ["app1:8081", "app2:8081"], targets
jobs["seckill"]["static_configs"] = [{"targets": [os.environ["APP"]]}]
if "prometheus" in jobs:
    jobs["prometheus"]["static_configs"] = [{"targets": [os.environ["PROM"]]}]
assert cfg["rule_files"] == ["alerts.yml"], cfg["rule_files"]
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
EOF
  promtool check config "$dir/prometheus.yml" >/dev/null
  prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
  local prom_pid=$!
  echo "$prom_pid" >>"$PIDFILE"
  state_set PROM_PORT "$prom_port"
  local q="http://127.0.0.1:$prom_port/api/v1/query"
  # shellcheck disable=SC2317 # called through wait_for
  up() {
    curl -fsS --max-time 2 -G "$q" --data-urlencode 'query=up{job="seckill"}' \
      | jq -e '.status == "success" and (.data.result | length == 1) and .data.result[0].value[1] == "1"'
  }
  wait_for "Prometheus target 127.0.0.1:$app_port up == 1" "$SCRAPE_DEADLINE" "$prom_pid" up \
    || { tail -n 20 "$dir/prometheus.log"; curl -fsS --max-time 2 "http://127.0.0.1:$prom_port/api/v1/targets" || true; return 1; }
  # The alert rules were loaded from the relative path.
  local groups
  groups=$(curl -fsS --max-time 2 "http://127.0.0.1:$prom_port/api/v1/rules" | jq '[.data.groups[].rules[]] | length')
  [ "$groups" -gt 0 ] || { echo "no alert rules loaded"; return 1; }
  echo "Prometheus on 127.0.0.1:$prom_port: up{job=\"seckill\",instance=\"127.0.0.1:$app_port\"} == 1, $groups rules loaded"
}

check_dashboard_queries() {
  local prom_port expr n=0 body
  prom_port=$(state_get PROM_PORT)
  [ -n "$prom_port" ] || { echo "no Prometheus running (an earlier check failed)"; return 1; }
  # Grafana's template variable becomes a match-all regex, as Grafana sends it for "All".
  while IFS= read -r expr; do
    body=$(curl -sS --max-time 5 -G "http://127.0.0.1:$prom_port/api/v1/query" \
      --data-urlencode "query=${expr//\$instance/.*}")
    jq -e '.status == "success"' <<<"$body" >/dev/null \
      || { echo "query failed: $expr"; echo "$body"; return 1; }
    n=$((n + 1))
  done < <(jq -r '.panels[].targets[].expr' deploy/grafana/dashboards/seckill.json)
  echo "$n dashboard queries evaluated by Prometheus"
}

drop_redis_keys() {
  # The scraped instance's keys, by its unique prefix (best effort, bounded).
  local prefix url
  prefix=$(state_get REDIS_PREFIX 2>/dev/null || true)
  url=$(state_get REDIS_URL 2>/dev/null || true)
  [ -n "$prefix" ] && [ -n "$url" ] && command -v redis-cli >/dev/null || return 0
  timeout 10 redis-cli -u "$url" --scan --pattern "$prefix*" 2>/dev/null \
    | timeout 10 xargs -r -n 100 redis-cli -u "$url" DEL >/dev/null 2>&1 || true
}
