"""The tables `make bench` prints (docs/performance.md): the scenarios and the open-model
orders here, then the ratios with their targets (ratios.py).

Run by scripts/bench.sh with its output folder and settings as arguments; reads the
runs through results.py; the waiting room's table comes from waiting_room.py.
"""
import sys

import ratios
import waiting_room
from results import Results, non200, read

out, conc, secs, st_users, st_rate, st_cap, p99_bound, step_secs, open_cap, only = sys.argv[1:11]
p99_bound = float(p99_bound)
rows = [
    ("constant", "GET /health/live (constant answer)"),
    ("limiter_only", "GET /api/limited (bare limiter, 1 key)"),
    ("ceiling_limited", "ceiling: GET /api/limited (1-key EVALSHA, constant answer)"),
    ("seckill_off", "POST /seckill, limiting off"),
    ("seckill_one", "POST /seckill, 1 dimension"),
    ("seckill_three", "POST /seckill, 3 dimensions"),
    ("seckill_three_2x", "POST /seckill, 3 dimensions, 2 instances"),
    ("refused", "POST /seckill refused (429, over the user limit)"),
    ("refused_api", "POST /seckill, real limits, mostly refused by api, bought item, denial cache off"),
    ("ceiling_refused", "ceiling: the same scenario (3-key EVALSHA, constant answer)"),
    ("sold_out", "POST /seckill at a sold-out item (fast path)"),
    ("ceiling_constant", "ceiling: POST /constant (token + body, constant answer)"),
    ("stampede_open", f"stampede: {st_users} users at an item they all bought, real limits, denial cache on, open model at {st_rate} req/s offered"),
    ("stampede_closed", f"stampede: the same, closed model, {conc} in flight"),
    ("ledger_2x", f"ledger: 2 instances, real limits, denial cache on, {conc} in flight"),
    ("orders", "POST /seckill, every request a new order"),
    ("cluster_one_sale", "POST /seckill, 3 dimensions, on a Redis Cluster (3 masters + 3 replicas), one sale, global scope"),
    ("cluster_many_sales", "the same cluster, 100 sales at once, per_item scope (each user's first request an order)"),
    # The edge (scenarios-edge.sh): gRPC ShouldRateLimit, 3 descriptors, closed model.
    ("rls_fixed", "gRPC, ours, fixed_window, admitted"),
    ("rls_ceiling", "gRPC ceiling: fixed_window script call, constant answer, admitted"),
    ("rls_limitador", "gRPC peer: Limitador exact (Redis), admitted"),
    ("rls_limitador_cached", "gRPC peer: Limitador cached, admitted"),
    ("rls_sliding", "gRPC, ours, sliding_window, admitted"),
    ("rls_ceiling_sliding", "gRPC ceiling: sliding_window script call, admitted"),
    ("rls_refused", "gRPC, ours, fixed_window, refused (one hot value), denial cache off"),
    ("rls_ceiling_refused", "gRPC ceiling: the same, refused"),
    ("rls_refused_cache", "gRPC, ours, fixed_window, refused, denial cache on"),
    ("rls_limitador_refused", "gRPC peer: Limitador exact, refused"),
    ("rls_limitador_cached_refused", "gRPC peer: Limitador cached, refused"),
    ("nginx_gate", "NGINX (2 workers), deploy/nginx/gate.conf: auth_request to the gate, then a constant upstream"),
    ("nginx_plain", "NGINX (2 workers), proxy_pass to the same upstream, no gate"),
]
# (a) and (d) are 1000/s for 10 s; (b) and (c) list their steps in NAME.steps.
steps = {name: [int(x) for x in (read(out, name + ".steps") or "").split()]
         for name in ("orders_max_open", "orders_max_open_2x")}
open_runs = [("orders_open_1000", 1000, 10)]
open_runs += [(f"{name}.step-{rate}", rate, int(step_secs)) for name, rates in steps.items() for rate in rates]
open_runs += [("orders_open_durable", 1000, 10)]
res = Results(out, [n for n, _ in rows] + [n for n, _, _ in open_runs])
r = res.r
evalsha = res.evalsha()
pg_main = res.read("pg.main.txt") or "unknown"
pg_durable = res.read("pg.durable.txt") or "unknown"

