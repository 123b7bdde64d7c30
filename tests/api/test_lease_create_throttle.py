"""Lease creation is rate-limited per user (scope `lease_create`); reads are not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db


def _forget_buckets() -> None:
    """The rate's buckets live in Redis across tests and runs, where user ids repeat."""
    from allocation.api.throttles import KEY_PREFIX
    from allocation.events import redis_client

    keys = list(redis_client().scan_iter(match=f"{KEY_PREFIX}:*", count=1000))
    if keys:
        redis_client().delete(*keys)


@pytest.fixture
def two_per_minute(settings: Any) -> Iterator[None]:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"lease_create": "2/min"}}
    cache.clear()
    _forget_buckets()
    yield
    cache.clear()
    _forget_buckets()


def test_the_third_lease_request_in_a_minute_is_a_429_with_retry_after(world: Any, api: Any,
                                                                        two_per_minute: None) -> None:
    client = api(world.member)
    body = {"pool": "training", "gpus": 1}
    assert [client.post("/api/v1/leases/", body, format="json").status_code for _ in range(2)] == [201, 201]
    third = client.post("/api/v1/leases/", body, format="json")
    assert third.status_code == 429 and third.json()["code"] == "throttled"
    wait = int(third["Retry-After"])
    assert 20 < wait <= 30  # the next token: 60 s / 2, less what has refilled since the first
    assert third.json()["message"] == f"Request was throttled. Expected available in {wait} seconds."
    # Reads and other users are not affected.
    assert client.get("/api/v1/leases/").status_code == 200
    assert api(world.other).post("/api/v1/leases/", body, format="json").status_code == 201


def test_while_redis_cannot_be_reached_lease_requests_are_let_through(world: Any, api: Any, two_per_minute: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails open: the rate is Redis's, the API's job goes on without it (the queue caps, in
    PostgreSQL, still bound what a team may queue)."""
    import redis

    from allocation import events
    from allocation.api.throttles import BUCKETS
    from stacktools.ready import free_port

    client = api(world.member)
    body = {"pool": "training", "gpus": 1}
    with monkeypatch.context() as patch:
        patch.setattr(events, "_client", redis.Redis(port=free_port(), socket_connect_timeout=0.5,
                                                     socket_timeout=0.5))
        patch.setattr(BUCKETS, "_skip_until", 0.0)  # restored after: other tests ask Redis at once
        assert [client.post("/api/v1/leases/", body, format="json").status_code for _ in range(4)] == [201] * 4
    assert [client.post("/api/v1/leases/", body, format="json").status_code for _ in range(3)] == [201, 201, 429]
