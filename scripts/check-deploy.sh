#!/usr/bin/env bash
# Checks the deployment files (deploy/, docker-compose.yml, Dockerfile) without a
# Docker engine, with the real tools where Debian has them:
#
#   - promtool: the Prometheus config, the alert rules and their unit tests;
#   - a real Prometheus, started here on loopback with the shipped config rendered for
#     this machine, scrapes a running seckill (target `up == 1`), and evaluates every
#     dashboard query (so a PromQL typo in the dashboard fails here, not in Grafana);
#   - the dashboard and Grafana provisioning files (JSON/YAML, datasource uid, metric
#     names, mount paths);
#   - docker-compose 1.29: `config -q`, also with `--profile cluster`, and that it refuses
#     to run without the secrets; the wiring of the default stack and of the cluster profile;
#   - nginx -t on the shipped nginx.conf (upstreams pointed at loopback);
#   - every file the Dockerfile copies exists and is not excluded by .dockerignore.
#
# Usage: scripts/check-deploy.sh
#   SECKILL_BIN=path/to/seckill   binary to scrape (default target/debug/seckill, built
#                                 with `cargo build --bin seckill` only when missing)
#
# Installs missing Debian packages (prometheus, docker-compose, nginx-light) as root or
# through sudo, without letting their services start. Everything it starts listens on
# 127.0.0.1 only and is stopped on exit. Prints one line per check and ends with
# `N passed, N failed`; exits non-zero when a check failed.
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
. "$ROOT/scripts/lib.sh"

# --- service start-up guard for apt ---------------------------------------------------
# Debian's packages start their daemons on install (nginx on :80, prometheus on :9090).
# A policy-rc.d that exits 101 tells invoke-rc.d "not now". An existing one is put back
# exactly as it was. Which of the two it was is kept in a file: the install runs in a
# check's subshell, and the exit trap must be able to undo it even if that was killed.
POLICY_RC_STATE_FILE="$TMP/policy-rc.state"   # created | replaced (absent: untouched)
install_policy_rc() {
  if [ -e "$POLICY_RC" ]; then
    as_root cp -p "$POLICY_RC" "$TMP/policy-rc.d.orig"
    echo replaced >"$POLICY_RC_STATE_FILE"
  else
    echo created >"$POLICY_RC_STATE_FILE"
  fi
  printf '#!/bin/sh\n# temporary: scripts/check-deploy.sh installs packages\nexit 101\n' >"$TMP/policy-rc.d"
  as_root install -m 0755 "$TMP/policy-rc.d" "$POLICY_RC"
}
restore_policy_rc() {
  [ -f "$POLICY_RC_STATE_FILE" ] || return 0
  case "$(cat "$POLICY_RC_STATE_FILE")" in
    created) as_root rm -f "$POLICY_RC" || true ;;
    replaced) as_root cp -p "$TMP/policy-rc.d.orig" "$POLICY_RC" || true ;;
  esac
  rm -f "$POLICY_RC_STATE_FILE"
}

# --- helpers ---------------------------------------------------------------------------
state_set() { echo "$1=$2" >>"$STATE"; }
state_get() { sed -n "s/^$1=//p" "$STATE" | tail -n 1; }

# --- the checks ------------------------------------------------------------------------
# Each runs in a subshell with `set -e` (so any failing command fails the check), its
# output captured and shown only on failure, and a watchdog bounding its time.

