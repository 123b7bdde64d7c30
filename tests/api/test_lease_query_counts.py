"""The hot lease endpoints cost a handful of SQL queries on PostgreSQL, counted with the token lookup
(the per-process token cache is emptied first) and BEGIN/COMMIT: create ≤ 5, release ≤ 5 (pending
or granted), read ≤ 3, a page of leases ≤ 4 whatever its size."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocation.engine import run_pass
from core.api.auth import clear_token_cache

pytestmark = pytest.mark.django_db


def _count(call: Any, *, cold: bool = True) -> tuple[Any, int]:
    if cold:
        clear_token_cache()
    with CaptureQueriesContext(connection) as ctx:
        response = call()
    assert response.status_code < 400, response.content[:300]
    return response, len(ctx.captured_queries)


def _sql(ctx: CaptureQueriesContext) -> str:
    return "\n".join(q["sql"][:200] for q in ctx.captured_queries)


def test_create_read_and_release_of_a_pending_lease_cost_at_most_5_3_and_5_queries(world: Any, api: Any) -> None:
    client = api(world.member)
    created, n_create = _count(lambda: client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json"))
    lease_id = created.json()["id"]
    _, n_read = _count(lambda: client.get(f"/api/v1/leases/{lease_id}/"))
    released, n_release = _count(lambda: client.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json"))
    assert released.json()["state"] == "released"
    assert n_create <= 5 and n_read <= 3 and n_release <= 5, (n_create, n_read, n_release)
    # With the token cached, as for a client that keeps calling: one query fewer each.
    _, warm = _count(lambda: client.get(f"/api/v1/leases/{lease_id}/"), cold=False)
    assert warm == n_read - 1


def test_releasing_a_granted_lease_costs_at_most_5_queries_and_frees_its_gpus(world: Any, api: Any) -> None:
    from inventory.models import Gpu

    client = api(world.member)
    lease_id = client.post("/api/v1/leases/", {"pool": "training", "gpus": 2, "ttl_seconds": 600},
                           format="json").json()["id"]
    run_pass()
    gpus = client.get(f"/api/v1/leases/{lease_id}/").json()["gpus"]
    assert len(gpus) == 2 and Gpu.objects.filter(uuid__in=gpus, state="leased").count() == 2
    released, n = _count(lambda: client.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json"))
    assert n <= 5, n
    assert released.json()["gpus"] == gpus and released.json()["state"] == "released"
    assert Gpu.objects.filter(uuid__in=gpus, state="free", leased=False).count() == 2


def test_a_replayed_idempotency_key_costs_at_most_5_queries(world: Any, api: Any) -> None:
    client = api(world.member)
    body = {"pool": "training", "gpus": 1}
    first = client.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="count-1")
    again, n = _count(lambda: client.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="count-1"))
    assert again.status_code == 200 and again.json() == first.json()
    assert n <= 5, n


@pytest.mark.parametrize("n_leases", [3, 30])
def test_a_page_of_leases_costs_at_most_4_queries(world: Any, api: Any, n_leases: int) -> None:
    client = api(world.member)
    for _ in range(n_leases):
        client.post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json")
    run_pass()
    page, n = _count(lambda: client.get("/api/v1/leases/?limit=100"))
    assert len(page.json()["results"]) > n_leases
    assert n <= 4, n
