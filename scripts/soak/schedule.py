"""The soak's run: its own Redis and two release instances, loadgen's purchases and side
load, the mixed traffic, the memory sampler, and the faults at fixed points of the load
(SCHEDULE), one at a time, each written down as it goes (marks.py) for loadgen's report
and the judgement.

Each fault is a window of loadgen's report, from the fault until 2 s after the service
is back; a Redis outage has a second one, NAME.down, from its process's exit to its
start. The service is back:
  redis_shutdown, redis_kill   when both instances decide `limited` and `orders_read` in
                               Redis again (their `seckill_limiter_mode`), at once without
                               a side load
  pg_slow, pg_outage           when the fault is lifted
  instance_kill                when the restarted instance answers its readiness probe
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional, assert_never

from . import marks, prometheus
from .marks import Fault, FaultMark, OutageKind, OutageMark, Quiet, RssLabel, RssPoint, WindowMark
from .processes import (CannotRun, Instance, RedisServer, free_port, get, log, now_ms, post_json, rss_kb, stop,
                        until_ms, wait_for)
from .settings import Lockout, Run, Settings, arg

ADMIN_TOKEN = "soak-admin-token"


@dataclass(frozen=True)
class Slot:
    """A fault, started when `at` of the load's duration has passed."""

    at: float
    fault: Fault


# One fault at a time. The Redis kill comes more than a window of the side load's rules
# (60 s) after the `SHUTDOWN`'s end, so that no window is judged across both.
SCHEDULE = (
    Slot(0.22, Fault.REDIS_SHUTDOWN),
    Slot(0.30, Fault.PG_SLOW),
    Slot(0.50, Fault.PG_OUTAGE),
    Slot(0.62, Fault.REDIS_KILL),
    Slot(0.72, Fault.INSTANCE_KILL),
)
STEADY = (0.10, 0.20)  # the warm-up's end, and the window before the faults
AFTER = (0.80, 1.0)  # the window after them
# The tail of a fault's window after the service is back: a fixed length, part of the
# window, not a readiness wait.
TAIL_S = 2
# Wrong admin tokens from one new address, 1 s into the `SHUTDOWN`.
ADMIN_BURST = 40
BURST_ADDRESS = "10.250.0.1"
# The side load's policies, which keep limiting in process while Redis is away.
SIDE_POLICIES = ("limited", "orders_read")
# Resident memory and the load average, this often.
SAMPLE_EVERY_S = 5


@dataclass(frozen=True)
class Database:
    """The run's database on the private Postgres (scripts/lib.sh's `make_database`):
    `url` for the app, `admin_url` (the server's `postgres` database) to close it."""

    name: str
    url: str
    admin_url: str


def psql(url: str, sql: str) -> str:
    """Runs SQL, stopping at the first error; its output unaligned, without headers."""
    done = subprocess.run(["psql", url, "-qAt", "-v", "ON_ERROR_STOP=1"], input=sql, text=True,
                          capture_output=True)
    if done.returncode != 0:
        raise CannotRun(f"psql: {done.stderr.strip()}")
    return done.stdout


