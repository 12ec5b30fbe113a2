#!/usr/bin/env python3
"""Mixed, high-cardinality traffic for memory soaks (docs/soak.md, "Memory").

Hours of real traffic are compressed into minutes by making nearly every request new
to the app: purchases by ever new users (tokens minted here with the local JWT secret)
from ever new addresses with ever new idempotency keys, `/api/limited` with new client
ids under both algorithms, admin reads with varying filters and windows, wrong admin
tokens, unknown paths, item listings, metrics scrapes. Loopback targets only.

usage: mixed-traffic.py --target URL [--target URL] --seconds N [--threads 8]
       [--item ID] [--rate R (requests/s over all threads, 0 = as fast as possible)]
       [--close P (this share of requests ends its connection: browsers and clients
       behind proxies come and go; the rest reuse theirs)] [--admin-token T]
       [--errors FILE (each 5xx and unanswered request: UNIX_MS KIND STATUS CODE
       LATENCY_MS, so a soak can set them beside its fault windows)]
Prints one line of counts by status when done, then one of the 5xx and unanswered
requests by kind.
"""
import argparse
import base64
import hashlib
import hmac
import http.client
import json
import random
import threading
import time
import urllib.parse
import uuid

# The local environment's JWT secret (src/configuration/mod.rs, LOCAL_JWT_SECRET): the
# app refuses to start with it anywhere but locally.
SECRET = b"local-development-jwt-secret-change-me-0000"
ADMIN = "dev-admin-token"  # --admin-token


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(user: int) -> str:
    now = int(time.time())
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps({"sub": str(user), "iat": now, "exp": now + 3600}).encode())
    sig = hmac.new(SECRET, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def ip() -> str:
    return f"172.{random.randrange(16, 32)}.{random.randrange(256)}.{random.randrange(1, 255)}"


def request(rng: random.Random, item: int):
    """One request: (kind, method, path, headers, body)."""
    kind = rng.random()
    xff = {"X-Forwarded-For": ip()}
    if kind < 0.40:
        # Users and addresses apart from loadgen's (ids from 1, 10.100-199.x.x), so a
        # soak's ledger is not disturbed by this traffic's purchases.
        user = rng.randrange(10**7, 2**31 - 1)
        headers = {"Authorization": f"Bearer {token(user)}", "Content-Type": "application/json",
                   "Idempotency-Key": uuid.uuid4().hex, **xff}
        return "purchase", "POST", "/seckill", headers, json.dumps({"itemId": item})
    if kind < 0.55:
        algo = rng.choice(["sliding_window", "token_bucket"])
        return "limited", "GET", f"/api/limited?policy={algo}", {"X-Client-Id": uuid.uuid4().hex, **xff}, None
    if kind < 0.65:
        path = rng.choice([
            f"/admin/api/orders?page={rng.randrange(1, 50)}&perPage={rng.randrange(1, 100)}&user={rng.randrange(1, 10**6)}",
            f"/admin/api/orders?item={item}&from=2020-01-01T00:00:00Z",
            f"/admin/api/stats?window={rng.randrange(1, 3600)}",
            "/admin/api/policies", "/admin/api/policies/seckill", "/admin/api/audit?policy=seckill",
        ])
        return f"admin_read:{path.split('?')[0]}", "GET", path, {"Authorization": f"Bearer {ADMIN}", **xff}, None
    if kind < 0.70:
        return "admin_wrong_token", "GET", "/admin/api/me", {"Authorization": f"Bearer wrong-{uuid.uuid4().hex}", **xff}, None
    if kind < 0.80:
        return "unknown_path", "GET", f"/{uuid.uuid4().hex}/{rng.randrange(10**9)}?q={uuid.uuid4().hex}", xff, None
    if kind < 0.85:
        return "orders_read", "GET", "/api/orders/mine", {"Authorization": f"Bearer {token(rng.randrange(10**7, 2**31 - 1))}", **xff}, None
    if kind < 0.93:
        return "items", "GET", "/api/items", xff, None
    if kind < 0.97:
        return "static", "GET", rng.choice(["/", "/admin/", "/index.html", "/app.js"]), xff, None
    return "metrics", "GET", "/metrics", {}, None


def worker(targets, deadline, item, interval, close, counts, failures, lock, seed):
    rng = random.Random(seed)
    conns = {}
    local = {}
    failed = []
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        if interval:
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        target = rng.choice(targets)
        kind, method, path, headers, body = request(rng, item)
        if rng.random() < close:
            headers["Connection"] = "close"
        code = "-"
        sent = time.time()
        try:
            conn = conns.get(target)
            if conn is None:
                u = urllib.parse.urlparse(target)
                conn = conns[target] = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            status = str(response.status)
            if response.status >= 500:
                try:
                    code = json.loads(answer).get("code") or "-"
                except (ValueError, AttributeError):
                    pass
            if headers.get("Connection") == "close" or response.getheader("Connection", "").lower() == "close":
                conn.close()
                conns.pop(target, None)
        except (OSError, http.client.HTTPException):
            status = "error"
            conns.pop(target, None)
        local[status] = local.get(status, 0) + 1
        if status == "error" or int(status) >= 500:
            failed.append((int(sent * 1000), kind, status, code, (time.time() - sent) * 1000))
    with lock:
        for k, v in local.items():
            counts[k] = counts.get(k, 0) + v
        failures.extend(failed)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", action="append", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--item", type=int, default=1)
    p.add_argument("--rate", type=float, default=0)
    p.add_argument("--admin-token", default=ADMIN)
    p.add_argument("--close", type=float, default=0.0)
    p.add_argument("--errors")
    a = p.parse_args()
    globals()["ADMIN"] = a.admin_token
    for t in a.target:
        host = urllib.parse.urlparse(t).hostname
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit(f"loopback targets only, not {t}")
    deadline = time.monotonic() + a.seconds
    interval = a.threads / a.rate if a.rate > 0 else 0
    counts, failures, lock = {}, [], threading.Lock()
    threads = [threading.Thread(target=worker,
                                args=(a.target, deadline, a.item, interval, a.close, counts, failures, lock, i))
               for i in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    by_kind = {}
    for _, kind, status, code, _ in failures:
        key = f"{kind}:{status}:{code}"
        by_kind[key] = by_kind.get(key, 0) + 1
    print("5xx and unanswered: " + (" ".join(f"{k}={v}" for k, v in sorted(by_kind.items())) or "none"))
    if a.errors:
        with open(a.errors, "w") as f:
            for ms, kind, status, code, latency in sorted(failures):
                f.write(f"{ms} {kind} {status} {code} {latency:.1f}\n")


if __name__ == "__main__":
    main()
