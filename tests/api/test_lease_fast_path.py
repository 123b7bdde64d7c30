"""The fast lease path (allocation/api/fast/) answers exactly as the generic path (Django's
middleware and DRF) does: the same requests, valid and invalid, sent through both WSGI
applications give the same status, headers and body (lease ids and times aside, where each path
made its own lease). Each case also says which path must have answered it, so a comparison never
passes because the fast path quietly declined everything."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections

from allocation.api.fast.app import FastLeaseApp
from allocation.models import AuditEvent, Lease

pytestmark = pytest.mark.django_db

LEASES = "/api/v1/leases/"
# What differs between two leases made by the same request on two paths.
_VOLATILE = re.compile(rb'"(id|created_at|expires_at|ended_at|granted_at)":"[^"]*"|"ETag"')


class Counting:
    """Django's WSGI application, counting the requests that reach it."""

    def __init__(self) -> None:
        self.app, self.calls = WSGIHandler(), 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.app(environ, start_response)


@pytest.fixture
def paths() -> Iterator[tuple[Counting, FastLeaseApp]]:
    """(generic, fast). As Django's test client does, the connection is not closed between
    requests (the test's transaction holds it)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    generic = Counting()
    try:
        yield generic, FastLeaseApp(generic)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def call(app: Any, method: str, path: str, body: Any = None, *, token: str | None = None,
         raw: bytes | None = None, **headers: str) -> tuple[int, dict[str, str], bytes]:
    data = raw if raw is not None else (b"" if body is None else orjson.dumps(body))
    path, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "SCRIPT_NAME": "",
               "SERVER_NAME": "testserver", "SERVER_PORT": "80", "HTTP_HOST": "testserver", "REMOTE_ADDR": "127.0.0.1",
               "wsgi.input": io.BytesIO(data), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
               "wsgi.version": (1, 0), "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
               "CONTENT_LENGTH": str(len(data)), "CONTENT_TYPE": "application/json" if data else "",
               **({"HTTP_AUTHORIZATION": f"Token {token}"} if token else {}), **headers}
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

    result = app(environ, start_response)
    payload = b"".join(result)
    if hasattr(result, "close"):
        result.close()
    return answer["status"], answer["headers"], payload


def both(generic: Counting, fast: FastLeaseApp, method: str, path: str, body: Any = None, *,
         served: bool, volatile: bool = False, **kwargs: Any) -> tuple[int, bytes]:
    """The request on both paths: equal answers; `served`: whether the fast path answered it
    itself (else it handed it to the generic path)."""
    want = call(generic, method, path, body, **kwargs)
    before = generic.calls
    got = call(fast, method, path, body, **kwargs)
    assert (generic.calls == before) is served, f"{method} {path} {body!r}: served={not served}"
    assert got[0] == want[0], (got, want)
    if volatile:  # two leases made by one request: the same but for their ids and times
        assert _VOLATILE.sub(b"", got[2]) == _VOLATILE.sub(b"", want[2]), (got[2], want[2])
        skip = {"Content-Length", "ETag"}
    else:
        assert got[2] == want[2], (got[2], want[2])
        skip = set()
    assert {k: v for k, v in got[1].items() if k not in skip} == {k: v for k, v in want[1].items() if k not in skip}
    return got[0], got[2]


@pytest.fixture
def keys(world: Any) -> dict[str, str]:
    from core.models import TokenScope
    from core.tokens import token_issue

    return {"alice": token_issue(user=world.member), "carol": token_issue(user=world.other),
            "root": token_issue(user=world.admin),
            "alice-read": token_issue(user=world.member, scope=TokenScope.READ)}


def test_creates_valid_and_invalid_answer_alike(world: Any, paths: Any, keys: dict[str, str]) -> None:
    generic, fast = paths
    alice = keys["alice"]
    served = [  # the fast path's own: a plain body, errors from the service
        {"pool": "training", "gpus": 1},
        {"pool": "training", "gpus": 1, "model": "", "min_memory_mb": 0, "same_host": False, "team": "vision",
         "priority_class": None, "ttl_seconds": 600, "requeue_on_loss": True, "binding": None, "selector": None},
        {"pool": "training", "gpus": 1, "min_driver_version": "535.1", "min_cuda_version": ""},
        {"pool": "nope", "gpus": 1},
        {"pool": "training", "gpus": 4096},
        {"pool": "training", "gpus": 1, "team": "nlp"},
        {"pool": "training", "gpus": 1, "team": "ghost"},
        {"pool": "training", "gpus": 1, "priority_class": "ghost"},
        {"pool": "training", "gpus": 1, "model": "NoSuchModel"},
    ]
    for body in served:
        status, _ = both(generic, fast, "POST", LEASES, body, token=alice, served=True, volatile=True)
        assert status in (201, 400, 403, 404), body
    declined: list[Any] = [  # whatever DRF's serializers word or coerce
        {"pool": "training", "gpus": 0}, {"pool": "training", "gpus": "2"}, {"pool": "training"},
        {"pool": "training", "gpus": 1, "extra": 1}, {"pool": " training", "gpus": 1},
        {"pool": "training", "gpus": 100000}, {"pool": "training", "gpus": 1, "ttl_seconds": 10**9},
        {"pool": "training", "gpus": True}, {"pool": "training", "gpus": 1, "same_host": "yes"},
        {"pool": "training", "gpus": 1, "min_cuda_version": "12.x"}, {"pool": "", "gpus": 1},
        {"pool": "training", "gpus": 1, "team": ""}, {"pool": "training", "gpus": 1, "selector": {"host": "x"}},
        [], "text", None,
    ]
    for body in declined:
        both(generic, fast, "POST", LEASES, body, token=alice, served=False, volatile=True)
    for raw in (b"{", b'{"pool": "training", "gpus": 1234567890123456789012}', b"\xff"):
        both(generic, fast, "POST", LEASES, token=alice, raw=raw, served=False)
    both(generic, fast, "POST", LEASES, {"pool": "training", "gpus": 1}, token="nope", served=False)
    both(generic, fast, "POST", LEASES, {"pool": "training", "gpus": 1}, served=False)
    both(generic, fast, "POST", LEASES, {"pool": "training", "gpus": 1}, token=keys["alice-read"], served=False)
    before = generic.calls  # the browsable API (its page differs by the lease it made): DRF's
    assert call(fast, "POST", LEASES, {"pool": "training", "gpus": 1}, token=alice, HTTP_ACCEPT="text/html")[0] == 201
    assert generic.calls == before + 1
    both(generic, fast, "POST", LEASES + "?x=1", {"pool": "training", "gpus": 1}, token=alice, served=False)


def test_idempotency_keys_answer_alike(world: Any, paths: Any, keys: dict[str, str]) -> None:
    generic, fast = paths
    body = {"pool": "training", "gpus": 1}
    first = call(generic, "POST", LEASES, body, token=keys["alice"], HTTP_IDEMPOTENCY_KEY="k1")
    assert first[0] == 201
    # Both paths answer a replay with the first lease, and a reused key with a 409.
    _, replay = both(generic, fast, "POST", LEASES, body, token=keys["alice"], HTTP_IDEMPOTENCY_KEY="k1", served=True)
    assert orjson.loads(replay)["id"] == orjson.loads(first[2])["id"]
    status, _ = both(generic, fast, "POST", LEASES, {**body, "gpus": 2}, token=keys["alice"],
                     HTTP_IDEMPOTENCY_KEY="k1", served=True)
    assert status == 409
    both(generic, fast, "POST", LEASES, body, token=keys["alice"], HTTP_IDEMPOTENCY_KEY="x" * 256, served=False)
    made = call(fast, "POST", LEASES, body, token=keys["alice"], HTTP_IDEMPOTENCY_KEY="k2")
    assert made[0] == 201
    assert Lease.objects.filter(idempotency_key="k2").count() == 1
    assert call(fast, "POST", LEASES, body, token=keys["alice"], HTTP_IDEMPOTENCY_KEY="k2")[0] == 200
    assert Lease.objects.filter(idempotency_key="k2").count() == 1


def test_reads_answer_alike(world: Any, paths: Any, keys: dict[str, str]) -> None:
    generic, fast = paths
    lease = world.lease_id
    for token in (keys["alice"], keys["alice-read"], keys["root"]):
        status, _ = both(generic, fast, "GET", f"{LEASES}{lease}/", token=token, served=True)
        assert status == 200
    both(generic, fast, "GET", f"{LEASES}{lease}", token=keys["alice"], served=True)  # no trailing slash
    for missing in ("00000000-0000-0000-0000-000000000000", lease.upper(), lease.replace("-", "")):
        both(generic, fast, "GET", f"{LEASES}{missing}/", token=keys["alice"], served=True)
    for other in ("not-a-uuid", "batch"):  # not a lease id: the router's (a collection action, or a 404)
        both(generic, fast, "GET", f"{LEASES}{other}/", token=keys["alice"], served=False)
        both(generic, fast, "POST", f"{LEASES}{other}/release/", {}, token=keys["alice"], served=False)
    status, _ = both(generic, fast, "GET", f"{LEASES}{lease}/", token=keys["carol"], served=True)
    assert status == 404  # another team's lease
    both(generic, fast, "GET", f"{LEASES}{lease}/", served=False)
    both(generic, fast, "GET", f"{LEASES}{lease}/?format=json", token=keys["alice"], served=False)
    both(generic, fast, "GET", f"{LEASES}{lease}/events/", token=keys["alice"], served=False)


def _pending(generic: Counting, token: str, n: int) -> list[str]:
    # (Not Django's test client: it connects close_old_connections again, which would close the
    # test's connection on the next request here.)
    return [orjson.loads(call(generic, "POST", LEASES, {"pool": "training", "gpus": 1}, token=token)[2])["id"]
            for _ in range(n)]


def test_releases_answer_alike(world: Any, paths: Any, keys: dict[str, str]) -> None:
    generic, fast = paths
    one, two = _pending(generic, keys["alice"], 2)
    want = call(generic, "POST", f"{LEASES}{one}/release/", {"reason": "done"}, token=keys["alice"])
    got = call(fast, "POST", f"{LEASES}{two}/release/", {"reason": "done"}, token=keys["alice"])
    assert got[0] == want[0] == 200
    assert _VOLATILE.sub(b"", got[2]) == _VOLATILE.sub(b"", want[2])
    assert AuditEvent.objects.filter(lease_id=two, action="lease.released").count() == 1
    bodies: list[Any] = [None, {}, {"reason": "again"}]
    for body in bodies:  # releasing twice is harmless, alike
        both(generic, fast, "POST", f"{LEASES}{two}/release/", body, token=keys["alice"], served=True)
    bodies = [{"reason": 5}, {"bogus": 1}, {"reason": " padded "}, [], {"reason": "x" * 501}]
    for body in bodies:
        both(generic, fast, "POST", f"{LEASES}{two}/release/", body, token=keys["alice"], served=False)
    both(generic, fast, "POST", f"{LEASES}{world.lease_id}/release/", {}, token=keys["carol"], served=True)
    both(generic, fast, "POST", f"{LEASES}00000000-0000-0000-0000-000000000000/release/", {}, token=keys["alice"],
         served=True)
    both(generic, fast, "POST", f"{LEASES}{world.lease_id}/release/", {}, token=keys["alice-read"], served=False)


def test_renewals_answer_alike(world: Any, paths: Any, keys: dict[str, str]) -> None:
    generic, fast = paths
    lease = world.lease_id
    bodies: list[Any] = [None, {}, {"ttl_seconds": 120}, {"ttl_seconds": None}]
    for body in bodies:
        status, _ = both(generic, fast, "POST", f"{LEASES}{lease}/renew", body, token=keys["alice"], served=True,
                         volatile=True)
        assert status == 200
    bodies = [{"ttl_seconds": 0}, {"ttl_seconds": "60"}, {"ttl": 5}]
    for body in bodies:
        both(generic, fast, "POST", f"{LEASES}{lease}/renew/", body, token=keys["alice"], served=False)
    both(generic, fast, "POST", f"{LEASES}{lease}/renew/?keep=true", {}, token=keys["alice"], served=False)
    both(generic, fast, "POST", f"{LEASES}{lease}/renew/", {}, token=keys["carol"], served=True)
    ended = _pending(generic, keys["alice"], 1)[0]
    call(generic, "POST", f"{LEASES}{ended}/release/", {}, token=keys["alice"])
    status, _ = both(generic, fast, "POST", f"{LEASES}{ended}/renew/", {}, token=keys["alice"], served=True)
    assert status == 409


def test_throttled_creates_answer_alike(world: Any, paths: Any, keys: dict[str, str], settings: Any) -> None:
    """Over the user's lease rate: the same 429 body and Retry-After; each path counts once a request."""
    generic, fast = paths
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"lease_create": "2/min"}}
    body = {"pool": "training", "gpus": 1}
    answers = []
    for app, token in ((generic, keys["alice"]), (fast, keys["carol"])):  # one user each: one bucket each
        answers.append([call(app, "POST", LEASES, body, token=token) for _ in range(3)])
    assert [a[0] for a in answers[0]] == [a[0] for a in answers[1]] == [201, 201, 429]
    assert answers[0][2][2] == answers[1][2][2]
    assert answers[0][2][1] == answers[1][2][1] and "Retry-After" in answers[1][2][1]
    # A body the fast path declines is counted once, by the generic path.
    body = {**body, "team": "vision"}  # root, a pool admin in no team, names one
    assert call(fast, "POST", LEASES, {**body, "gpus": "1"}, token=keys["root"])[0] == 201
    assert [call(fast, "POST", LEASES, body, token=keys["root"])[0] for _ in range(2)] == [201, 429]


