# shellcheck shell=bash
# scripts/check-deploy.sh: the live checks. A seckill instance of our own (own database,
# own Redis key prefix), the Alertmanager as the compose service starts it, a real
# Prometheus on loopback with the shipped config pointed at both (target up, alert rules
# loaded, a firing alert reaching the Alertmanager), every dashboard query evaluated by
# that Prometheus; and, for the exit trap, deleting the instance's Redis keys.

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

# The Alertmanager as the compose stack starts it: the `alertmanager` service's entrypoint
# and command, read from the configuration compose renders, run here with their paths
# moved to this machine (the mounted deploy/alertmanager, a data folder of its own,
# Debian's binary) and the listener on loopback. So configure.sh's output without
# settings, and the way the entrypoint hands it to Alertmanager, are what starts.
check_alertmanager_ready() {
  local dir=$TMP/alertmanager-live am_port
  mkdir -p "$dir/data"
  am_port=$(free_port)
  : >"$TMP/empty.env"
  env "${COMPOSE_SECRETS[@]}" docker-compose --env-file "$TMP/empty.env" -f docker-compose.yml \
    --project-directory "$ROOT" config >"$dir/compose.yml"
  AM_DIR="$dir/data" AM_PORT=$am_port AM_BIN=$(command -v prometheus-alertmanager) ROOT="$ROOT" \
    $PY - "$dir/compose.yml" >"$dir/argv" <<'EOF'
import os, re, sys, yaml
am = yaml.safe_load(open(sys.argv[1]))["services"]["alertmanager"]
entry, command = am["entrypoint"], am["command"]
assert entry[:2] == ["/bin/sh", "-ec"], entry
# compose's rendering writes a literal $ as $$; the container's shell sees one.
script = entry[2].replace("$$", "$")
assert "/bin/sh /etc/alertmanager/configure.sh >/alertmanager/alertmanager.yml" in script, script
root = os.environ["ROOT"]
assert any(v.startswith(root + "/deploy/alertmanager:/etc/alertmanager") for v in am["volumes"]), am["volumes"]
moves = [("/etc/alertmanager", root + "/deploy/alertmanager"),
         ("/bin/alertmanager", os.environ["AM_BIN"]), ("/alertmanager", os.environ["AM_DIR"])]
def here(text):
    # Whole paths only (/alertmanager, not the end of /etc/alertmanager or of
    # alertmanager.yml's folder's name), through placeholders so a moved path is not
    # moved again.
    for i, (a, _) in enumerate(moves):
        text = re.sub(r"(?<![\w./-])" + re.escape(a) + r"(?![\w.-])", f"\0{i}\0", text)
    for i, (_, b) in enumerate(moves):
        text = text.replace(f"\0{i}\0", b)
    return text
args = [here(a) for a in command]
assert "--web.listen-address=:9093" in args and "--cluster.listen-address=" in args, args
port = os.environ["AM_PORT"]
args = [f"--web.listen-address=127.0.0.1:{port}" if a == "--web.listen-address=:9093" else a for a in args]
for a in ["/bin/sh", "-ec", here(script), entry[3]] + args:
    sys.stdout.write(a + "\0")
EOF
  local argv=()
  mapfile -d '' argv <"$dir/argv"
  [ ${#argv[@]} -gt 4 ] || { echo "no command read from the compose service"; return 1; }
  env -u ALERTMANAGER_WEBHOOK_URL -u ALERTMANAGER_EMAIL_TO "${argv[@]}" >"$dir/alertmanager.log" 2>&1 &
  local am_pid=$!
  echo "$am_pid" >>"$PIDFILE"
  # shellcheck disable=SC2317 # called through wait_for
  ready() { curl -fsS --max-time 2 "http://127.0.0.1:$am_port/-/ready"; }
  wait_for "Alertmanager on 127.0.0.1:$am_port ready" "$READY_DEADLINE" "$am_pid" ready \
    || { tail -n 20 "$dir/alertmanager.log"; return 1; }
  # It generated the configuration it runs on, and listens on nothing else (the cluster
  # listener is off: its status says so).
  grep -q '^# Written by deploy/alertmanager/configure.sh' "$dir/data/alertmanager.yml"
  curl -fsS --max-time 2 "http://127.0.0.1:$am_port/api/v2/status" | jq -e '.cluster.status == "disabled"' >/dev/null \
    || { echo "the Alertmanager's cluster listener is on"; return 1; }
  state_set AM_PORT "$am_port"
  echo "Alertmanager (the compose entrypoint, no settings) ready on 127.0.0.1:$am_port, cluster off"
}

check_prometheus_scrape() {
  local app_port prom_port dir=$TMP/prometheus
  # Prometheus scrapes the probe listener (the shipped config names it, 8089).
  app_port=$(state_get PROBE_PORT)
  [ -n "$app_port" ] || { echo "no app running (an earlier check failed)"; return 1; }
  prom_port=$(free_port)
  mkdir -p "$dir/data"
  cp deploy/prometheus/alerts.yml "$dir/alerts.yml"
  # The shipped config, pointed at this machine: both app targets -> the running
  # instance, Prometheus's own target -> this Prometheus, and 1 s intervals so the
  # check is quick. Everything else (rule_files, job names, metrics_path) is kept.
  # The shipped alerting section, pointed at the Alertmanager started above (when it
  # did), and a rule that always fires, for check_alerts_reach_alertmanager.
  printf '%s\n' 'groups:' '  - name: check-deploy' '    rules:' '      - alert: CheckDeployWatchdog' \
    '        expr: vector(1)' '        labels: {severity: info}' >"$dir/watchdog.yml"
  APP="127.0.0.1:$app_port" PROM="127.0.0.1:$prom_port" AM="$(state_get AM_PORT)" \
    $PY - deploy/prometheus/prometheus.yml "$dir/prometheus.yml" <<'EOF'
import os, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
cfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
assert jobs["seckill"].get("metrics_path", "/metrics") == "/metrics"
targets = [t for sc in jobs["seckill"]["static_configs"] for t in sc["targets"]]
assert sorted(targets) == ["app1:8089", "app2:8089"], targets
jobs["seckill"]["static_configs"] = [{"targets": [os.environ["APP"]]}]
if "prometheus" in jobs:
    jobs["prometheus"]["static_configs"] = [{"targets": [os.environ["PROM"]]}]
assert cfg["rule_files"] == ["alerts.yml"], cfg["rule_files"]
ams = [t for a in cfg["alerting"]["alertmanagers"] for sc in a["static_configs"] for t in sc["targets"]]
assert ams == ["alertmanager:9093"], ams
if os.environ["AM"]:
    cfg["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": ["127.0.0.1:" + os.environ["AM"]]}]}]
    cfg["rule_files"].append("watchdog.yml")
