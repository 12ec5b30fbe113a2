# The docker-compose `cluster` profile, read from the configuration compose renders with
# it (1.29 renders every service, each with its `profiles`), whose path is argv[1]: which
# services are in the profile (and that the default stack needs none of them), the six
# Redis nodes' settings and volumes, the one-shot cluster creation, and app-cluster's
# environment and dependencies.
# Run by scripts/check-deploy.sh (compose.sh, check_compose_cluster) from the repository root.
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
for k in ("SECKILL_ENVIRONMENT", "SECKILL_HOST", "SECKILL_PORT", "SECKILL_DEV_LOGIN", "SECKILL_JWT_SECRET", "SECKILL_QUEUE_SECRET",
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
