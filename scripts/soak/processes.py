"""The soak's own processes: its redis-server and the app's instances, started the way
scripts/lib.sh's `start_redis_server` and `start_app` start them (the soak stops and
starts them again mid-run, so it is their parent), stopped the way `stop_process` stops
them; and polling with a deadline, never a fixed sleep for readiness.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


SHARED_REDIS = ("SECKILL_REDIS_CLUSTER_NODES", "SECKILL_REDIS_SENTINELS", "SECKILL_REDIS_SENTINEL_MASTER")


class CannotRun(Exception):
    """The soak could not run (exit 2); the message says why."""


def log(message: str) -> None:
    print(f"soak: {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def until_ms(instant: int) -> None:
    """Waits until that instant of the schedule."""
    while (left := instant - now_ms()) > 0:
        time.sleep(left / 1000)


def wait_for(what: str, deadline_s: float, test: Callable[[], bool],
             process: Optional[subprocess.Popen[bytes]] = None) -> bool:
    """Runs `test` every 0.2 s until it passes (True); gives up, saying why on stderr,
    after `deadline_s` or as soon as `process` has exited (False)."""
    end = time.monotonic() + deadline_s
    while not _passes(test):
        if process is not None and process.poll() is not None:
            log(f"{what}: the process exited")
            return False
        if time.monotonic() >= end:
            log(f"{what}: not within {deadline_s:g}s")
            return False
        time.sleep(0.2)
    return True


def _passes(test: Callable[[], bool]) -> bool:
    try:
        return test()
    except (OSError, http.client.HTTPException):
        return False


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, picked by the OS."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_in_use(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def stop(process: Optional[subprocess.Popen[bytes]]) -> None:
    """SIGTERM first, so the app drains in-flight requests; SIGKILL only when that takes
    longer than 15 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL, and reaped: returns once the process is gone."""
    process.send_signal(signal.SIGKILL)
    process.wait()


def rss_kb(pid: int) -> int:
    """The process's resident memory (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def get(url: str, timeout_s: float, headers: Optional[dict[str, str]] = None) -> tuple[int, bytes]:
    """One GET on a connection of its own: the status and the body."""
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post_json(url: str, body: bytes, headers: dict[str, str], timeout_s: float = 10) -> tuple[int, bytes]:
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _split(url: str) -> tuple[str, int, str]:
    rest = url.removeprefix("http://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return host, int(port or 80), "/" + path


def redis_command(port: int, *words: str, timeout_s: float = 1) -> bytes:
    """One command to the Redis on 127.0.0.1:PORT, its reply's first line ("" when the
    server closed the connection without one, as `SHUTDOWN` does)."""
    request = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(request.encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(512)
            if not chunk:
                break
            reply += chunk
        return reply.strip()


@dataclass
class RedisServer:
    """The soak's redis-server: its own port, append-only (`appendfsync everysec`), data
    and log in `dir`. Shut down and killed by the schedule, so it can never be a shared
    one."""

    port: int
    dir: Path
    process: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        """PONG, not LOADING."""
        return redis_command(self.port, "PING") == b"+PONG"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--save", "", "--logfile", str(self.dir / "redis.log"),
             "--appendonly", "yes", "--appendfsync", "everysec"],
            stdin=subprocess.DEVNULL)
        if not wait_for(f"redis on {self.port}", 30, self.answers, self.process):
            log_tail(self.dir / "redis.log")
            raise CannotRun(f"redis did not start (see {self.dir}/redis.log)")

    def shutdown(self) -> None:
        """`SHUTDOWN` (the server fsyncs its append-only file first); returns once its
        process has exited."""
        try:
            redis_command(self.port, "SHUTDOWN", timeout_s=30)
        except OSError:
            pass
        if self.process is not None:
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                raise CannotRun(f"redis on {self.port} did not shut down within 60 s") from None

    def kill(self) -> None:
        if self.process is not None:
            kill(self.process)


@dataclass
class Instance:
    """One of the app's release instances, on a port of its own that it keeps across a
    restart; its pid also in $SOAK_OUT/pid-INDEX."""

    index: int
    port: int
    binary: Path
    out: Path
    env: dict[str, str]
    process: Optional[subprocess.Popen[bytes]] = None
    log: Optional[Path] = field(default=None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    def ready(self) -> bool:
        status, _ = get(f"{self.url}{os.environ.get('READY_PATH', '/health/ready')}", 2)
        return status == 200

    def start(self, log_name: Optional[str] = None) -> None:
        """As a local-environment instance on 127.0.0.1, ready when its readiness probe
        answers 200 (READY_DEADLINE, 60 s)."""
        if port_in_use(self.port):
            raise CannotRun(f"port {self.port} is already in use")
        self.log = self.out / (log_name or f"app-{self.index}.log")
        # The soak's Redis is one server of its own: never a topology the caller's
        # environment names (the shared cluster or Sentinel set).
        inherited = {k: v for k, v in os.environ.items() if k not in SHARED_REDIS}
        env = {**inherited, "SECKILL_ENVIRONMENT": "local", "SECKILL_HOST": "127.0.0.1",
               "SECKILL_PORT": str(self.port), "SECKILL_PROBE_PORT": os.environ.get("SECKILL_PROBE_PORT", "0"),
               **self.env}
        with self.log.open("w") as f:
            self.process = subprocess.Popen([str(self.binary)], env=env, stdout=f, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        log(f"app pid {self.pid} on {self.url}")
        (self.out / f"pid-{self.index}").write_text(f"{self.pid}\n")
        deadline = float(os.environ.get("READY_DEADLINE", "60"))
        if not wait_for(f"{self.url}/health/ready", deadline, self.ready, self.process):
            log_tail(self.log)
            stop(self.process)
            raise CannotRun(f"instance {self.index} did not become ready (see {self.log})")
        log(f"app ready on {self.url}")

    def kill(self) -> None:
        """SIGKILL; its pid is still the one sampled until it is started again."""
        if self.process is not None:
            kill(self.process)


def log_tail(path: Path, lines: int = 20) -> None:
    try:
        for line in path.read_text(errors="replace").splitlines()[-lines:]:
            print(line, file=sys.stderr)
    except OSError:
        pass