check_packages() {
  local missing=()
  command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v nginx >/dev/null || missing+=(nginx-light)
  command -v jq >/dev/null || missing+=(jq)
  command -v curl >/dev/null || missing+=(curl)
  [ -x "$PY" ] || missing+=(python3)
  $PY -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
  if [ ${#missing[@]} -eq 0 ]; then echo "promtool, prometheus, docker-compose, nginx, jq, curl present"; return 0; fi
  echo "installing: ${missing[*]}"
  install_policy_rc
  local rc=0
  as_root timeout 300 env DEBIAN_FRONTEND=noninteractive apt-get update -qq || rc=$?
  if [ $rc -eq 0 ]; then
    as_root timeout 600 env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" || {
      # nginx-light is gone from newer Debian releases: fall back to nginx.
      local alt=("${missing[@]/nginx-light/nginx}")
      as_root timeout 600 env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${alt[@]}" || rc=$?
    }
  fi
  restore_policy_rc
  [ $rc -eq 0 ]
  command -v promtool && command -v prometheus && command -v docker-compose && command -v nginx
  echo "installed: ${missing[*]}"
}

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
seckill_limiter_fail_open_total seckill_limiter_fail_closed_total seckill_redis_errors_total
seckill_redis_calls_total seckill_sale_outcomes_total seckill_order_commit_duration_seconds_bucket
seckill_stock_remaining seckill_sold_out_items seckill_db_pool_connections
seckill_consistency_postgres_orders seckill_consistency_redis_success
seckill_reconciler_repairs_total'

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

# Dummy secrets for the compose checks only; never exported to this shell.
COMPOSE_SECRETS=(POSTGRES_PASSWORD=check-deploy-dummy SECKILL_JWT_SECRET=check-deploy-dummy-secret-of-at-least-32-bytes
  SECKILL_ADMIN_TOKEN=check-deploy-dummy-admin GRAFANA_ADMIN_PASSWORD=check-deploy-dummy)

# compose [--profile NAME] [VAR=VALUE...]: `docker-compose config -q` with only these
# variables (and the profile, when given).
compose() {
  local profile=()
  if [ "${1:-}" = --profile ]; then profile=(--profile "$2"); shift 2; fi
  # An empty env file, so a developer's own .env cannot change the result.
  : >"$TMP/empty.env"
  env -u POSTGRES_PASSWORD -u SECKILL_JWT_SECRET -u SECKILL_ADMIN_TOKEN -u GRAFANA_ADMIN_PASSWORD \
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
  $PY - "$TMP/compose.rendered.yml" <<'EOF'
import ipaddress, re, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c["services"]
assert set(s) >= {"redis", "postgres", "app1", "app2", "nginx", "prometheus", "grafana"}, sorted(s)

net = c["networks"]["seckill"]["ipam"]["config"][0]
subnet, dyn = ipaddress.ip_network(net["subnet"]), ipaddress.ip_network(net["ip_range"])
nginx_ip = ipaddress.ip_address(s["nginx"]["networks"]["seckill"]["ipv4_address"])
assert nginx_ip in subnet and nginx_ip not in dyn, (nginx_ip, subnet, dyn)

def env(name):
    e = s[name]["environment"]
    return e if isinstance(e, dict) else dict(kv.split("=", 1) for kv in e)

def published(name):
    # 1.29 renders ports as "127.0.0.1:8080:8080/tcp"-like strings or as mappings.
    out = []
    for p in s[name].get("ports", []):
        if isinstance(p, dict):
            out.append((p.get("host_ip"), str(p.get("published")), str(p.get("target"))))
        else:
            parts = str(p).split("/")[0].split(":")
            out.append((parts[0] if len(parts) == 3 else None, parts[-2], parts[-1]))
    return out

a1, a2 = env("app1"), env("app2")
for name, e in (("app1", a1), ("app2", a2)):
    assert e["SECKILL_HOST"] == "0.0.0.0", name
    assert e["SECKILL_PORT"] == "8080", name
    assert e["SECKILL_PROBE_PORT"] == "8081", name
    assert e["SECKILL_ENVIRONMENT"] == "production", name
    assert e["SECKILL_DEV_LOGIN"] == "false", name
    # The apps trust X-Forwarded-For from nginx's fixed address and nothing else.
    assert e["SECKILL_TRUSTED_PROXIES"] == str(nginx_ip), (name, e.get("SECKILL_TRUSTED_PROXIES"))
    assert len(e["SECKILL_JWT_SECRET"]) >= 32, name
    assert e["REDIS_URL"].startswith("redis://redis:"), name
    assert "@postgres:" in e["DATABASE_URL"], name
    for dep in ("redis", "postgres"):
        assert s[name]["depends_on"][dep]["condition"] == "service_healthy", (name, dep)
# Two instances of one service: same stores, same key prefix.
for k in ("REDIS_URL", "DATABASE_URL", "SECKILL_REDIS_KEY_PREFIX", "SECKILL_JWT_SECRET"):
    assert a1[k] == a2[k], k
assert ("127.0.0.1", "8080", "8080") in published("app1"), published("app1")
assert ("127.0.0.1", "8081", "8080") in published("app2"), published("app2")
# Nothing is published beyond loopback.
for name in s:
    for host_ip, pub, _ in published(name):
        assert host_ip == "127.0.0.1", (name, host_ip, pub)

cmd = s["redis"]["command"]
cmd = cmd if isinstance(cmd, list) else cmd.split()
assert cmd[cmd.index("--appendonly") + 1] == "yes", cmd
assert "redis-cli" in " ".join(s["redis"]["healthcheck"]["test"])
assert "pg_isready" in " ".join(s["postgres"]["healthcheck"]["test"])
for dep in ("app1", "app2"):
    assert s["nginx"]["depends_on"][dep]["condition"] == "service_healthy", dep

g = env("grafana")
assert g["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and g["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer", g

def mounts(name):
    out = {}
    for v in s[name]["volumes"]:
        if isinstance(v, dict):
            out[v["target"]] = v["source"]
        else:
            src, dst = v.split(":")[:2]
            out[dst] = src
    return out
assert mounts("prometheus")["/etc/prometheus"].endswith("/deploy/prometheus")
assert mounts("nginx")["/etc/nginx/nginx.conf"].endswith("/deploy/nginx/nginx.conf")

conf = open("deploy/nginx/nginx.conf").read()
for app in ("app1", "app2"):
    assert re.search(rf"^\s*server {app}:8080\b", conf, re.M), f"nginx upstream lacks {app}:8080"
print(f"apps trust only nginx ({nginx_ip}); all ports on 127.0.0.1; redis append-only")
EOF
}

# The cluster profile, read from the configuration compose renders with it (1.29 renders
# every service, each with its `profiles`).
check_compose_cluster() {
  compose --profile cluster "${COMPOSE_SECRETS[@]}" >/dev/null
  : >"$TMP/empty.env"
  env "${COMPOSE_SECRETS[@]}" docker-compose --env-file "$TMP/empty.env" -f docker-compose.yml \
    --project-directory "$ROOT" --profile cluster config >"$TMP/compose.cluster.yml"
  $PY - "$TMP/compose.cluster.yml" <<'EOF'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c["services"]
nodes = [f"redis-node-{n}" for n in range(1, 7)]
profiled = {name for name, svc in s.items() if "cluster" in svc.get("profiles", [])}
assert profiled == set(nodes) | {"redis-cluster-create", "postgres-cluster-db", "app-cluster"}, sorted(profiled)
assert all(svc.get("profiles", []) in ([], ["cluster"]) for svc in s.values())
# The default stack must not need the profile: no service outside it depends on one in it.
for name, svc in s.items():
    if name not in profiled:
        deps = set(svc.get("depends_on", []))
        assert not deps & profiled, (name, sorted(deps & profiled))

def env(name):
    e = s[name]["environment"]
    return e if isinstance(e, dict) else dict(kv.split("=", 1) for kv in e)

def arg(cmd, flag):
    return cmd[cmd.index(flag) + 1]

volumes = set()
for n in nodes:
    cmd = s[n]["command"]
    assert isinstance(cmd, list), (n, cmd)
    assert cmd[0] == "redis-server" and s[n]["image"].startswith("redis:7"), n
    assert arg(cmd, "--cluster-enabled") == "yes", n
    assert arg(cmd, "--appendonly") == "yes", n
    assert arg(cmd, "--maxmemory-policy") == "noeviction", n
    assert int(arg(cmd, "--cluster-node-timeout")) >= 5000, n
    # Redirects name the node by its service name, which the compose network resolves.
    assert arg(cmd, "--cluster-announce-hostname") == n, n
    assert arg(cmd, "--cluster-preferred-endpoint-type") == "hostname", n
    assert "PONG" in " ".join(s[n]["healthcheck"]["test"]), n
    data = [v for v in s[n]["volumes"] if (v["target"] if isinstance(v, dict) else v.split(":")[1]) == "/data"]
    assert len(data) == 1, (n, s[n]["volumes"])
    volumes.add(str(data[0]))
    assert not s[n].get("ports"), f"{n} is published"
assert len(volumes) == 6, "each node needs its own /data volume"

create = s["redis-cluster-create"]
script = " ".join(create["command"]) if isinstance(create["command"], list) else create["command"]
for part in ("--cluster create", "--cluster-replicas 1", "--cluster-yes", "cluster_state:ok"):
    assert part in script, part
assert str(create.get("restart", "no")) == "no", "the create service is one-shot"
for n in nodes:
    assert create["depends_on"][n]["condition"] == "service_healthy", n

app, a1 = env("app-cluster"), env("app1")
assert s["app-cluster"]["image"] == s["app1"]["image"] and s["app-cluster"]["build"] == s["app1"]["build"]
assert app["SECKILL_REDIS_CLUSTER_NODES"].split(",") == [f"redis://{n}:6379" for n in nodes], app["SECKILL_REDIS_CLUSTER_NODES"]
for k in ("SECKILL_ENVIRONMENT", "SECKILL_HOST", "SECKILL_PORT", "SECKILL_DEV_LOGIN", "SECKILL_JWT_SECRET",
          "SECKILL_ADMIN_TOKEN", "SECKILL_REDIS_KEY_PREFIX"):
    assert app[k] == a1[k], k
# Its stock is in the cluster, app1/app2's in `redis`: never the same orders table.
assert "@postgres:" in app["DATABASE_URL"] and app["DATABASE_URL"] != a1["DATABASE_URL"]
assert app["DATABASE_URL"].rsplit("/", 1)[1] in " ".join(s["postgres-cluster-db"]["command"])
for dep in ("redis-cluster-create", "postgres-cluster-db"):
    assert s["app-cluster"]["depends_on"][dep]["condition"] == "service_completed_successfully", dep
assert s["postgres-cluster-db"]["depends_on"]["postgres"]["condition"] == "service_healthy"
for p in s["app-cluster"].get("ports", []):
    assert (p.get("host_ip") if isinstance(p, dict) else str(p).split(":")[0]) == "127.0.0.1", p
print("profile cluster: 6 nodes (cluster mode, append-only, hostname endpoints), redis-cluster-create, "
      "app-cluster on its own database")
EOF
}

check_compose_requires_secrets() {
  local var others out
  for var in POSTGRES_PASSWORD SECKILL_JWT_SECRET SECKILL_ADMIN_TOKEN GRAFANA_ADMIN_PASSWORD; do
    others=()
    for kv in "${COMPOSE_SECRETS[@]}"; do [ "${kv%%=*}" = "$var" ] || others+=("$kv"); done
    if out=$(compose "${others[@]}" 2>&1); then echo "compose accepted a missing $var"; return 1; fi
    grep -q "$var" <<<"$out" || { echo "unexpected error without $var: $out"; return 1; }
  done
  echo "refuses to render without each of the 4 secrets"
}

# nginx -t on a copy of the shipped config, made runnable here: upstream hosts ->
# loopback, listen -> a free loopback port, pid/log/temp paths -> the temp folder.
render_nginx() {
  local out=$1 enable_realip=$2 dir port
  dir=$(dirname "$out")
  mkdir -p "$dir/logs"
  port=$(free_port)
  sed -e 's/server app1:8080/server 127.0.0.1:8080/' \
      -e 's/server app2:8080/server 127.0.0.1:8081/' \
      -e "s#^\( *\)listen 80;#\1listen 127.0.0.1:$port;#" \
      -e "s#^pid .*;#pid $dir/nginx.pid;#" \
      -e "s#^error_log .*;#error_log $dir/logs/error.log warn;#" \
      -e "s#^\( *\)access_log .*;#\1access_log $dir/logs/access.log;\n\1client_body_temp_path $dir/body;\n\1proxy_temp_path $dir/proxy;#" \
      deploy/nginx/nginx.conf >"$out"
  if [ "$enable_realip" = yes ]; then
    sed -i -e 's/^\( *\)# \(set_real_ip_from .*;\).*/\1\2/' \
           -e 's/^\( *\)# \(real_ip_header .*;\)/\1\2/' \
           -e 's/^\( *\)# \(real_ip_recursive .*;\)/\1\2/' "$out"
    grep -q '^ *set_real_ip_from' "$out" || { echo "no set_real_ip_from block to enable"; return 1; }
  fi
  # The rendering must have hit every line it rewrites (else the shipped file changed
  # shape and this check would test something else).
  if grep -nE 'server app[12]:|listen 80;|^pid /tmp/nginx\.pid;|/dev/std(out|err)' "$out"; then
    echo "rendering missed the line(s) above"; return 1
  fi
}

check_nginx() {
  local dir=$TMP/nginx
  render_nginx "$dir/nginx.conf" no
  nginx -t -q -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" 2>&1 || { cat "$dir/logs/error.log" 2>/dev/null; return 1; }
  grep -q 'proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;' "$dir/nginx.conf"
  grep -q 'proxy_set_header X-Real-IP \$remote_addr;' "$dir/nginx.conf"
  nginx -v 2>&1
}

check_nginx_realip() {
  local dir=$TMP/nginx-realip
  local build_info
  build_info=$(nginx -V 2>&1)
  if ! grep -q 'http_realip_module' <<<"$build_info"; then
    echo "this nginx lacks the realip module"; return 1
  fi
  render_nginx "$dir/nginx.conf" yes
  nginx -t -q -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" 2>&1
  echo "the commented set_real_ip_from block is valid when uncommented"
}

check_dockerfile_context() {
  # Sources of every COPY that reads the build context (not --from=another stage).
  local src missing=() ignored=()
  for src in $(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' Dockerfile); do
    [ -e "$src" ] || missing+=("$src")
    # .dockerignore entries are paths from the context root (trailing / = folder).
    while read -r pat; do
      [ -n "$pat" ] && [ "${pat#\#}" = "$pat" ] || continue
      pat=${pat%/}
      case "$src" in "$pat" | "$pat"/*) ignored+=("$src ($pat)") ;; esac
    done <.dockerignore
  done
  [ ${#missing[@]} -eq 0 ] || { echo "COPY sources missing: ${missing[*]}"; return 1; }
  [ ${#ignored[@]} -eq 0 ] || { echo "COPY sources excluded by .dockerignore: ${ignored[*]}"; return 1; }
  for src in Cargo.toml Cargo.lock .sqlx migrations lua src loadtest/loadgen/Cargo.toml loadtest/loadgen/src; do
    grep -qE "^COPY ([^ ]+ )*$src( |$)" Dockerfile || { echo "Dockerfile does not copy $src"; return 1; }
  done
  # Files the app reads at run time (the web pages) must reach the runtime image.
  if [ -d static ]; then
    grep -qE '^COPY static ' Dockerfile || { echo "Dockerfile does not copy static/"; return 1; }
  fi
  grep -q 'SQLX_OFFLINE=true' Dockerfile
  grep -q -- '--release --locked --bin seckill' Dockerfile
  grep -qE '^USER ' Dockerfile
  for ign in target .local test-artifacts node_modules .git; do
    grep -qx "$ign/" .dockerignore || { echo ".dockerignore lacks $ign/"; return 1; }
  done
  echo "all COPY sources present and not ignored"
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

# --- runner ------------------------------------------------------------------------------
PASSED=0
FAILED=0

# A process and everything it started, children first (by id, found through --ppid).
kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# run NAME FUNCTION [TIMEOUT_SECONDS]
run() {
  local name=$1 fn=$2 limit=${3:-$CHECK_TIMEOUT} out="$TMP/out.$2" pid watchdog rc
  ( set -e; "$fn" ) >"$out" 2>&1 </dev/null &
  pid=$!
  # Bounded: a check still running after its limit is killed with what it started,
  # and counts as failed.
  ( sleep "$limit"; echo "timed out after ${limit}s" >>"$out"; kill_tree "$pid" ) >/dev/null 2>&1 &
  watchdog=$!
  rc=0; wait "$pid" || rc=$?
  kill "$watchdog" 2>/dev/null || true
  wait "$watchdog" 2>/dev/null || true
  if [ $rc -eq 0 ]; then
    PASSED=$((PASSED + 1))
    printf 'ok    %-40s %s\n' "$name" "$(grep -v '^[[:space:]]*$' "$out" | tail -n 1 | sed 's/^[[:space:]]*//')"
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL  %s (exit %s)\n' "$name" "$rc"
    tail -n 40 "$out" | sed 's/^/      /'
  fi
}

run "packages installed"                   check_packages 900
run "promtool check config"                check_promtool_config
run "promtool check rules"                 check_promtool_rules
run "promtool test rules (alert tests)"    check_promtool_tests
run "dashboard JSON"                       check_dashboard
run "grafana provisioning"                 check_grafana_provisioning
# Generous: builds target/debug/seckill when it is missing.
run "seckill instance ready"               check_app_ready 1500
run "prometheus scrapes seckill (up == 1)" check_prometheus_scrape
run "dashboard queries evaluate"           check_dashboard_queries
run "docker-compose config -q"             check_compose_config
run "docker-compose requires secrets"      check_compose_requires_secrets
run "docker-compose stack wiring"          check_compose_semantics
run "docker-compose config -q (cluster)"   check_compose_cluster_config
run "docker-compose cluster profile"       check_compose_cluster
run "nginx -t"                             check_nginx
run "nginx -t (real-IP block enabled)"     check_nginx_realip
run "Dockerfile build context"             check_dockerfile_context

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
