"""The summary of a soak, in markdown ($SOAK_OUT/summary.md and stdout): each fault's
window with its answers and their latency, the side load's and the mixed traffic's
answers, the claims each fault is held to (claims.py), the ledger's and the stores'
checks (judged by loadgen), memory and the machine's load. Judged from $SOAK_OUT alone:
loadgen.json and the schedule's marks (marks.py), admin-burst.txt, mixed-errors.txt,
rss-points.txt, loadavg.txt and run.json."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TextIO

from .claims import Claims, Evidence, FaultTimes, causes, judge, p99
from .marks import Fault, FaultMark, MixedFailure, OutageMark, Quiet, RssLabel, RssPoint
from .report import Answers, Report, Side
from .settings import Run, Settings

ANSWER_COLUMNS = ["200", "503 LIMITER_UNAVAILABLE", "503 OVERLOADED", "503 ORDERS_UNAVAILABLE", "503 ORDER_FAILED"]
WHOLE_RUN = "whole run"


def fault_words(s: Settings, window: str) -> str:
    """A window's words in the first table; `NAME.down` is the part of a Redis outage
    with its process gone."""
    if window.endswith(".down"):
        return "↳ while Redis's process was gone"
    try:
        fault = Fault(window)
    except ValueError:
        return {Quiet.STEADY.value: "none (steady state, before the faults)",
                Quiet.AFTER.value: "none (after the faults)"}.get(window, window)
    match fault:
        case Fault.REDIS_SHUTDOWN:
            return f"Redis `SHUTDOWN`, {s.redis_outage:g} s down"
        case Fault.PG_SLOW:
            return f"Postgres slowed: {s.pg_slow_ms:g} ms per insert, {s.pg_slow:g} s"
        case Fault.PG_OUTAGE:
            return f"Postgres refusing connections, {s.pg_outage:g} s"
        case Fault.REDIS_KILL:
            return f"Redis SIGKILLed, {s.redis_kill:g} s down"
        case Fault.INSTANCE_KILL:
            return "SIGKILL instance 1, restarted"


def ms(v: float) -> str:
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def answer_cell(answers: Answers, key: str) -> str:
    x = answers.get(key)
    if not x:
        return "-"
    lat = x.latency
    return f"{x.count}: {lat.p50_ms:.1f} / {lat.p99_ms:.1f} / {lat.max_ms:.0f} ms"


def side_cell(answers: Answers) -> str:
    if not answers:
        return "-"
    return ", ".join(f"{k}: {v.count}" for k, v in answers.items())


def mixed_cell(rows: list[MixedFailure]) -> str:
    groups: dict[str, list[float]] = {}
    for m in rows:
        groups.setdefault(f"{m.kind}: {m.status} {m.code}", []).append(m.latency_ms)
    return ", ".join(f"{k} × {len(v)} ({p99(v):.0f} ms)" for k, v in sorted(groups.items())) or "none"


@dataclass(frozen=True)
class Row:
    """A row of the answers' tables: a window, or the whole run."""

    name: str
    from_s: float
    to_s: float
    answers: Answers
    side: Side


def rows(r: Report) -> list[Row]:
    return ([Row(w.name, w.from_s, w.to_s, w.answers, w.side) for w in r.windows]
            + [Row(WHOLE_RUN, 0, math.inf, r.answers, r.side)])


def read_burst(path: Path) -> dict[str, int]:
    """admin-burst.txt, `STATUS COUNT`: the wrong admin tokens' answers."""
    try:
        return {s: int(c) for s, c in (line.split() for line in path.read_text().splitlines())}
    except FileNotFoundError:
        return {}


