"""The soak's knobs, from the SOAK_* environment (docs/soak.md lists them), and the run's
record of them in $SOAK_OUT/run.json, with the limits the app enforced as it read them.

The defaults keep orders flowing through every fault. Each address sends every 10 s
(1200 addresses at 120/s), one more than the `seckill` ip rule admits per minute (5 per
60 s by default), so the rule refuses one send in six all along; refusing more makes a
sliding window admit in bursts at the start of each minute and nothing in between, where
a fault would meet only refusals. The 24 000 users take 200 s to send once each, so
admissions are first purchases nearly to the end, and the stock runs out after the last
fault.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

# Five faults and their recoveries fit in no less.
MIN_SECONDS = 150


class SettingsError(Exception):
    """A knob the soak cannot run with; the message names it."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "") or str(default)
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw}: a whole number") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "") or f"{default:g}"
    try:
        return float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw}: a number") from None


@dataclass(frozen=True)
class Settings:
    """SOAK_SECONDS and the rest; the rates may be fractional, lengths are whole seconds."""

    seconds: int
    rate: float
    users: int
    ips: int
    stock: int
    mix_rate: float
    side_rate: float
    redis_outage: int
    redis_kill: int
    pg_slow: int
    pg_slow_ms: float
    pg_outage: int
    rss_growth_mb: float

    @staticmethod
    def from_env(env: Mapping[str, str] = os.environ) -> Settings:
        s = Settings(
            seconds=_int(env, "SOAK_SECONDS", 210),
            rate=_float(env, "SOAK_RATE", 120),
            users=_int(env, "SOAK_USERS", 24000),
            ips=_int(env, "SOAK_IPS", 1200),
            stock=_int(env, "SOAK_STOCK", 16000),
            mix_rate=_float(env, "SOAK_MIX_RATE", 40),
            side_rate=_float(env, "SOAK_SIDE_RATE", 12),
            redis_outage=_int(env, "SOAK_REDIS_OUTAGE_SECONDS", 10),
            redis_kill=_int(env, "SOAK_REDIS_KILL_SECONDS", 3),
            pg_slow=_int(env, "SOAK_PG_SLOW_SECONDS", 20),
            pg_slow_ms=_float(env, "SOAK_PG_SLOW_MS", 200),
            pg_outage=_int(env, "SOAK_PG_OUTAGE_SECONDS", 10),
            rss_growth_mb=_float(env, "SOAK_RSS_GROWTH_MB", 32),
        )
        if s.seconds < MIN_SECONDS:
            raise SettingsError(f"SOAK_SECONDS={s.seconds}: at least {MIN_SECONDS} (five faults and their recoveries)")
        return s

    @property
    def side_load(self) -> bool:
        return self.side_rate != 0

    @property
    def mixed_traffic(self) -> bool:
        return self.mix_rate != 0


def arg(x: float) -> str:
    """A number as a command-line argument: `120`, not `120.0` (nor `1e+06`)."""
    return str(int(x)) if x == int(x) else repr(x)


@dataclass(frozen=True)
class Lockout:
    """The admin lockout as the running app enforces it: the `admin_auth` policy's first
    rule (`identity::lockout`), read from `GET /admin/api/policies/admin_auth`."""

    enabled: bool
    fail_mode: str
    failures: int
    window_ms: int

    @staticmethod
    def from_policy(policy: Mapping[str, Any]) -> Lockout:
        rule = policy["rules"][0]
        return Lockout(bool(policy["enabled"]), str(policy["failMode"]), int(rule["threshold"]), int(rule["windowMs"]))


@dataclass(frozen=True)
class Run:
    """$SOAK_OUT/run.json: the knobs of the run and what the app enforced, so that the
    judgement can be made again from $SOAK_OUT alone (`python3 scripts/soak judge OUT`)."""

    settings: Settings
    lockout: Lockout

    FILE: ClassVar[str] = "run.json"

    def write(self, out: Path) -> None:
        (out / self.FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @staticmethod
    def read(out: Path) -> Run:
        raw = json.loads((out / Run.FILE).read_text())
        return Run(Settings(**raw["settings"]), Lockout(**raw["lockout"]))
