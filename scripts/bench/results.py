"""What a `make bench` run left in its output folder, read for scripts/bench/report.py.

Each loadgen run wrote NAME.json (its report), and beside it NAME.cpu (the servers' CPU
ticks over the measured phase), NAME.orders (the item's orders in Postgres before and
after), NAME.prom (an instance's metrics). A scenario measured beside its ceiling ran
in pairs, NAME.pair-1, NAME.pair-2, ... (scripts/bench/load.sh, `pairs`): it stands in
the table for the run with the median req/s, and an app ÷ ceiling ratio is taken per
pair (`per_pair`).
"""
import csv
import json
import os
import re


def read(out, name):
    """The file's text, stripped, or None when the run did not write it."""
    path = os.path.join(out, name)
    return open(path).read().strip() if os.path.exists(path) else None


class Results:
    def __init__(self, out, names):
        self.out = out
        self.reports = {}  # every run's report, by its file's stem
        self.runs = {}     # scenario name -> the stems of its runs, in the order they ran
        self.r = {}        # scenario name -> the report that stands for it
        self.stem = {}     # scenario name -> that report's stem
        for name in names:
            stems = self._stems(name)
            if not stems:
                continue
            for s in stems:
                self.reports[s] = self._json(s)
            self.runs[name] = stems
            by_rate = sorted(stems, key=lambda s: self.reports[s]["requests_per_sec"])
            self.stem[name] = by_rate[(len(by_rate) - 1) // 2]  # the median (the lower of two)
            self.r[name] = self.reports[self.stem[name]]

    def _json(self, stem):
        with open(os.path.join(self.out, stem + ".json")) as f:
            return json.load(f)

    def _stems(self, name):
        if os.path.exists(os.path.join(self.out, name + ".json")):
            return [name]
        k, stems = 1, []
        while os.path.exists(os.path.join(self.out, f"{name}.pair-{k}.json")):
            stems.append(f"{name}.pair-{k}")
            k += 1
        return stems

    def read(self, name):
        return read(self.out, name)

    def have(self, *names):
        return all(n in self.r for n in names)

    def rps(self, name):
        return self.r[name]["requests_per_sec"]

    def evalsha(self):
        path = os.path.join(self.out, "evalsha.csv")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return float(next(csv.reader(f))[1])

    def cpu_us(self, name):
        """µs of the servers' CPU per request over the measured phase of a scenario (the
        run that stands for it) or of one run (by stem), or None."""
        stem = self.stem.get(name, name)
        x = self.reports.get(stem)
        path = os.path.join(self.out, stem + ".cpu")
        if x is None or not os.path.exists(path) or not x["requests"]:
            return None
        before, after, tck = map(int, open(path).read().split())
        return (after - before) / tck / x["requests"] * 1e6

    def machine_cpu_us(self, name):
        """µs of the whole machine's busy CPU (every process: the servers, Redis, Postgres,
        loadgen) per request over the measured phase of one run (by stem), or None."""
        x = self.reports.get(name)
        path = os.path.join(self.out, name + ".machine")
        if x is None or not os.path.exists(path) or not x["requests"]:
            return None
        before, after, tck = map(int, open(path).read().split())
        return (after - before) / tck / x["requests"] * 1e6

    def per_pair(self, app, ceiling, figure):
        """figure(app run's stem, ceiling run's stem) for each pair that ran both sides,
        None values left out."""
        values = [figure(a, c) for a, c in zip(self.runs.get(app, []), self.runs.get(ceiling, []))]
        return [v for v in values if v is not None]

    def checks_passed(self, name):
        """Whether loadgen's limit checks passed in every run of the scenario."""
        return all(c["passed"] for s in self.runs[name] for c in self.reports[s]["checks"])

    def metric(self, name, family, labels=None):
        """Sum of a counter family's samples (optionally those with these labels), or None."""
        path = os.path.join(self.out, name + ".prom")
        total, seen = 0.0, False
        for line in open(path) if os.path.exists(path) else []:
            m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)", line)
            if not m or m.group(1) != family:
                continue
            if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
                continue
            total, seen = total + float(m.group(3)), True
        return total if seen else None

    def delta(self, before, after, family, labels=None):
        a, b = self.metric(before, family, labels), self.metric(after, family, labels)
        return None if a is None or b is None else b - a

    def stampede(self, phase, before):
        local = self.delta(before, f"{phase}.after", "seckill_limiter_local_refusals_total")
        calls = self.delta(before, f"{phase}.after", "seckill_redis_calls_total", {"purpose": "limiter"})
        refused = self.r[phase]["by_status"].get("429", 0)
        share = None if local is None or refused == 0 else local / refused
        per_sec = None if calls is None else calls / self.r[phase]["seconds"]
        return share, per_sec

    def new_orders(self, name):
        """Orders of the run's item that Postgres gained over the run, or None."""
        counts = (self.read(name + ".orders") or "").split()
        return int(counts[1]) - int(counts[0]) if len(counts) == 2 else None

    def verdict(self, name, p99_bound):
        """ok: p99 under the bound, every answer 200 and one order in Postgres each, nothing
        dropped; else why not."""
        x = self.r[name]
        if non200(x) or x["dropped"] or not x["requests"] or self.new_orders(name) != x["requests"]:
            return "FAILED"
        return "ok" if x["latency"]["p99_ms"] < p99_bound else "p99 over"


def non200(x):
    return x["requests"] - x["by_status"].get("200", 0)