def write(out: Path, to: TextIO) -> bool:
    """Writes the summary of the soak in `out`; whether every claim and check held."""
    run = Run.read(out)
    s = run.settings
    r = Report.read(out / "loadgen.json")
    start_ms = r.start_unix_ms
    faults = {m.fault: FaultTimes((m.from_ms - start_ms) / 1000, (m.off_ms - start_ms) / 1000,
                                  (m.back_ms - start_ms) / 1000)
              for m in FaultMark.read(out / "faults.txt")}
    mixed = MixedFailure.read(out / "mixed-errors.txt", start_ms)

    def p(line: str = "") -> None:
        print(line, file=to)

    p(f"Soak: {s.seconds:.0f} s at {s.rate:.0f} purchases/s from {s.users:.0f} users ({s.ips:.0f} addresses), "
      f"item stock {s.stock:.0f}, two instances; mixed traffic {s.mix_rate:.0f} req/s and the side load "
      f"(6 keys at {s.side_rate:g}/s) beside it.\n")
    p("| fault | window | back after | purchases | p99 | max | 5xx and errors by cause |")
    p("|---|---|---|---|---|---|---|")
    for w in r.windows:
        f = _fault_times(faults, w.name)
        back = f"{f.back - f.t0:.1f} s" if f else "-"
        p(f"| {fault_words(s, w.name)} | {w.from_s:.0f}–{w.to_s:.0f} s | {back} "
          f"| {w.requests} | {ms(w.latency.p99_ms)} | {ms(w.latency.max_ms)} | {causes(w.by_cause)} |")
    p(f"| whole run | 0–{r.seconds:.0f} s | - | {r.requests} | {ms(r.latency.p99_ms)} | {ms(r.latency.max_ms)} "
      f"| {causes(r.by_cause)} |\n")

    p("Purchases by answer, each with its own latency (p50 / p99 / max):\n")
    p("| fault | " + " | ".join(ANSWER_COLUMNS) + " |")
    p("|---|" + "---|" * len(ANSWER_COLUMNS))
    for row in rows(r):
        p(f"| {row.name} | " + " | ".join(answer_cell(row.answers, k) for k in ANSWER_COLUMNS) + " |")
    p()
    p("The side load by answer (`limited`: 3 sliding-log and 1 token-bucket client ids; "
      "`orders_read`: 2 users; each at its rate whatever the answers), and the mixed traffic's "
      "5xx and unanswered requests (kind: status code × count, p99):\n")
    p("| fault | `/api/limited` | `/api/orders/mine` | mixed traffic's 5xx |")
    p("|---|---|---|---|")
    for row in rows(r):
        cells = [side_cell(row.side.get(route, {})) for route in ("limited", "orders_read")]
        cells.append(mixed_cell([m for m in mixed if row.from_s <= m.t_s < row.to_s]))
        p(f"| {row.name} | " + " | ".join(cells) + " |")
    p()

    claims: Claims = judge(Evidence(r, faults, OutageMark.read(out / "outages.txt"), mixed,
                                    read_burst(out / "admin-burst.txt"), s, run.lockout))
    p("| fault | claim | figure | result |")
    p("|---|---|---|---|")
    for c in claims.rows:
        p(f"| {c.fault} | {c.claim} | {c.figure} | {c.result()} |")
    p()

    p("Answers: " + ", ".join(f"{k}: {v}" for k, v in r.by_status.items())
      + "; refused by dimension: " + (", ".join(f"{k}: {v}" for k, v in r.by_dimension.items()) or "none")
      + f"; answers lost: {r.unknown_outcomes}; sends dropped: {r.dropped} (side load: {r.side_dropped}).\n")
    p("| ledger check | result | detail |")
    p("|---|---|---|")
    for check in r.checks:
        p(f"| {check.name} | {'ok' if check.passed else '**FAILED**'} | {check.detail} |")
    p()
    grown = memory(out / "rss-points.txt", s.rss_growth_mb, to)
    machine(out / "loadavg.txt", start_ms, s.seconds, to)
    return (all(c.passed for c in r.checks) and claims.passed()
            and grown is not None and grown <= s.rss_growth_mb)


def _fault_times(faults: dict[Fault, FaultTimes], window: str) -> Optional[FaultTimes]:
    try:
        return faults.get(Fault(window))
    except ValueError:
        return None


def memory(path: Path, growth_mb: float, to: TextIO) -> Optional[float]:
    """The instances' resident memory at the marked instants; how much instance 0 (never
    restarted) grew from the warm-up to the end (None when a point is missing)."""
    points = {(pt.label, pt.instance): pt.kb / 1024 for pt in RssPoint.read(path)}

    def mb(label: RssLabel, instance: int) -> str:
        v = points.get((label, instance))
        return "-" if v is None else f"{v:.1f} MB"

    print("| instance | RSS after warm-up | before the kill | after the restart | RSS at the end |", file=to)
    print("|---|---|---|---|---|", file=to)
    for i in (0, 1):
        print(f"| {i} | {mb(RssLabel.WARM, i)} | {mb(RssLabel.BEFORE_KILL, i)} | {mb(RssLabel.RESTARTED, i)} "
              f"| {mb(RssLabel.END, i)} |", file=to)
    warm, end = points.get((RssLabel.WARM, 0)), points.get((RssLabel.END, 0))
    if warm is None or end is None:
        print(f"\nInstance 0's growth was not measured (bound {growth_mb:.0f} MB).", file=to)
        return None
    grown = end - warm
    print(f"\nInstance 0 (never restarted) grew {grown:+.1f} MB from warm-up to the end (bound {growth_mb:.0f} MB).",
          file=to)
    return grown


def machine(path: Path, start_ms: int, seconds: float, to: TextIO) -> None:
    """The 1-minute load average over the load: the soak shares two cores with whatever
    else runs, and a latency bound of a few milliseconds cannot hold through a build."""
    try:
        samples = [line.split() for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return
    during = [float(load) for at, load in samples if 0 <= int(at) - start_ms <= seconds * 1000]
    if during:
        print(f"Load average (1 min, every 5 s) during the load: {min(during):.1f} to {max(during):.1f} on 2 cores.",
              file=to)
