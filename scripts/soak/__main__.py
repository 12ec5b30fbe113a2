"""`make soak`'s schedule and judgement (scripts/soak.sh builds, makes the database and
runs this; docs/soak.md says what it does and proves).

usage: python3 scripts/soak check        the SOAK_* settings, before anything is built
       python3 scripts/soak run --app BIN --loadgen BIN --db-name NAME --db-url URL
                                --db-admin-url URL
                                          the soak, into $SOAK_OUT; the summary on stdout
       python3 scripts/soak judge OUT     the summary of the soak in OUT again, on stdout

Exits 0 when every check and claim held, 1 when one failed, 2 when the soak could not
run (130 or 143 when interrupted).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Optional

if __package__ in (None, ""):
    # Run as `python3 scripts/soak`: import this folder as the package `soak`.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "soak"

from soak.processes import CannotRun, log  # noqa: E402
from soak.schedule import Database, run  # noqa: E402
from soak.settings import Settings, SettingsError  # noqa: E402
from soak.summary import write  # noqa: E402


def _terminated(_signum: int, _frame: Optional[FrameType]) -> None:
    raise SystemExit(143)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="soak")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("check")
    r = sub.add_parser("run")
    for name in ("app", "loadgen", "db-name", "db-url", "db-admin-url"):
        r.add_argument(f"--{name}", required=True)
    j = sub.add_parser("judge")
    j.add_argument("out", type=Path)
    a = p.parse_args(argv)
    if a.command == "judge":
        try:
            return 0 if write(a.out, sys.stdout) else 1
        except FileNotFoundError as e:
            log(f"error: {a.out} is not a soak's output: {e.filename} is missing")
            return 2
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        log(f"error: {e}")
        return 2
    if a.command == "check":
        return 0
    signal.signal(signal.SIGTERM, _terminated)
    out = Path(os.environ.get("SOAK_OUT", "target/soak")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return run(settings, out, Path(a.app), Path(a.loadgen),
                   Database(a.db_name, a.db_url, a.db_admin_url), sys.stdout)
    except CannotRun as e:
        log(f"error: {e}")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
