"""A corpus of hostile requests (wrong types, huge and tiny numbers, unicode and control
characters, 1 MB bodies, broken JSON, path traversal and over-long names in paths and filters,
bad headers) against every API endpoint, as a member, an admin and nobody: never a 5xx, and every
answer under /api/ is JSON. Deterministic: the corpus is built, not sampled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone

from tests.support.tokens import api_key

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}]
teams: [{name: a}]
quotas: [{team: a, pool: gpus, guaranteed: 4, limit: 8}]
priority_classes: [{name: default, value: 0}]
sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}]
"""

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**63) - 1, 10**100, 1.5, -0.0, 1e308, "", " ", "0", "-1",
    "NaN", "Infinity", "1e999", "x" * 10_000, "🚀" * 100, "\u0000", "\u202e", "\ud7ff", "a\nb",
    "../../../../etc/passwd", "..\\..\\windows\\win.ini", "%2e%2e%2f%2e%2e%2f", "' OR 1=1 --",
    "<script>alert(1)</script>", "${jndi:ldap://x}", [], [1, 2], {}, {"$gt": ""}, [[[[[]]]]],
]
NAMES = ["..", "../etc/passwd", "%2e%2e", "a" * 5000, "🚀", "null", "0", "-1", "a b", "a%00b",
         "99999999999999999999999", "00000000-0000-0000-0000-000000000000", "not-a-uuid", ".json"]
QUERY_VALUES = ["", "-1", "0", "abc", "1e999", "9" * 40, "🚀", "../etc", "a" * 3000, "2026-13-45T99:99",
                "true", "[]", "\u0000"]


@dataclass(frozen=True)
class Hostile:
    method: str
    path: str
    body: bytes | None = None
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _bodies(template: dict[str, Any]) -> Iterator[bytes]:
    """Each field of `template` replaced by each hostile value, then whole-body oddities."""
    for key in template:
        for value in HOSTILE_VALUES:
            yield _json({**template, key: value})
    yield from (b"", b"{", b"null", b"[]", b'"a"', b"1", b'{"gpus": 1, "gpus": "x"}',
                b"\xff\xfe\x00", _json({"x": "y" * 1_000_000}), b"[" * 5000 + b"]" * 5000,
                _json({**template, "unknown": 1}))


def corpus(lease: str, reservation: str, gpu: str, host: str, quota: str) -> Iterator[Hostile]:
    writes: dict[str, dict[str, Any]] = {
        "/api/v1/leases/": {"pool": "gpus", "gpus": 1, "ttl_seconds": 60, "model": "", "team": "a",
                            "priority_class": "default", "same_host": True, "min_memory_mb": 0,
                            "binding": {"kind": "process", "command": ["true"]}},
        "/api/v1/reservations/": {"pool": "gpus", "team": "a", "gpus": 1, "model": "",
                                  "start": "2030-01-01T00:00:00Z", "end": "2030-01-01T01:00:00Z"},
        f"/api/v1/gpus/{gpu}/move/": {"pool": "gpus"},
        f"/api/v1/leases/{lease}/renew/": {"ttl_seconds": 60},
    }
    for path, template in writes.items():
        for body in _bodies(template):
            yield Hostile("POST", path, body)
    for body in _bodies({"guaranteed": 2, "limit": 8, "lending_limit": 1}):
        yield Hostile("PATCH", f"/api/v1/quotas/{quota}/", body)
    for body in (b"", _json({}), _json({"x": "y" * 1_000_000})):
        for path in (f"/api/v1/leases/{lease}/release/", f"/api/v1/reservations/{reservation}/cancel/",
                     f"/api/v1/hosts/{host}/cordon/", f"/api/v1/hosts/{host}/uncordon/"):
            yield Hostile("POST", path, body)
    for kind in ("text/plain", "application/xml", "multipart/form-data; boundary=x",
                 "application/x-www-form-urlencoded", "application/json; charset=latin-1"):
        yield Hostile("POST", "/api/v1/leases/", b"pool=gpus&gpus=1", kind)
    yield from _paths()
    yield from _queries()
    for key in ("k" * 10_000, "🚀", "\u0000", ""):
        yield Hostile("POST", "/api/v1/leases/", _json({"pool": "gpus", "gpus": 1}),
                      headers=(("HTTP_IDEMPOTENCY_KEY", key),))


