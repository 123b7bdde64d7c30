"""List endpoints cost a constant number of SQL queries, whatever the number of rows: the same
count with 5 rows as with 50 (no query per GPU, lease, pool, quota, team or event)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db


def _grow(start: int, stop: int, alice: Any) -> None:
    """Rows start..stop-1 of each kind: a pool with a source, host and leased GPU; a team of
    alice's with a quota there; a granted lease holding the GPU, a pending one, and audit events."""
    from allocation.audit import audit
    from allocation.models import Lease, LeaseGpu, PriorityClass, Quota, Team
    from inventory.models import Gpu, Host, Pool, Source

    pc = PriorityClass.objects.get_or_create(name="default")[0]
    for i in range(start, stop):
        team = Team.objects.create(name=f"t{i}")
        team.members.add(alice)
        pool = Pool.objects.create(name=f"p{i}")
        source = Source.objects.create(name=f"s{i}", kind="simulated", pool=pool)
        host = Host.objects.create(source=source, name=f"h{i}")
        gpu = Gpu.objects.create(uuid=f"GPU-q-{i}", host=host, pool=pool, model="NVIDIA H100",
                                 memory_mb=80000, leased=True, state="leased")
        Quota.objects.create(team=team, pool=pool, guaranteed=1, limit=4)
        held = Lease.objects.create(team=team, user=alice, pool=pool, priority_class=pc, gpu_count=1,
                                    ttl_seconds=60, state="granted", host=host)
        LeaseGpu.objects.create(lease=held, gpu=gpu)
        Lease.objects.create(team=team, user=alice, pool=pool, priority_class=pc, gpu_count=1, ttl_seconds=60)
        audit(actor="alice", action="lease.created", obj=held, lease=held).save()


def _queries(client: Any, url: str, rows: int) -> int:
    from core.api.auth import clear_token_cache

    clear_token_cache()  # every count includes the token lookup
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content[:200]
    assert response.json()["count"] >= rows, url
    return len(ctx.captured_queries)


@pytest.mark.parametrize("url", ["/api/v1/gpus/", "/api/v1/leases/", "/api/v1/pools/", "/api/v1/quotas/",
                                 "/api/v1/teams/", "/api/v1/hosts/", "/api/v1/audit-events/"])
def test_a_list_costs_the_same_number_of_queries_for_5_rows_as_for_50(url: str, make_user: Any, api: Any) -> None:
    alice = make_user("alice")
    client = api(alice)
    client.get("/api/v1/pools/")  # the token's first use records it (a write at most once a minute)
    _grow(0, 5, alice)
    small = _queries(client, url, 5)
    _grow(5, 50, alice)
    large = _queries(client, url, 50)
    assert large == small, f"{url}: {small} queries for 5 rows, {large} for 50"
