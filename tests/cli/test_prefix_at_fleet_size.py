"""`show`/`renew`/`release`/`cancel` by id prefix find any lease of the caller's teams, however many
there are: the server looks the prefix up (`GET leases/?id_prefix=`). The oldest of 10,000 leases
is found; a prefix of several is a usage error (exit 2) that names some; none is exit 3."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from allocation.models import Lease, PriorityClass, Team
from inventory.models import Pool

pytestmark = pytest.mark.django_db(transaction=True)


def _leases(count: int, *, team: str = "vision", ids: list[uuid.UUID] | None = None) -> list[Lease]:
    """`count` ended leases of alice's team, one minute apart, the first the oldest (bulk SQL)."""
    now = timezone.now()
    user = get_user_model().objects.get(username="alice")
    common: dict[str, Any] = {"team": Team.objects.get(name=team), "user": user,
                              "pool": Pool.objects.get(name="training"),
                              "priority_class": PriorityClass.objects.get(name="default"),
                              "gpu_count": 1, "ttl_seconds": 3600, "state": "released", "reason": "released by alice"}
    rows = [Lease(id=(ids[i] if ids else uuid.uuid4()), created_at=now - timedelta(minutes=count - i),
                  ended_at=now - timedelta(minutes=count - i - 1), **common) for i in range(count)]
    return Lease.objects.bulk_create(rows, batch_size=2000)


def test_the_oldest_of_10000_leases_is_found_by_its_prefix(server: Any) -> None:
    made = _leases(10_000)
    oldest = min(made, key=lambda x: x.created_at)
    prefix = str(oldest.id)[:8]
    started = time.perf_counter()
    code, out, err = server.run("show", prefix)
    assert code == 0, err
    assert f"id:              {oldest.id}" in out and "released" in out
    assert time.perf_counter() - started < 5  # one indexed lookup, not pages of 10,000 rows
    code, out, err = server.run("show", str(oldest.id)[:13].upper(), "-o", "json")
    assert code == 0 and str(oldest.id) in out


def test_a_prefix_of_several_leases_is_a_usage_error_naming_some(server: Any) -> None:
    ids = [uuid.UUID(f"abcdef{i:02d}-0000-4000-8000-{i:012d}") for i in range(5)]
    _leases(5, ids=ids)
    code, out, err = server.run("show", "abcdef")
    assert code == 2 and out == ""
    assert err.startswith("error: 'abcdef' matches 5 leases (abcdef04-0000 (released, 1m old), ")
    assert err.endswith("; give more of the id (ambiguous)\n")
    code, _, err = server.run("release", "abcdef03")
    assert code == 0, err


def test_a_prefix_that_matches_none_of_yours_is_exit_3(server: Any) -> None:
    ids = [uuid.UUID("fedcba98-0000-4000-8000-000000000001")]
    _leases(1, team="nlp", ids=ids)  # another team's lease: not yours to see
    for command in ("show", "renew", "release", "cancel"):
        code, _, err = server.run(command, "fedcba98")
        assert code == 3 and err == "error: no lease of yours starts with 'fedcba98' (not_found)\n", command