if only:
    print(f"\nBENCH_ONLY: {only}")
if any(name in r for name, _ in rows) or evalsha is not None:
    print(f"\nclosed model, {conc} requests in flight, {secs} s per scenario (the stampede's first"
          f" run: open model, {st_rate} req/s offered, sends dropped while {st_cap} are in flight);"
          f" Postgres: {pg_main}\n")
    print("| scenario | req/s | p50 ms | p99 ms | server CPU µs/req | answers |")
    print("|---|---:|---:|---:|---:|---|")
for name, label in rows:
    if name not in r:
        continue
    x = r[name]
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(x["by_status"].items()))
    if x.get("dropped"):
        answers += f", dropped: {x['dropped']}"
    if not res.checks_passed(name):
        answers += " (ledger check FAILED)"
    cpu = res.cpu_us(name)
    cpu = "" if cpu is None else f"{cpu:.1f}"
    # A scenario run in pairs with its ceiling: the run with the median req/s stands for it.
    if len(res.runs[name]) > 1:
        label += f" [median of {len(res.runs[name])} runs]"
    print(f"| {label} | {x['requests_per_sec']:.0f} | {x['latency']['p50_ms']:.2f} | {x['latency']['p99_ms']:.2f} | {cpu} | {answers} |")
if evalsha is not None:
    print(f"| redis-benchmark EVALSHA, 3-key sliding window | {evalsha:.0f} | | | | |")

open_labels = {
    "orders_open_1000": ("1 instance, api 2000/s", pg_main),
    "orders_open_durable": ("1 instance, api 2000/s, durable Postgres", pg_durable),
    "orders_max_open": ("step, 1 instance, api out of the way", pg_main),
    "orders_max_open_2x": ("step, 2 instances, api out of the way", pg_main),
}
shown = [(n, rate, s) for n, rate, s in open_runs if n in r]
if shown:
    print(f"\norders, open model: the rate offered whatever the answers take, each request a new"
          f" user from a new address (every one an order), one item; sends dropped while"
          f" {open_cap} are in flight; a run is ok with p99 < {p99_bound:g} ms, every answer"
          f" 200 with its new order in Postgres, and no send dropped\n")
    print("| scenario | Postgres | offered/s | s | 200/s | p50 ms | p99 ms | max ms | non-200 | dropped | new orders in Postgres | app CPU µs/order | all CPU µs/order | |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, rate, s in shown:
        x = r[name]
        label, pg = open_labels[name.split(".")[0]]
        others = ", ".join(f"{k}: {v}" for k, v in sorted(x["by_status"].items()) if k != "200")
        bad = f"{non200(x)} ({others})" if non200(x) else "0"
        lat = x["latency"]
        cpu = [res.cpu_us(name), res.machine_cpu_us(name)]
        app_cpu, all_cpu = ("" if c is None else f"{c:.0f}" for c in cpu)
        print(f"| {name.split('.')[0]}: {label} | {pg} | {rate} | {s} | "
              f"{x['by_status'].get('200', 0) / x['seconds']:.0f} | {lat['p50_ms']:.2f} | "
              f"{lat['p99_ms']:.2f} | {lat['max_ms']:.2f} | {bad} | {x['dropped']} | {res.new_orders(name)} | "
              f"{app_cpu} | {all_cpu} | {res.verdict(name, p99_bound)} |")
    sync = (res.read("pg.durable.sync.txt") or "").split()
    if "orders_open_durable" in r and len(sync) == 2:
        print(f"\ndurable Postgres: a synchronous 8 kB write (dd oflag=dsync, mean of 500) took"
              f" {sync[0]} µs on its disk before the run and {sync[1]} µs after; the disk is shared,"
              f" so other processes' writes stretch it")

ratios.report(res, steps, evalsha, conc=conc, st_rate=st_rate, p99_bound=p99_bound,
              pg_main=pg_main, pg_durable=pg_durable)

# The waiting room (scenarios-queue.sh): its own table, from its scenarios' reports.
waiting_room.report(out)
