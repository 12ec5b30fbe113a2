"""The last table `make bench` prints: each ratio with its target, and whether it is met.

Called by report.py. A ratio of the app against a ceiling (`ceiling`: loadtest/ceiling,
measured in the same run) is taken per pair, the two having run one after the other
(app, ceiling, app, ceiling, ...: scripts/bench/load.sh, `pairs`), and shown as the
median of the pairs with their range, min–max: on a shared machine one pair alone
swings with whatever else runs (refused ÷ ceiling read 0.67, 0.79 and 0.95 in runs of
one pair on 2026-12-02).
"""
import statistics

import edge
from results import non200


class Ratios:
    def __init__(self):
        self.rows = []    # (label, value text, target text, status)
        self.pairs = 0    # the most pairs an app ÷ ceiling ratio was taken over

    def add(self, label, value, target=None, fmt="{:.2f}", text=None):
        text = text or ("n/a" if value is None else fmt.format(value))
        if target is None:
            self.rows.append((label, text, "", ""))
            return
        op, bound = target
        ok = None if value is None else {">=": value >= bound, "<=": value <= bound, "<": value < bound}[op]
        shown = fmt.format(bound)
        self.rows.append((label, text, f"{ {'>=': '≥', '<=': '≤', '<': '<'}[op]} {shown}",
                          "n/a" if ok is None else ("ok" if ok else "MISSED")))

    def add_pairs(self, label, values, target, fmt="{:.2f}"):
        """A ratio over the pairs: the median, judged against the target, with its range
        (min–max) when there was more than one pair."""
        self.pairs = max(self.pairs, len(values))
        if not values:
            return self.add(label, None, target, fmt)
        median = statistics.median(values)
        text = fmt.format(median)
        if len(values) > 1:
            text += f" ({fmt.format(min(values))}–{fmt.format(max(values))})"
        self.add(label, median, target, fmt, text)


def best(res, steps, name, p99_bound):
    """(highest rate of an ok step, text): 0 when the first step missed."""
    tried = [rate for rate in steps[name] if f"{name}.step-{rate}" in res.r]
    good = [rate for rate in tried if res.verdict(f"{name}.step-{rate}", p99_bound) == "ok"]
    value = max(good, default=0)
    if not tried:
        return None, "n/a"
    if not good:
        return 0, f"< {tried[0]} (first step missed)"
    if value == tried[-1]:
        return value, f"≥ {value} (every step ok)"
    return value, f"{value} ({tried[-1]} missed)"


