# shellcheck shell=bash
# scripts/check-deploy.sh: the monitoring files, read without running them: promtool on
# the Prometheus config, the alert rules and their unit tests; the Grafana dashboard
# (uids, layout, the metrics it may query, the panels the README promises) and the
# Grafana provisioning (datasource, where the dashboards are mounted).

check_promtool_config() {
  # Also loads and checks alerts.yml through rule_files (a path relative to the config).
  promtool check config deploy/prometheus/prometheus.yml
}

check_promtool_rules() {
  promtool check rules deploy/prometheus/alerts.yml
}

check_promtool_tests() {
  # Unit tests of the alert expressions on synthetic series (deploy/prometheus/alerts.test.yml).
  cd deploy/prometheus && promtool test rules alerts.test.yml
}

# Metric names the app exports (deploy/README.md, "Metrics"); the dashboard may query
# only these (histograms through their _bucket series).
KNOWN_METRICS='seckill_http_requests_total seckill_http_request_duration_seconds_bucket
seckill_limiter_decisions_total seckill_limiter_duration_seconds_bucket
seckill_limiter_fail_open_total seckill_limiter_fail_closed_total seckill_limiter_near_limit_total
seckill_limiter_mode seckill_limiter_instances
seckill_shedding_limit seckill_shedding_in_flight seckill_shedding_shed_total
seckill_orders_breaker_state seckill_orders_breaker_transitions_total
seckill_limiter_shadow_refusals_total seckill_redis_errors_total
seckill_redis_calls_total seckill_sale_outcomes_total seckill_order_commit_duration_seconds_bucket
seckill_stock_remaining seckill_sold_out_items seckill_db_pool_connections
seckill_consistency_postgres_orders seckill_consistency_redis_success
seckill_reconciler_repairs_total seckill_queue_joins_total seckill_queue_admissions_total
seckill_queue_abandoned_total seckill_queue_waiting seckill_queue_passes_total'

check_dashboard() {
  local d=deploy/grafana/dashboards/seckill.json
  jq -e 'type == "object"' "$d" >/dev/null
  jq -e '.uid == "seckill" and (.schemaVersion >= 36) and (.panels | length >= 10)' "$d" >/dev/null
  # Every panel and every query names the provisioned datasource by uid.
  local bad
  bad=$(jq -r '.panels[] | select(.datasource.uid != "prometheus" or any(.targets[]; .datasource.uid != "prometheus")) | .title' "$d")
  [ -z "$bad" ] || { echo "datasource uid is not 'prometheus' in: $bad"; return 1; }
  bad=$(jq -r '.panels[] | select((.targets | length) == 0) | .title' "$d")
  [ -z "$bad" ] || { echo "panels without a query: $bad"; return 1; }
  # Grid positions must not overlap (Grafana would silently shuffle the panels).
  jq -e '[.panels[] | .gridPos] as $g | [range(0; $g|length) as $i | range($i+1; $g|length) as $j
      | select(($g[$i].x < $g[$j].x + $g[$j].w) and ($g[$j].x < $g[$i].x + $g[$i].w)
           and ($g[$i].y < $g[$j].y + $g[$j].h) and ($g[$j].y < $g[$i].y + $g[$i].h))] | length == 0' "$d" >/dev/null \
    || { echo "panels overlap"; return 1; }
  local m unknown=()
  for m in $(jq -r '.panels[].targets[].expr' "$d" | grep -o 'seckill_[a-z_]*' | sort -u); do
    grep -qw "$m" <<<"$KNOWN_METRICS" || unknown+=("$m")
  done
  [ ${#unknown[@]} -eq 0 ] || { echo "unknown metrics: ${unknown[*]}"; return 1; }
  # The panels the README promises are there.
  local title
  for title in 'Request rate by route' 'Limiter decisions per dimension' 'Request latency p50 / p99 by route' \
      'Orders per second' 'Stock remaining per item' 'Redis errors and limiter fail-open / fail-closed' \
      'DB pool connections' 'Consistency: Postgres orders vs Redis success counter' 'Sale outcomes' \
      'Reconciler repairs'; do
    jq -e --arg t "$title" 'any(.panels[]; .title == $t)' "$d" >/dev/null || { echo "missing panel: $title"; return 1; }
  done
  echo "$(jq '.panels | length' "$d") panels, $(jq '[.panels[].targets[]] | length' "$d") queries"
}

check_grafana_provisioning() {
  $PY - <<'EOF'
import yaml
ds = yaml.safe_load(open("deploy/grafana/provisioning/datasources/prometheus.yml"))
(p,) = [d for d in ds["datasources"] if d["type"] == "prometheus"]
assert p["uid"] == "prometheus", p
assert p["url"] == "http://prometheus:9090", p
prov = yaml.safe_load(open("deploy/grafana/provisioning/dashboards/seckill.yml"))
(f,) = prov["providers"]
assert f["type"] == "file", f
path = f["options"]["path"]
# The provider's folder must be where docker-compose.yml mounts the dashboards.
compose = yaml.safe_load(open("docker-compose.yml"))
mounts = compose["services"]["grafana"]["volumes"]
assert any(m.split(":")[0] == "./deploy/grafana/dashboards" and m.split(":")[1] == path for m in mounts), (path, mounts)
assert any(m.split(":")[1] == "/etc/grafana/provisioning" for m in mounts), mounts
home = compose["services"]["grafana"]["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
assert home is None or home.startswith(path + "/"), home
print("datasource uid prometheus ->", p["url"], "; dashboards from", path)
EOF
}
