"""The few lines of an instance's `/metrics` the schedule reads: whether its last
decisions of a policy were Redis's (`seckill_limiter_mode`), which tells when an
instance is back on Redis after an outage."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Series]:
    """The exposition format's samples (comments and malformed lines skipped)."""
    series = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        labels = {x["key"]: x["value"] for x in _LABEL.finditer(m["labels"] or "")}
        series.append(Series(m["name"], labels, value))
    return series


def deciding_in_redis(text: str, policies: tuple[str, ...]) -> bool:
    """Whether the instance's last decision of each policy was Redis's: its
    `seckill_limiter_mode{mode="redis"}` series reads 1, whichever order its labels come in."""
    modes = parse(text)
    return all(
        any(s.name == "seckill_limiter_mode" and s.labels.get("policy") == policy
            and s.labels.get("mode") == "redis" and s.value == 1 for s in modes)
        for policy in policies)