def _paths() -> Iterator[Hostile]:
    for name in NAMES:
        part = quote(name, safe="")
        for base in ("pools", "teams", "gpus", "leases", "reservations", "hosts", "quotas",
                     "priority-classes", "audit-events"):
            yield Hostile("GET", f"/api/v1/{base}/{part}/")
        for action in ("leases/{}/release/", "leases/{}/renew/", "reservations/{}/cancel/",
                       "hosts/{}/drain/", "gpus/{}/move/"):
            yield Hostile("POST", "/api/v1/" + action.format(part), _json({"pool": "gpus"}))
        yield Hostile("DELETE", f"/api/v1/leases/{part}/")


def _queries() -> Iterator[Hostile]:
    filters = {"leases": ["state", "pool", "team", "limit", "offset", "ordering"],
               "gpus": ["pool", "host", "state", "model", "limit"],
               "hosts": ["state", "source", "kind", "limit"],
               "audit-events": ["since", "until", "action", "lease", "limit"],
               "reservations": ["pool", "team", "state", "since", "until"],
               "pools": ["limit", "offset"], "quotas": ["team", "pool"]}
    for base, keys in filters.items():
        for key in keys:
            for value in QUERY_VALUES:
                yield Hostile("GET", f"/api/v1/{base}/?{key}={quote(value, safe='')}")


def _send(client: Client, req: Hostile, key: str | None) -> Any:
    extra: dict[str, Any] = dict(req.headers)
    if key is not None:
        extra["HTTP_AUTHORIZATION"] = f"Token {key}"
    if req.method == "GET":
        return client.get(req.path, **extra)
    send = getattr(client, req.method.lower())
    return send(req.path, data=req.body or b"", content_type=req.content_type, **extra)


def test_no_hostile_request_gets_a_5xx_or_a_non_json_answer(apply_yaml: Any, make_user: Any) -> None:
    from allocation.models import Lease, Quota
    from allocation.services.reservations import reservation_create
    from inventory.models import Gpu, Host

    apply_yaml(FLEET)
    member, admin = make_user("ann", teams=("a",)), make_user("root", admin=True)
    client = Client(raise_request_exception=False)
    made = client.post("/api/v1/leases/", _json({"pool": "gpus", "gpus": 1}), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Token {api_key(member)}")
    assert made.status_code == 201
    start = timezone.now() + timedelta(days=1)
    reservation = reservation_create(user=member, pool="gpus", team="a", gpus=1, model="", start=start,
                                     end=start + timedelta(hours=1))
    gpu = Gpu.objects.order_by("uuid").first()
    assert gpu is not None
    requests = list(corpus(str(Lease.objects.get().pk), str(reservation.pk), gpu.uuid,
                           str(Host.objects.get().pk), str(Quota.objects.get().pk)))
    keys = {"member": api_key(member), "admin": api_key(admin), "nobody": None}
    failures = []
    sent = 0
    for who, key in keys.items():
        for req in requests if who != "nobody" else requests[::7]:
            response = _send(client, req, key)
            sent += 1
            kind = response.get("Content-Type", "")
            if response.status_code >= 500 or not kind.startswith("application/json"):
                failures.append((who, req.method, req.path[:120], (req.body or b"")[:80],
                                 response.status_code, kind))
    assert sent >= 1000
    assert not failures, f"{len(failures)} of {sent}: {failures[:5]}"


@pytest.mark.parametrize("key", ["k" * 256, "a\u0000b", "line\nbreak"])
def test_an_idempotency_key_that_cannot_be_stored_whole_is_refused(apply_yaml: Any, make_user: Any,
                                                                   key: str) -> None:
    """Cut to 255 characters, two distinct keys would name one lease; a NUL broke the insert."""
    apply_yaml(FLEET)
    member = make_user("ann", teams=("a",))
    response = Client().post("/api/v1/leases/", _json({"pool": "gpus", "gpus": 1}),
                             content_type="application/json", HTTP_IDEMPOTENCY_KEY=key,
                             HTTP_AUTHORIZATION=f"Token {api_key(member)}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_idempotency_key"


def test_json_nested_past_the_recursion_limit_is_a_400(apply_yaml: Any, make_user: Any) -> None:
    apply_yaml(FLEET)
    member = make_user("ann", teams=("a",))
    response = Client().post("/api/v1/leases/", b"[" * 50_000 + b"]" * 50_000,
                             content_type="application/json",
                             HTTP_AUTHORIZATION=f"Token {api_key(member)}")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
