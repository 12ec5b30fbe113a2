# The default docker-compose stack's wiring, read from the configuration compose renders
# (anchors merged, variables filled in with their defaults), whose path is argv[1]: the
# services, nginx's fixed address outside the dynamic range, the apps' environment (trust
# only nginx, production settings, same stores for both), healthy dependencies, ports on
# loopback only, the rate-limit gRPC port exposed but never published, Redis append-only,
# the mounts, nginx's upstreams, and the Alertmanager (configured at start from optional settings, cluster listener off, Prometheus's target).
# Run by scripts/check-deploy.sh (compose.sh, check_compose_semantics) from the repository root.
import ipaddress, re, sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
s = c["services"]
assert set(s) >= {"redis", "postgres", "app1", "app2", "nginx", "prometheus", "alertmanager", "grafana"}, sorted(s)

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
    assert e["SECKILL_PROBE_PORT"] == "8089", name
    assert e["SECKILL_ENVIRONMENT"] == "production", name
    assert e["SECKILL_DEV_LOGIN"] == "false", name
    # The apps trust X-Forwarded-For from nginx's fixed address and nothing else.
    assert e["SECKILL_TRUSTED_PROXIES"] == str(nginx_ip), (name, e.get("SECKILL_TRUSTED_PROXIES"))
    assert len(e["SECKILL_JWT_SECRET"]) >= 32, name
    assert len(e["SECKILL_QUEUE_SECRET"]) >= 32 and e["SECKILL_QUEUE_SECRET"] != e["SECKILL_JWT_SECRET"], name
    assert e["REDIS_URL"].startswith("redis://redis:"), name
    assert "@postgres:" in e["DATABASE_URL"], name
    for dep in ("redis", "postgres"):
        assert s[name]["depends_on"][dep]["condition"] == "service_healthy", (name, dep)
# Two instances of one service: same stores, same key prefix.
for k in ("REDIS_URL", "DATABASE_URL", "SECKILL_REDIS_KEY_PREFIX", "SECKILL_JWT_SECRET", "SECKILL_QUEUE_SECRET"):
    assert a1[k] == a2[k], k
assert ("127.0.0.1", "8080", "8080") in published("app1"), published("app1")
assert ("127.0.0.1", "8081", "8080") in published("app2"), published("app2")
# The rate-limit gRPC service has no authentication: on the compose network only.
for name in ("app1", "app2"):
    assert env(name)["SECKILL_RLS_PORT"] == "8181", name
    assert "8181" in [str(p).split("/")[0] for p in s[name].get("expose", [])], name
for name in s:
    for _, pub, target in published(name):
        assert "8181" not in (pub, target), ("the rate-limit gRPC port is published", name)
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

# The Alertmanager: its configuration generated at start by configure.sh from settings
# that all default to empty (so the stack starts without them), the cluster listener off,
# only its UI published (on loopback, checked above), Prometheus sending to it.
am = s["alertmanager"]
assert am["image"].startswith("prom/alertmanager:v"), am["image"]
assert mounts("alertmanager")["/etc/alertmanager"].endswith("/deploy/alertmanager"), mounts("alertmanager")
assert "configure.sh >/alertmanager/alertmanager.yml" in am["entrypoint"][2], am["entrypoint"]
assert "--config.file=/alertmanager/alertmanager.yml" in am["command"], am["command"]
assert "--cluster.listen-address=" in am["command"], am["command"]
assert [p[1:] for p in published("alertmanager")] == [("9093", "9093")], published("alertmanager")
ae = env("alertmanager")
optional = ("ALERTMANAGER_WEBHOOK_URL", "ALERTMANAGER_EMAIL_TO", "ALERTMANAGER_EMAIL_FROM",
            "ALERTMANAGER_SMARTHOST", "ALERTMANAGER_SMTP_USERNAME", "ALERTMANAGER_SMTP_PASSWORD")
assert all(ae[k] == "" for k in optional), ae
assert ae["ALERTMANAGER_SMTP_REQUIRE_TLS"] == "true", ae
configure = open("deploy/alertmanager/configure.sh").read()
assert all(k in configure for k in optional + ("ALERTMANAGER_SMTP_REQUIRE_TLS",)), "configure.sh reads another setting"
prom = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
ams = [t for a in prom["alerting"]["alertmanagers"] for sc in a["static_configs"] for t in sc["targets"]]
assert ams == ["alertmanager:9093"], ams
print(f"apps trust only nginx ({nginx_ip}); all ports on 127.0.0.1; redis append-only; "
      "alertmanager configured at start, settings optional, cluster off")