class Soak:
    def __init__(self, settings: Settings, out: Path, app: Path, loadgen: Path, db: Database) -> None:
        self.s = settings
        self.out = out
        self.loadgen_bin = loadgen
        self.db = db
        self.redis = RedisServer(free_port(), out / "redis")
        prefix = f"soak-{int(time.time())}"
        self.prefix = prefix
        env = {"DATABASE_URL": db.url, "REDIS_URL": self.redis.url, "SECKILL_REDIS_KEY_PREFIX": prefix,
               "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN, "SECKILL_WORKERS": "2", "SECKILL_CONFIG": "/nonexistent.toml"}
        self.instances = [Instance(i, free_port(), app, out, env) for i in (0, 1)]
        self.loadgen: Optional[subprocess.Popen[bytes]] = None
        self.mixed: Optional[subprocess.Popen[bytes]] = None
        self.sampling = threading.Event()
        self.sampler: Optional[threading.Thread] = None
        self.t0 = 0

    # --- set-up --------------------------------------------------------------------------

    def start(self) -> tuple[int, int]:
        """Redis, both instances, the two items (the soak's, the mixed traffic's);
        records the run (run.json) with the lockout the app enforces."""
        for pattern in ("*.txt", "*.json", "*.log", "*.md", "started", "pid-*"):
            for old in self.out.glob(pattern):
                old.unlink()
        shutil.rmtree(self.redis.dir, ignore_errors=True)
        self.redis.start()
        for instance in self.instances:
            instance.start()
        item = self.create_item("soak", self.s.stock)
        mix_item = self.create_item("soak-mixed", 10_000_000)
        Run(self.s, self.read_lockout()).write(self.out)
        return item, mix_item

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def create_item(self, name: str, stock: int) -> int:
        body = json.dumps({"name": name, "priceCents": 1, "stock": stock, "startsAt": "2020-01-01T00:00:00Z",
                           "endsAt": "2099-01-01T00:00:00Z"}).encode()
        try:
            status, answer = post_json(f"{self.instances[0].url}/admin/api/items", body, self.admin_headers())
            if status not in (200, 201):
                raise CannotRun(f"could not create the item {name}: {status} {answer[:200]!r}")
            item: int = json.loads(answer)["id"]
            return item
        except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
            raise CannotRun(f"could not create the item {name}: {e}") from None

    def read_lockout(self) -> Lockout:
        """The admin lockout as the app enforces it (its defaults: the soak passes no
        settings file), rather than a copy of `configuration/policies.rs`'s numbers."""
        try:
            status, body = get(f"{self.instances[0].url}/admin/api/policies/admin_auth", 5, self.admin_headers())
            if status != 200:
                raise CannotRun(f"could not read the admin_auth policy: {status} {body[:200]!r}")
            return Lockout.from_policy(json.loads(body))
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
            raise CannotRun(f"could not read the admin_auth policy: {e}") from None

    # --- memory ----------------------------------------------------------------------------

    def rss_point(self, label: RssLabel, i: int) -> None:
        instance = self.instances[i]
        marks.append(self.out / "rss-points.txt", RssPoint(label, i, instance.pid, rss_kb(instance.pid)).line())

    def sample(self) -> None:
        """Each instance's resident memory, and beside it the machine's load average:
        anything else on the two cores (a build) shows."""
        with (self.out / "rss.txt").open("a") as rss, (self.out / "loadavg.txt").open("a") as load:
            while True:
                for instance in self.instances:
                    rss.write(f"{now_ms()} {instance.index} {instance.pid} {rss_kb(instance.pid)}\n")
                rss.flush()
                load.write(f"{now_ms()} {Path('/proc/loadavg').read_text().split()[0]}\n")
                load.flush()
                if self.sampling.wait(SAMPLE_EVERY_S):
                    return

    # --- the load ----------------------------------------------------------------------------

    def start_load(self, item: int, mix_item: int) -> None:
        s, out = self.s, self.out
        (out / "rss-points.txt").write_text("")
        (out / "rss.txt").write_text("ms instance pid kB\n")
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()
        (out / "phases.txt").write_text("")
        (out / "outages.txt").write_text("")
        (out / "faults.txt").write_text("")
        side = []
        if s.side_load:
            side = ["--limited", "sliding_window=3", "--limited", "token_bucket=1", "--orders-read-users", "2",
                    "--side-rate", arg(s.side_rate), "--side-stagger", "20"]
        urls = [i.url for i in self.instances]
        log(f"loadgen: {arg(s.rate)} purchases/s from {s.users} users ({s.ips} addresses) for {s.seconds}s, "
            f"item {item} (stock {s.stock})")
        with (out / "loadgen.txt").open("w") as f:
            self.loadgen = subprocess.Popen(
                [str(self.loadgen_bin), "--quiet", "--target", urls[0], "--target", urls[1], "--item", str(item),
                 "--users", str(s.users), "--ips", str(s.ips), "--rate", arg(s.rate), "--duration", str(s.seconds),
                 "--max-in-flight", "4096", "--admin-token", ADMIN_TOKEN, "--database-url", self.db.url,
                 "--redis-url", self.redis.url, "--redis-prefix", self.prefix,
                 "--phases", str(out / "phases.txt"), "--redis-outages", str(out / "outages.txt"),
                 "--await-reconciliation", "120", *side,
                 "--sample-metric", "seckill_shedding", "--sample-metric", "seckill_orders_breaker_state",
                 "--sample-metric", 'seckill_limiter_mode{mode="local"',
                 "--json", str(out / "loadgen.json"), "--started-file", str(out / "started")],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if not wait_for("loadgen's logins", 300, (out / "started").exists, self.loadgen):
            self.show_loadgen()
            raise CannotRun("loadgen did not start")
        self.t0 = now_ms()
        if s.mixed_traffic:
            with (out / "mixed.txt").open("w") as f:
                self.mixed = subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve().parents[1] / "mixed-traffic.py"),
                     "--target", urls[0], "--target", urls[1], "--seconds", str(s.seconds), "--threads", "4",
                     "--rate", arg(s.mix_rate), "--item", str(mix_item), "--admin-token", ADMIN_TOKEN,
                     "--errors", str(out / "mixed-errors.txt")],
                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def show_loadgen(self) -> None:
        sys.stderr.write((self.out / "loadgen.txt").read_text(errors="replace"))

    def at(self, fraction: float) -> None:
        """Waits until that fraction of the load's duration has passed."""
        until_ms(self.t0 + round(self.s.seconds * 1000 * fraction))

    def window(self, name: str, from_ms: int, to_ms: int) -> None:
        marks.append(self.out / "phases.txt", WindowMark(name, from_ms, to_ms).line())

    def fault_done(self, fault: Fault, from_ms: int, off_ms: int, back_ms: int) -> None:
        """Writes down when the fault began, was lifted and the service was back; then its
        window, until TAIL_S after the service is back."""
        log(f"{fault.value}: back {back_ms - from_ms}ms after the fault began, {back_ms - off_ms}ms after it was lifted")
        marks.append(self.out / "faults.txt", FaultMark(fault, from_ms, off_ms, back_ms).line())
        time.sleep(TAIL_S)
        self.window(fault.value, from_ms, now_ms())

    def run(self) -> None:
        """The schedule, from loadgen's start to the end of the load."""
        self.at(STEADY[0])
        steady_from = now_ms()
        self.at(STEADY[1])
        self.window(Quiet.STEADY.value, steady_from, now_ms())
        self.rss_point(RssLabel.WARM, 0)
        self.rss_point(RssLabel.WARM, 1)
        for slot in SCHEDULE:
            self.at(slot.at)
            self.inject(slot.fault)
        self.at(AFTER[0])
        # Written now, to the load's planned end: loadgen reads the windows as soon as its
        # load ends, before a line written at the end could reach it (bash's schedule
        # wrote it then, and the window never made the report).
        self.window(Quiet.AFTER.value, now_ms(), self.t0 + round(self.s.seconds * 1000 * AFTER[1]))
        self.at(AFTER[1])
        self.rss_point(RssLabel.END, 0)
        self.rss_point(RssLabel.END, 1)

    def inject(self, fault: Fault) -> None:
        match fault:
            case Fault.REDIS_SHUTDOWN:
                self.redis_shutdown()
            case Fault.PG_SLOW:
                self.pg_slow()
            case Fault.PG_OUTAGE:
                self.pg_outage()
            case Fault.REDIS_KILL:
                self.redis_kill()
            case Fault.INSTANCE_KILL:
                self.instance_kill()
            case _:
                assert_never(fault)

    # --- the faults --------------------------------------------------------------------------

    def redis_shutdown(self) -> None:
        s = self.s
        log(f"redis_shutdown: SHUTDOWN (append-only file fsynced), {s.redis_outage}s down, then the same server again")
        from_ms = now_ms()
        self.redis.shutdown()
        down = now_ms()
        time.sleep(1)
        burst = self.admin_burst(ADMIN_BURST)
        log("redis_shutdown: wrong admin tokens from one address: " + "".join(f"{k} {v} " for k, v in burst))
        self.redis_outage(OutageKind.KEPT, Fault.REDIS_SHUTDOWN, from_ms, down, s.redis_outage)

    def redis_kill(self) -> None:
        log(f"redis_kill: SIGKILL of Redis, {self.s.redis_kill}s down, then started again on its files")
        from_ms = now_ms()
        self.redis.kill()
        self.redis_outage(OutageKind.LOST, Fault.REDIS_KILL, from_ms, now_ms(), self.s.redis_kill)

    def redis_outage(self, kind: OutageKind, fault: Fault, from_ms: int, down: int, length_s: int) -> None:
        """Redis is down since `down`: started again once the outage has lasted its
        length, then waited for until both instances decide in it again (every side
        policy is asked several times a second). Written down for loadgen's checks and
        as a fault."""
        until_ms(down + length_s * 1000)
        up = now_ms()
        self.redis.start()
        if self.s.side_load and not wait_for(f"{fault.value}: both instances deciding in Redis", 30,
                                             self.both_deciding_in_redis):
            log(f"{fault.value}: the instances did not both decide in Redis within 30 s")
        self.fault_done(fault, from_ms, up, now_ms())
        marks.append(self.out / "outages.txt", OutageMark(kind, from_ms, down, up, now_ms()).line())
        self.window(marks.down_window(fault), down, up)  # a window of its own: Redis's process gone

    def both_deciding_in_redis(self) -> bool:
        for instance in self.instances:
            status, body = get(f"{instance.url}/metrics", 1)
            if status != 200 or not prometheus.deciding_in_redis(body.decode(errors="replace"), SIDE_POLICIES):
                return False
        return True

    def admin_burst(self, count: int) -> list[tuple[str, int]]:
        """Wrong admin tokens from one new address, alternating instances; the answers by
        status in admin-burst.txt (401: compared and refused; 429: locked out; 000: no
        answer within 2 s)."""
        statuses: dict[str, int] = {}
        for i in range(count):
            try:
                status, _ = get(f"{self.instances[i % 2].url}/admin/api/me", 2,
                                {"Authorization": f"Bearer wrong-soak-{i}", "X-Forwarded-For": BURST_ADDRESS})
                key = f"{status:03d}"
            except (OSError, http.client.HTTPException):
                key = "000"
            statuses[key] = statuses.get(key, 0) + 1
        burst = sorted(statuses.items())
        (self.out / "admin-burst.txt").write_text("".join(f"{k} {v}\n" for k, v in burst))
        return burst

    def pg_slow(self) -> None:
        s = self.s
        log(f"pg_slow: every insert into orders sleeps {arg(s.pg_slow_ms)}ms for {s.pg_slow}s")
        from_ms = now_ms()
        psql(self.db.url, f"""
CREATE FUNCTION soak_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN PERFORM pg_sleep({arg(s.pg_slow_ms)} / 1000.0); RETURN NULL; END $$;
CREATE TRIGGER soak_slow_commit BEFORE INSERT ON orders
  FOR EACH STATEMENT EXECUTE FUNCTION soak_slow_commit();
""")
        until_ms(from_ms + s.pg_slow * 1000)
        psql(self.db.url, "DROP TRIGGER soak_slow_commit ON orders; DROP FUNCTION soak_slow_commit()")
        off = now_ms()
        self.fault_done(Fault.PG_SLOW, from_ms, off, off)

    def pg_outage(self) -> None:
        s, db = self.s, self.db
        log(f"pg_outage: database {db.name} refuses connections, the app's sessions terminated, for {s.pg_outage}s")
        from_ms = now_ms()
        psql(db.admin_url, f"ALTER DATABASE {db.name} ALLOW_CONNECTIONS false")
        terminated = psql(db.admin_url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                        f"WHERE datname = '{db.name}'").strip()
        (self.out / "terminated.txt").write_text(terminated + "\n")
        log(f"pg_outage: {terminated} sessions terminated")
        until_ms(from_ms + s.pg_outage * 1000)
        psql(db.admin_url, f"ALTER DATABASE {db.name} ALLOW_CONNECTIONS true")
        off = now_ms()
        self.fault_done(Fault.PG_OUTAGE, from_ms, off, off)

    def instance_kill(self) -> None:
        victim = self.instances[1]
        self.rss_point(RssLabel.BEFORE_KILL, 1)
        log(f"instance_kill: SIGKILL instance 1 (pid {victim.pid}), then start it again on port {victim.port}")
        from_ms = now_ms()
        victim.kill()
        off = now_ms()
        victim.start("app-1-restarted.log")
        self.fault_done(Fault.INSTANCE_KILL, from_ms, off, now_ms())
        self.rss_point(RssLabel.RESTARTED, 1)

    # --- the end -------------------------------------------------------------------------------

    def finish(self, item: int) -> int:
        """Waits for loadgen (its ledger and store checks) and the mixed traffic; loadgen's
        exit code (0: every check passed, 1: one failed)."""
        log("load over; loadgen waits for the reconciler, then checks the ledger and the stores")
        assert self.loadgen is not None
        rc = self.loadgen.wait()
        self.loadgen = None
        if self.mixed is not None:
            self.mixed.wait()
            self.mixed = None
        if rc not in (0, 1):
            self.show_loadgen()
            raise CannotRun("loadgen could not run")
        # When the orders were written, per second: read beside the fault windows.
        try:
            per_second = psql(self.db.url, "SELECT extract(epoch FROM date_trunc('second', created_at))::bigint, "
                                           f"count(*) FROM orders WHERE item_id = {item} GROUP BY 1 ORDER BY 1")
            (self.out / "orders-per-second.txt").write_text(per_second)
        except CannotRun as e:
            log(f"orders per second: {e}")
        return rc

    def stop(self) -> None:
        """Stops everything the soak started, whatever state it is in."""
        self.sampling.set()
        for process in (self.mixed, self.loadgen):
            stop(process)
        for instance in self.instances:
            stop(instance.process)
        stop(self.redis.process)
        if self.sampler is not None:
            self.sampler.join()


def run(settings: Settings, out: Path, app: Path, loadgen: Path, db: Database, summary: IO[str]) -> int:
    """The soak: 0 when every check and claim held, 1 when one failed; raises CannotRun."""
    from .summary import write

    soak = Soak(settings, out, app, loadgen, db)
    try:
        item, mix_item = soak.start()
        soak.start_load(item, mix_item)
        soak.run()
        rc = soak.finish(item)
    finally:
        soak.stop()
    with (out / "summary.md").open("w") as f:
        passed = write(out, f)
    summary.write((out / "summary.md").read_text())
    return 0 if rc == 0 and passed else 1
