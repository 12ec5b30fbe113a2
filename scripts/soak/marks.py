"""What the schedule writes down as it goes, one line each in $SOAK_OUT, and the
judgement reads back: the faults' instants, the Redis outages (for loadgen's ledger
checks too), the windows of loadgen's report, the memory points. Each line's format is
defined here once, for the writer and the reader.

Every instant is milliseconds of the UNIX clock (loadgen's `start_unix_ms` is on the
same clock).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class Fault(enum.Enum):
    """The faults of a soak, by the name of their window in loadgen's report."""

    REDIS_SHUTDOWN = "redis_shutdown"
    PG_SLOW = "pg_slow"
    PG_OUTAGE = "pg_outage"
    REDIS_KILL = "redis_kill"
    INSTANCE_KILL = "instance_kill"


class Quiet(enum.Enum):
    """The windows without a fault."""

    STEADY = "steady"
    AFTER = "after"


def down_window(fault: Fault) -> str:
    """The window of a Redis outage while Redis's process was gone."""
    return f"{fault.value}.down"


class OutageKind(enum.Enum):
    """What a Redis outage did to its data, as loadgen's `--redis-outages` reads it:
    `kept` (a `SHUTDOWN` fsyncs the append-only file first) or `lost` (a SIGKILL may
    lose up to a second of writes, so no ledger claim spans it)."""

    KEPT = "kept"
    LOST = "lost"


def append(path: Path, line: str) -> None:
    with path.open("a") as f:
        f.write(line + "\n")


@dataclass(frozen=True)
class FaultMark:
    """faults.txt, `NAME FROM_MS OFF_MS BACK_MS`: when the fault began, was lifted, and
    the service was back."""

    fault: Fault
    from_ms: int
    off_ms: int
    back_ms: int

    def line(self) -> str:
        return f"{self.fault.value} {self.from_ms} {self.off_ms} {self.back_ms}"

    @staticmethod
    def read(path: Path) -> list[FaultMark]:
        marks = []
        for line in path.read_text().splitlines():
            name, from_ms, off_ms, back_ms = line.split()
            marks.append(FaultMark(Fault(name), int(from_ms), int(off_ms), int(back_ms)))
        return marks


@dataclass(frozen=True)
class OutageMark:
    """outages.txt, `KIND FROM_MS DOWN_MS UP_MS TO_MS` (loadgen's `--redis-outages`): the
    fault began, Redis's process had exited, it was started again, the fault's window
    ended."""

    kind: OutageKind
    from_ms: int
    down_ms: int
    up_ms: int
    to_ms: int

    def line(self) -> str:
        return f"{self.kind.value} {self.from_ms} {self.down_ms} {self.up_ms} {self.to_ms}"

    @staticmethod
    def read(path: Path) -> list[OutageMark]:
        marks = []
        for line in path.read_text().splitlines():
            kind, *instants = line.split()
            from_ms, down_ms, up_ms, to_ms = (int(v) for v in instants)
            marks.append(OutageMark(OutageKind(kind), from_ms, down_ms, up_ms, to_ms))
        return marks


@dataclass(frozen=True)
class WindowMark:
    """phases.txt, `NAME FROM_MS TO_MS` (loadgen's `--phases`): a window of its report."""

    name: str
    from_ms: int
    to_ms: int

    def line(self) -> str:
        return f"{self.name} {self.from_ms} {self.to_ms}"


class RssLabel(enum.Enum):
    """The instants at which the instances' resident memory is kept for the summary."""

    WARM = "warm"
    BEFORE_KILL = "before_kill"
    RESTARTED = "restarted"
    END = "end"


@dataclass(frozen=True)
class RssPoint:
    """rss-points.txt, `LABEL INSTANCE PID KB`."""

    label: RssLabel
    instance: int
    pid: int
    kb: int

    def line(self) -> str:
        return f"{self.label.value} {self.instance} {self.pid} {self.kb}"

    @staticmethod
    def read(path: Path) -> list[RssPoint]:
        points = []
        for line in path.read_text().splitlines():
            label, instance, pid, kb = line.split()
            points.append(RssPoint(RssLabel(label), int(instance), int(pid), int(kb)))
        return points


@dataclass(frozen=True)
class MixedFailure:
    """mixed-errors.txt (scripts/mixed-traffic.py's `--errors`), `UNIX_MS KIND STATUS
    CODE LATENCY_MS`: a 5xx or unanswered request of the mixed traffic; `t_s` is seconds
    since loadgen's start."""

    t_s: float
    kind: str
    status: str
    code: str
    latency_ms: float

    @staticmethod
    def read(path: Path, start_ms: int) -> list[MixedFailure]:
        try:
            lines = path.read_text().split("\n")
        except FileNotFoundError:
            return []
        rows = []
        for line in filter(None, lines):
            unix_ms, kind, status, code, latency = line.split()
            rows.append(MixedFailure((int(unix_ms) - start_ms) / 1000, kind, status, code, float(latency)))
        return rows
