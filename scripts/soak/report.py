"""loadgen's report (`--json`, $SOAK_OUT/loadgen.json), the fields the judgement reads,
typed. Instants are seconds since loadgen's measured phase began (`start_unix_ms`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

# Answers by key: `200`, `503 OVERLOADED`, `error connect`, ...
Answers = dict[str, "Answer"]
# The side load's answers by route (`limited`, `orders_read`), then by key.
Side = dict[str, Answers]


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float
    max_ms: float

    @staticmethod
    def of(j: dict[str, Any]) -> Latency:
        return Latency(j["p50_ms"], j["p99_ms"], j["max_ms"])


@dataclass(frozen=True)
class Span:
    """How many requests one target answered so, and when the first and last were sent."""

    count: int
    first_s: float
    last_s: float


@dataclass(frozen=True)
class Answer:
    """The requests of one answer: how many, when the first and the last were sent, their
    latency, and the same per target (each instance has its own breaker)."""

    count: int
    first_s: float
    last_s: float
    latency: Latency
    per_target: list[Span]

    @staticmethod
    def of(j: dict[str, Any]) -> Answer:
        return Answer(j["count"], j["first_s"], j["last_s"], Latency.of(j["latency"]),
                      [Span(t["count"], t["first_s"], t["last_s"]) for t in j.get("per_target", [])])


def _answers(j: dict[str, Any]) -> Answers:
    return {k: Answer.of(v) for k, v in j.items()}


def _side(j: dict[str, Any]) -> Side:
    return {route: _answers(v) for route, v in j.items()}


@dataclass(frozen=True)
class Window:
    """A window of the report (a `--phases` line): its purchases and the side load's."""

    name: str
    from_s: float
    to_s: float
    requests: int
    latency: Latency
    by_cause: dict[str, int]
    answers: Answers
    side: Side

    def answer(self, key: str) -> Optional[Answer]:
        return self.answers.get(key)


@dataclass(frozen=True)
class Sample:
    """One scrape of one target's metrics (`--sample-metric`): series → value."""

    t_s: float
    target: int
    series: dict[str, float]


@dataclass(frozen=True)
class Check:
    """One of loadgen's ledger and store checks, with its verdict."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Report:
    start_unix_ms: int
    seconds: float
    requests: int
    latency: Latency
    by_status: dict[str, int]
    by_dimension: dict[str, int]
    by_cause: dict[str, int]
    answers: Answers
    side: Side
    samples: list[Sample]
    unknown_outcomes: int
    dropped: int
    side_dropped: int
    windows: list[Window]
    checks: list[Check]

    @staticmethod
    def read(path: Path) -> Report:
        j = json.loads(path.read_text())
        return Report(
            start_unix_ms=j["start_unix_ms"],
            seconds=j["seconds"],
            requests=j["requests"],
            latency=Latency.of(j["latency"]),
            by_status=j["by_status"],
            by_dimension=j["by_dimension"],
            by_cause=j["by_cause"],
            answers=_answers(j["answers"]),
            side=_side(j["side"]),
            samples=[Sample(s["t_s"], s["target"], s["series"]) for s in j["samples"]],
            unknown_outcomes=j["unknown_outcomes"],
            dropped=j["dropped"],
            side_dropped=j["side_dropped"],
            windows=[Window(p["name"], p["from_s"], p["to_s"], p["requests"], Latency.of(p["latency"]),
                            p["by_cause"], _answers(p["answers"]), _side(p["side"])) for p in j["phases"]],
            checks=[Check(c["name"], c["passed"], c["detail"]) for c in j["checks"]],
        )

    def window(self, name: str) -> Optional[Window]:
        return next((w for w in self.windows if w.name == name), None)


class Samples:
    """loadgen's metric samples: series by target, as (t, value) in time order."""

    def __init__(self, samples: list[Sample]) -> None:
        self.by: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for s in samples:
            for name, value in s.series.items():
                self.by.setdefault((s.target, name), []).append((s.t_s, value))

    def of(self, target: int, name: str) -> list[tuple[float, float]]:
        return self.by.get((target, name), [])

    def last_before(self, target: int, name: str, t: float) -> Optional[float]:
        before = [v for at, v in self.of(target, name) if at < t]
        return before[-1] if before else None

    def first_at_or_after(self, target: int, name: str, t: float,
                          test: Callable[[float], bool]) -> Optional[float]:
        """The first instant at or after t whose value passes test."""
        return next((at for at, v in self.of(target, name) if at >= t and test(v)), None)

    def during(self, target: int, name: str, t0: float, t1: float) -> list[tuple[float, float]]:
        return [(at, v) for at, v in self.of(target, name) if t0 <= at <= t1]