else:
    del cfg["alerting"]
yaml.safe_dump(cfg, open(sys.argv[2], "w"), sort_keys=False)
EOF
  promtool check config "$dir/prometheus.yml" >/dev/null
  # A firing alert is resent every second, not every minute: the first send goes out
  # before Prometheus has discovered the Alertmanager (its discovery settles after ~5 s).
  prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$prom_port" --rules.alert.resend-delay=1s >"$dir/prometheus.log" 2>&1 &
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

# Prometheus, on the shipped alerting section, hands its firing alerts to the Alertmanager.
check_alerts_reach_alertmanager() {
  local am_port prom_port
  am_port=$(state_get AM_PORT)
  prom_port=$(state_get PROM_PORT)
  if [ -z "$am_port" ] || [ -z "$prom_port" ]; then
    echo "no Alertmanager or Prometheus running (an earlier check failed)"; return 1
  fi
  # shellcheck disable=SC2317 # called through wait_for
  arrived() {
    curl -fsS --max-time 2 "http://127.0.0.1:$am_port/api/v2/alerts" \
      | jq -e 'any(.[]; .labels.alertname == "CheckDeployWatchdog" and .status.state == "active")'
  }
  wait_for "CheckDeployWatchdog in the Alertmanager" "$SCRAPE_DEADLINE" "" arrived \
    || { curl -fsS --max-time 2 "http://127.0.0.1:$prom_port/api/v1/alertmanagers" || true; return 1; }
  echo "a firing rule of Prometheus is active in the Alertmanager on 127.0.0.1:$am_port"
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
