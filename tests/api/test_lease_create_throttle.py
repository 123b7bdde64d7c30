"""Lease creation is rate-limited per user (scope `lease_create`); reads are not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_per_minute(settings: Any) -> Iterator[None]:
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"lease_create": "2/min"}}
    cache.clear()
    yield
    cache.clear()


def test_the_third_lease_request_in_a_minute_is_a_429_with_retry_after(world: Any, api: Any,
                                                                        two_per_minute: None) -> None:
    client = api(world.member)
    body = {"pool": "training", "gpus": 1}
    assert [client.post("/api/v1/leases/", body, format="json").status_code for _ in range(2)] == [201, 201]
    third = client.post("/api/v1/leases/", body, format="json")
    assert third.status_code == 429 and third.json()["code"] == "throttled"
    assert int(third["Retry-After"]) > 0
    # Reads and other users are not affected.
    assert client.get("/api/v1/leases/").status_code == 200
    assert api(world.other).post("/api/v1/leases/", body, format="json").status_code == 201