def report(res, steps, evalsha, conc, st_rate, p99_bound, pg_main, pg_durable):
    r, have, rps, cpu_us = res.r, res.have, res.rps, res.cpu_us
    out = Ratios()
    ratio, pct = out.add, "{:.1%}"

    def throughput(app, ceiling):
        rate = lambda stem: res.reports[stem]["requests_per_sec"]
        return res.per_pair(app, ceiling, lambda a, c: rate(a) / rate(c))

    if have("refused_api", "ceiling_refused"):
        cpus = res.per_pair("refused_api", "ceiling_refused",
                            lambda a, c: None if None in (cpu_us(a), cpu_us(c)) else (cpu_us(a), cpu_us(c)))
        out.add_pairs("refused (denial cache off) ÷ ceiling, same scenario (throughput)",
                      throughput("refused_api", "ceiling_refused"), (">=", 0.90))
        app_cpu = statistics.median(a for a, _ in cpus) if cpus else float("nan")
        ceiling_cpu = statistics.median(c for _, c in cpus) if cpus else float("nan")
        medians = " (medians)" if len(cpus) > 1 else ""
        out.add_pairs(f"CPU per request on that scenario, app {app_cpu:.1f} µs ÷ ceiling {ceiling_cpu:.1f} µs{medians}",
                      [a / c for a, c in cpus], ("<=", 1.25))
    if have("stampede_open", "stampede_closed"):
        open_share, open_calls = res.stampede("stampede_open", "stampede_open.before")
        closed_share, closed_calls = res.stampede("stampede_closed", "stampede_open.after")
        ratio(f"stampede at {st_rate} req/s offered: refusals answered locally", open_share, (">=", 0.95), pct)
        ratio(f"stampede at {st_rate} req/s offered: Redis limiter calls/s", open_calls, None, "{:.0f}")
        ratio("stampede, closed model: refusals answered locally", closed_share, (">=", 0.95), pct)
        ratio("stampede, closed model: Redis limiter calls/s", closed_calls, None, "{:.0f}")
    if have("stampede_closed", "sold_out"):
        ratio("stampede, closed model ÷ sold-out fast path (throughput)",
              rps("stampede_closed") / rps("sold_out"), (">=", 0.90))
    if have("sold_out", "constant"):
        ratio("sold-out fast path ÷ constant route GET /health/live (throughput)",
              rps("sold_out") / rps("constant"), (">=", 0.80))
    if have("sold_out", "ceiling_constant"):
        out.add_pairs("sold-out fast path ÷ ceiling POST /constant (throughput)",
                      throughput("sold_out", "ceiling_constant"), (">=", 0.80))
    if have("limiter_only", "ceiling_limited"):
        out.add_pairs("GET /api/limited admitted ÷ ceiling (throughput)",
                      throughput("limiter_only", "ceiling_limited"), (">=", 0.85))
    if have("ledger_2x"):
        ledger = r["ledger_2x"]["checks"]
        ratio(f"ledger over 2 instances, denial cache on: limit checks passed ({', '.join(c['name'] for c in ledger)})",
              sum(c["passed"] for c in ledger) / max(len(ledger), 1), (">=", 1.0), pct)
    if have("seckill_three", "seckill_off"):
        ratio("3 dimensions ÷ no limiting (throughput)", rps("seckill_three") / rps("seckill_off"))
    if have("seckill_three", "seckill_one"):
        ratio("3 dimensions ÷ 1 dimension (throughput)", rps("seckill_three") / rps("seckill_one"))
    if have("refused", "seckill_three"):
        ratio("refused ÷ admitted (throughput)", rps("refused") / rps("seckill_three"))
    if have("refused", "limiter_only"):
        ratio("refused ÷ bare limiter route (throughput)", rps("refused") / rps("limiter_only"))
    if have("seckill_three_2x", "seckill_three"):
        ratio("2 instances ÷ 1 instance (throughput)", rps("seckill_three_2x") / rps("seckill_three"))
    if have("refused") and evalsha is not None:
        ratio("limiter decisions/s (refused path) ÷ raw EVALSHA/s", rps("refused") / evalsha)
    if have("orders"):
        ratio("orders per second on one item (closed model)", r["orders"]["by_status"].get("200", 0) / r["orders"]["seconds"],
              None, "{:.0f}")

    # Orders, open model (issue 13).
    for name, what in (("orders_open_1000", pg_main), ("orders_open_durable", pg_durable)):
        if not have(name):
            continue
        x = r[name]
        where = "" if name == "orders_open_1000" else f", durable Postgres ({what})"
        ratio(f"orders, open model, 1000/s for 10 s{where}: p99 ms (p50 {x['latency']['p50_ms']:.2f},"
              f" max {x['latency']['max_ms']:.2f})", x["latency"]["p99_ms"],
              ("<", p99_bound) if name == "orders_open_1000" else None)
        missing = abs(x["by_status"].get("200", 0) - (res.new_orders(name) or 0))
        ratio(f"orders, open model, 1000/s for 10 s{where}: failed requests (non-200, dropped, 200"
              f" without its order in Postgres)", non200(x) + x["dropped"] + missing, ("<=", 0), "{:.0f}")

    if steps["orders_max_open"] and have("seckill_three"):
        value, text = best(res, steps, "orders_max_open", p99_bound)
        ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 1 instance (orders/s)", value, None, text=text)
        ceiling = rps("seckill_three")
        ratio(f"that ÷ ceiling: limiter + reservation, POST /seckill 3 dimensions, 409 ALREADY_PURCHASED,"
              f" closed model, {conc} in flight ({ceiling:.0f} req/s)",
              None if value is None else value / ceiling, (">=", 0.40))
    elif steps["orders_max_open"]:
        value, text = best(res, steps, "orders_max_open", p99_bound)
        ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 1 instance (orders/s;"
              f" run seckill_three too for its ceiling)", value, None, text=text)
    if steps["orders_max_open_2x"]:
        value, text = best(res, steps, "orders_max_open_2x", p99_bound)
        ratio(f"highest open-model order rate with p99 < {p99_bound:g} ms, 2 instances (orders/s)", value, None, text=text)

    for name in ("cluster_one_sale", "cluster_many_sales"):
        if not res.read(name + ".masters"):
            continue
        calls = [tuple(map(int, line.split())) for line in res.read(name + ".masters").splitlines()]
        total = sum(n for _, n in calls) or 1
        shares = ", ".join(f"{port}: {n / total:.0%}" for port, n in calls)
        print(f"\n{name}: script calls (EVALSHA) per master, {total} in all: {shares}")
        if name == "cluster_many_sales":
            top = max(n for _, n in calls) / total
            out.rows.append(("cluster_many_sales: the busiest master's share of script calls",
                             f"{top:.0%}", "<= 40%", "met" if top <= 0.40 else "MISSED"))
    edge.report(res, out)
    if out.rows:
        print()
        if out.pairs > 1:
            print(f"app ÷ ceiling ratios: the median of {out.pairs} pairs run alternately (app, ceiling,"
                  f" app, ceiling, ...), its range (min–max) in brackets\n")
        print("| ratio | value | target | |")
        print("|---|---:|---:|---|")
        for label, value, target, status in out.rows:
            print(f"| {label} | {value} | {target} | {status} |")