def test_hosts_and_tls_answer_alike(world: Any, paths: Any, keys: dict[str, str], settings: Any) -> None:
    """A Host that ALLOWED_HOSTS refuses, plain HTTP redirected to HTTPS, and HSTS on HTTPS
    (GPUPOOL_TLS=1's settings) are SecurityMiddleware's and CommonMiddleware's: alike on both paths."""
    generic, fast = paths
    lease, alice = world.lease_id, keys["alice"]
    both(generic, fast, "GET", f"{LEASES}{lease}/", token=alice, HTTP_HOST="evil.example", served=False)
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    generic = Counting()  # SecurityMiddleware reads its settings when the handler loads it
    fast = FastLeaseApp(generic)
    status, _ = both(generic, fast, "GET", f"{LEASES}{lease}/", token=alice, served=False)
    assert status == 301
    status, _ = both(generic, fast, "GET", f"{LEASES}{lease}/", token=alice, HTTP_X_FORWARDED_PROTO="https",
                     served=True)
    assert status == 200
    assert "Strict-Transport-Security" in call(fast, "GET", f"{LEASES}{lease}/", token=alice,
                                               HTTP_X_FORWARDED_PROTO="https")[1]


def test_a_token_lookup_the_database_fails_is_the_generic_paths_503(world: Any, paths: Any, keys: dict[str, str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import OperationalError

    from core import tokens

    def down(key: str) -> Any:
        raise OperationalError("the database is down")

    generic, fast = paths
    monkeypatch.setattr(tokens, "_cache", {})
    monkeypatch.setattr("allocation.api.fast.app.token_lookup", down)
    monkeypatch.setattr("core.api.auth.token_lookup", down)
    status, _ = both(generic, fast, "GET", f"{LEASES}{world.lease_id}/", token=keys["alice"], served=False)
    assert status == 503


def test_the_setting_turns_it_off(settings: Any) -> None:
    from allocation.api.fast.app import with_fast_leases

    app = WSGIHandler()
    assert isinstance(with_fast_leases(app), FastLeaseApp)
    settings.GPUPOOL = {**settings.GPUPOOL, "LEASE_FAST_PATH": False}
    assert with_fast_leases(app) is app
