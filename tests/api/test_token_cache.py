"""Token → user is cached per process for TTL_S seconds: a revoked token or a deactivated user is
refused within TTL_S when the change came from elsewhere, and at once when it came through this
process's ORM (the cache listens to saves and deletes)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core import tokens as auth
from core.api.auth import CachedTokenAuthentication

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    auth.clear_token_cache()
    return now


def _status(client: Any) -> int:
    return int(client.get("/api/v1/pools/").status_code)


def test_a_cached_token_costs_no_query_and_gives_a_fresh_user_each_time(make_user: Any, api: Any,
                                                                        clock: list[float]) -> None:
    client = api(make_user("alice"))
    assert _status(client) == 200
    with CaptureQueriesContext(connection) as ctx:
        assert _status(client) == 200
    assert not any("core_apitoken" in q["sql"] for q in ctx.captured_queries)
    key = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert set(auth._cache) == {auth.token_digest(key)}  # keyed by digest: no key kept in memory
    first, _ = CachedTokenAuthentication().authenticate_credentials(key)
    second, _ = CachedTokenAuthentication().authenticate_credentials(key)
    assert first == second and first is not second  # never one instance shared between requests


def test_a_token_revoked_elsewhere_stops_working_within_the_ttl(make_user: Any, api: Any, clock: list[float]) -> None:
    client = api(make_user("alice"))
    assert _status(client) == 200
    with connection.cursor() as cur:  # another process: no signal reaches this one
        cur.execute("UPDATE core_apitoken SET revoked_at = %s", [timezone.now()])
    clock[0] += auth.TTL_S - 1
    assert _status(client) == 200
    clock[0] += 2
    assert _status(client) == 401


def test_a_user_deactivated_elsewhere_is_refused_within_the_ttl(make_user: Any, api: Any, clock: list[float]) -> None:
    alice = make_user("alice")
    client = api(alice)
    assert _status(client) == 200
    with connection.cursor() as cur:
        cur.execute("UPDATE auth_user SET is_active = false WHERE id = %s", [alice.pk])
    clock[0] += auth.TTL_S + 1
    assert _status(client) == 401


def test_changes_made_in_this_process_apply_at_once(make_user: Any, api: Any, clock: list[float]) -> None:
    from core.models import ApiToken

    alice = make_user("alice")
    client = api(alice)
    assert _status(client) == 200
    ApiToken.objects.filter(user=alice).delete()
    assert _status(client) == 401
