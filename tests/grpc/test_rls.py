"""Envoy's rate-limit API as a client that is not our code sees it: Python grpcio, with
stubs generated from the same .proto files our server is built from
(scripts/grpc-clients.sh starts the app and runs this).

Environment: SECKILL_URL (the app), SECKILL_RLS (host:port of its gRPC listener),
SECKILL_ADMIN_TOKEN.
"""
import json
import os
import unittest
import urllib.request
import uuid

import grpc
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

URL = os.environ["SECKILL_URL"]
RLS = os.environ["SECKILL_RLS"]
TOKEN = os.environ["SECKILL_ADMIN_TOKEN"]
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT


def put_domain(document):
    """Stores `document` through the admin API (the body is the YAML file's JSON twin)."""
    request = urllib.request.Request(
        f"{URL}/admin/api/rls/domains/{document['domain']}",
        data=json.dumps(document).encode(),
        method="PUT",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 201), response.status


def limit(key, requests, shadow=False):
    node = {"key": key, "rate_limit": {"unit": "minute", "requests_per_unit": requests}}
    if shadow:
        node["shadow_mode"] = True
    return node


def descriptor(hits=None, **entries):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries.items()]
    )
    if hits is not None:
        d.hits_addend.value = hits
    return d


class RateLimitService(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # A domain of its own per run: the counts of an earlier run cannot leak in.
        cls.domain = "py_" + uuid.uuid4().hex[:12]
        put_domain(
            {
                "domain": cls.domain,
                "descriptors": [
                    limit("a", 5),
                    limit("b", 5),
                    limit("c", 1),
                    limit("s", 1, shadow=True),
                    limit("w", 5),
                    limit("v", 5),
                ],
            }
        )
        cls.channel = grpc.insecure_channel(RLS)
        cls.stub = rls_pb2_grpc.RateLimitServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def ask(self, *descriptors, hits=0, domain=None):
        request = rls_pb2.RateLimitRequest(
            domain=domain or self.domain, descriptors=list(descriptors), hits_addend=hits
        )
        return self.stub.ShouldRateLimit(request, timeout=10)

    def test_three_descriptors_are_decided_all_or_nothing(self):
        first = self.ask(descriptor(a="x"), descriptor(b="x"), descriptor(c="x"))
        self.assertEqual(first.overall_code, OK)
        self.assertEqual([s.limit_remaining for s in first.statuses], [4, 4, 0])
        refused = self.ask(descriptor(a="x"), descriptor(b="x"), descriptor(c="x"))
        self.assertEqual(refused.overall_code, OVER_LIMIT)
        self.assertEqual([s.code for s in refused.statuses], [OK, OK, OVER_LIMIT])
        headers = {h.key.lower(): h.value for h in refused.response_headers_to_add}
        self.assertIn("retry-after", headers)
        # The refused request counted nothing for a and b.
        after = self.ask(descriptor(a="x"), descriptor(b="x"))
        self.assertEqual(after.overall_code, OK)
        self.assertEqual([s.limit_remaining for s in after.statuses], [3, 3])
        self.assertEqual(after.statuses[0].current_limit.requests_per_unit, 5)

    def test_a_refused_cost_of_five_leaves_room_for_a_cost_of_one(self):
        self.assertEqual(self.ask(descriptor(w="y")).statuses[0].limit_remaining, 4)
        refused = self.ask(descriptor(w="y"), hits=5)
        self.assertEqual(refused.overall_code, OVER_LIMIT)
        admitted = self.ask(descriptor(w="y"), hits=1)
        self.assertEqual(admitted.overall_code, OK)
        self.assertEqual(admitted.statuses[0].limit_remaining, 3)
        # The descriptor's own hits_addend overrides the request's.
        own = self.ask(descriptor(hits=3, v="z"), hits=1)
        self.assertEqual((own.overall_code, own.statuses[0].limit_remaining), (OK, 2))
        over = self.ask(descriptor(hits=3, v="z"), hits=1)
        self.assertEqual(over.overall_code, OVER_LIMIT)

    def test_an_unknown_domain_or_descriptor_has_no_limit(self):
        unknown = self.ask(descriptor(a="x"), domain="no_such_domain")
        self.assertEqual(unknown.overall_code, OK)
        self.assertFalse(unknown.statuses[0].HasField("current_limit"))
        stray = self.ask(descriptor(zzz="1"))
        self.assertEqual(stray.overall_code, OK)
        self.assertFalse(stray.statuses[0].HasField("current_limit"))

    def test_a_shadow_rule_over_its_limit_still_admits(self):
        codes = [self.ask(descriptor(s="q")).overall_code for _ in range(3)]
        self.assertEqual(codes, [OK, OK, OK])

    def test_oversized_and_too_many_descriptors_are_invalid_arguments(self):
        for request in (
            [descriptor(a="x" * 257)],
            [descriptor(a=str(i)) for i in range(17)],
        ):
            with self.assertRaises(grpc.RpcError) as refused:
                self.ask(*request)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_a_malformed_message_is_refused_and_the_server_answers_on(self):
        raw = self.channel.unary_unary(METHOD)  # bytes in, bytes out
        with self.assertRaises(grpc.RpcError) as refused:
            raw(b"\x0a\xff\xff\xff\xff\x0f", timeout=10)
        self.assertIn(
            refused.exception.code(),
            (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT),
        )
        self.assertEqual(self.ask(descriptor(zzz="2")).overall_code, OK)


if __name__ == "__main__":
    unittest.main(verbosity=2)
