"""The edge's ratios (issue 40; scripts/bench/scenarios-edge.sh), added to the ratio table
by ratios.py: Envoy's rate-limit gRPC API with three descriptors, ours beside its
ceiling (rls-ceiling), Kuadrant's Limitador engine (rls-limitador) and the HTTP
`/api/limited` path. Scenarios run in turn (ours, ceiling, peer, ours, ...) are divided
run by run, k-th with k-th, and shown as the median with its range, as the app ÷ ceiling
pairs are.
"""
import statistics


def over_admitted(res, name):
    """Admissions beyond the limits over every run of the scenario (the ledger), or None."""
    if name not in res.runs:
        return None
    return sum(sum(res.reports[s].get("over_admitted", {}).values()) for s in res.runs[name])


def report(res, out):
    r, have, cpu_us = res.r, res.have, res.cpu_us

    def throughput(a, b):
        rate = lambda stem: res.reports[stem]["requests_per_sec"]
        return res.per_pair(a, b, lambda x, y: rate(x) / rate(y))

    for ours, ceiling, what in (("rls_fixed", "rls_ceiling", "fixed_window, admitted"),
                                ("rls_sliding", "rls_ceiling_sliding", "sliding_window, admitted"),
                                ("rls_refused", "rls_ceiling_refused", "fixed_window, refused, denial cache off")):
        if have(ours, ceiling):
            out.add_pairs(f"gRPC, ours ÷ its ceiling ({what}; throughput)", throughput(ours, ceiling), (">=", 0.80))
    if have("rls_fixed", "rls_limitador"):
        out.add_pairs("gRPC admitted, ours fixed_window ÷ Limitador exact (throughput)",
                      throughput("rls_fixed", "rls_limitador"), (">=", 1.0))
        cpus = res.per_pair("rls_fixed", "rls_limitador",
                            lambda a, b: None if None in (cpu_us(a), cpu_us(b)) else (cpu_us(a), cpu_us(b)))
        ours = statistics.median(a for a, _ in cpus) if cpus else float("nan")
        peer = statistics.median(b for _, b in cpus) if cpus else float("nan")
        out.add_pairs(f"CPU per decision, admitted: our server {ours:.1f} µs ÷ Limitador exact {peer:.1f} µs (medians)",
                      [a / b for a, b in cpus], ("<=", 1.0))
    if have("rls_sliding", "rls_limitador"):
        out.add_pairs("gRPC admitted, ours sliding_window ÷ Limitador exact (throughput)",
                      throughput("rls_sliding", "rls_limitador"), None)
    if have("rls_limitador_cached", "rls_limitador"):
        out.add("gRPC admitted, Limitador cached ÷ Limitador exact (throughput)",
                r["rls_limitador_cached"]["requests_per_sec"] / r["rls_limitador"]["requests_per_sec"])
    if have("rls_sliding", "limiter_only"):
        out.add("gRPC admitted, ours sliding_window ÷ HTTP GET /api/limited (3 keys, sliding_window; throughput)",
                r["rls_sliding"]["requests_per_sec"] / r["limiter_only"]["requests_per_sec"])
    if have("rls_refused_cache", "rls_refused"):
        out.add("gRPC refused, ours: denial cache on ÷ off (throughput)",
                r["rls_refused_cache"]["requests_per_sec"] / r["rls_refused"]["requests_per_sec"])
    if have("rls_refused_cache"):
        # A family with no sample yet (no refusal before the run) counts 0.
        family = "seckill_rls_local_refusals_total"
        after = res.metric("rls_refused_cache.after", family)
        local = None if after is None else after - (res.metric("rls_refused_cache.before", family) or 0)
        refused = r["rls_refused_cache"].get("refused_from_start", 0)
        out.add("gRPC refused, ours, denial cache on: refusals answered without Redis",
                None if local is None or not refused else local / refused, None, "{:.1%}")
    if have("nginx_gate", "nginx_plain"):
        out.add_pairs("NGINX with the gate ÷ NGINX without it (throughput)",
                      throughput("nginx_gate", "nginx_plain"), (">=", 0.40))
    for name, what, target in (("rls_refused", "ours fixed_window, denial cache off", ("<=", 0)),
                               ("rls_refused_cache", "ours fixed_window, denial cache on", ("<=", 0)),
                               ("rls_ceiling_refused", "the ceiling", None),
                               ("rls_limitador_refused", "Limitador exact", None),
                               ("rls_limitador_cached_refused", "Limitador cached", None)):
        n = over_admitted(res, name)
        if n is not None:
            runs = len(res.runs[name])
            out.add(f"gRPC refused mix, {what}: admissions over the limits (ledger, {runs} run{'s' * (runs > 1)})",
                    n, target, "{:.0f}")
