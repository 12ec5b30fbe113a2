"""Schemathesis hooks: valid credentials for every operation that needs them.

Shopper routes get a fresh token from the development login (`POST /api/session`) of
the instance under test; admin routes get the operator token the script started the
instance with (`SECKILL_ADMIN_TOKEN`). Schemathesis still sends requests without them
in its negative cases, so the 401 paths are exercised too.
"""

import os
import time

import requests
import schemathesis
from hypothesis import strategies as st

BASE_URL = os.environ["SECKILL_URL"]
ADMIN_TOKEN = os.environ["SECKILL_ADMIN_TOKEN"]


def _bearer(case, token):
    case.headers = case.headers or {}
    case.headers["Authorization"] = f"Bearer {token}"


@schemathesis.auth(refresh_interval=60).apply_to(path_regex="^/admin/api/")
class OperatorToken:
    def get(self, case, context):
        return ADMIN_TOKEN

    def set(self, case, data, context):
        _bearer(case, data)


@schemathesis.auth(refresh_interval=60).apply_to(
    path_regex="^/(seckill|api/me|api/orders/mine|api/orders/[^/]+/(pay|cancel))$"
)
class ShopperToken:
    # One shopper a minute for every shopper route (so the orders one route places are
    # the ones the payment routes can reach), and a new one each minute so one user's
    # purchase quota (3 a minute) does not turn the rest of the run into 429s.
    def get(self, case, context):
        user_id = 1_000 + int(time.time() // 60)
        response = requests.post(f"{BASE_URL}/api/session", json={"userId": user_id}, timeout=5)
        response.raise_for_status()
        return response.json()["token"]

    def set(self, case, data, context):
        _bearer(case, data)


# Each call comes from its own client address (198.18.0.0/15, the benchmarking range;
# the instance trusts X-Forwarded-For from loopback), so that the per-IP limits and the
# admin sign-in lockout, which negative cases with broken tokens trip, keep answering
# 429 only to the calls that earned it rather than to the rest of the run.
_calls = 0
# Items the script created before the run: half the purchases aim at one of them, so the
# sale's own answers (200, SOLD_OUT, ALREADY_PURCHASED, …) are reached, not only 404.
_ITEMS = [int(i) for i in os.environ.get("SECKILL_ITEM_IDS", "").split(",") if i]


# Orders the run's purchases placed: half the payments and cancellations aim at the
# latest, so the life cycle's own answers (200, 409 ORDER_STATE) are reached, not only 404.
_orders = []


@schemathesis.hook
def before_call(context, case, kwargs):
    global _calls
    _calls += 1
    case.headers = case.headers or {}
    case.headers.setdefault("X-Forwarded-For", f"198.18.{_calls // 256 % 256}.{_calls % 256}")
    if case.path == "/seckill" and _ITEMS and _calls % 2 == 0 and isinstance(case.body, dict):
        case.body["itemId"] = _ITEMS[_calls % len(_ITEMS)]
    if case.path.startswith("/api/orders/{id}/") and _orders and _calls % 2 == 0:
        case.path_parameters = {**(case.path_parameters or {}), "id": _orders[-1]}


@schemathesis.hook
def after_call(context, case, response):
    if case.path == "/seckill" and response.status_code == 200:
        try:
            _orders.append(response.json()["orderId"])
        except (ValueError, KeyError, TypeError):
            pass


# Values the default strategies all but never draw, and which reach the stores:
# - control characters, NUL first (Postgres refuses it in `text`): positive-mode strings
#   are drawn from all of Unicode with a strong bias towards short ASCII, so one NUL in
#   a hundred examples per operation is unlikely, and in a path segment or a query value
#   less likely still;
# - instants outside what Postgres stores or a sale needs: the `date-time` strategy
#   builds its dates from Python's `datetime.date`, years 1 to 9999, so it never sends a
#   negative year or one past 9999, both of which chrono parses.
# One generated string in four (in bodies, queries and path parameters) is replaced by
# one of these, drawn by Hypothesis, so the run stays reproducible from its seed.
_HOSTILE_TEXT = ["\x00", "a\x00b", "\x00" * 3, "\x1b[2J", "tab\there", "line\nbreak", "\x7f", "\u202e"]
_HOSTILE_INSTANTS = [
    "-5000-01-01T00:00:00Z",
    "-4714-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "+10000-01-01T00:00:00Z",
    "+262143-12-31T23:59:59Z",
]
_HOSTILE = _HOSTILE_TEXT + _HOSTILE_INSTANTS


def _string_leaves(value, path=()):
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _string_leaves(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_leaves(item, path + (index,))


def _replaced(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)
    return copy


def _sometimes_hostile(value):
    leaves = list(_string_leaves(value))
    if not leaves:
        return st.just(value)
    hostile = st.tuples(st.sampled_from(leaves), st.sampled_from(_HOSTILE)).map(
        lambda leaf: _replaced(value, *leaf)
    )
    return st.one_of(st.just(value), st.just(value), st.just(value), hostile)


@schemathesis.hook
def flatmap_body(context, body):
    return _sometimes_hostile(body)


@schemathesis.hook
def flatmap_query(context, query):
    return _sometimes_hostile(query)


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    return _sometimes_hostile(path_parameters)
