"""Lists filter with django-filter and page with limit/offset (bounded by a maximum)."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass

pytestmark = pytest.mark.django_db


def test_gpus_page_with_limit_and_offset_and_cap_the_page_size(world: Any, api: Any) -> None:
    client = api(world.member)
    first = client.get("/api/v1/gpus/?limit=10").json()
    second = client.get("/api/v1/gpus/?limit=10&offset=10").json()
    assert first["count"] == 40 and len(first["results"]) == 10 and "offset=10" in first["next"]
    assert not {g["uuid"] for g in first["results"]} & {g["uuid"] for g in second["results"]}
    assert len(client.get("/api/v1/gpus/?limit=100000").json()["results"]) == 40  # capped at 1000


def test_gpus_filter_by_pool_state_model_host_and_memory(world: Any, api: Any) -> None:
    client = api(world.member)
    run_pass()
    assert client.get("/api/v1/gpus/?pool=inference").json()["count"] == 8
    assert client.get("/api/v1/gpus/?model=h100&state=leased").json()["count"] == 1
    assert client.get("/api/v1/gpus/?state=leased&state=free").json()["count"] == 40
    assert client.get("/api/v1/gpus/?min_memory_mb=81600").json()["count"] == 8
    leased = client.get("/api/v1/gpus/?state=leased").json()["results"][0]
    assert leased["lease"] == world.lease_id
    assert client.get(f"/api/v1/gpus/{leased['uuid']}/").json()["lease"] == world.lease_id
    assert client.get(f"/api/v1/gpus/?host={leased['host']}").json()["count"] == 8


def test_leases_filter_by_state_activity_pool_and_user(world: Any, api: Any) -> None:
    client = api(world.member)
    second = client.post("/api/v1/leases/", {"pool": "inference", "gpus": 1}, format="json").json()
    client.post(f"/api/v1/leases/{second['id']}/release/")
    assert client.get("/api/v1/leases/?state=pending").json()["count"] == 1
    assert client.get("/api/v1/leases/?active=false").json()["results"][0]["id"] == second["id"]
    assert client.get("/api/v1/leases/?active=true").json()["results"][0]["id"] == world.lease_id
    assert client.get("/api/v1/leases/?pool=inference").json()["count"] == 1
    assert client.get("/api/v1/leases/?user=carol").json()["count"] == 0


def test_pools_report_capacity_pending_and_per_model_counts(world: Any, api: Any) -> None:
    pools = {p["name"]: p for p in api(world.member).get("/api/v1/pools/").json()["results"]}
    training = pools["training"]
    assert (training["capacity"], training["allocated"], training["free"]) == (32, 0, 32)
    assert training["pending"] == 1 and training["pending_gpus"] == 1
    assert training["models"] == {"NVIDIA H100 80GB HBM3": {"total": 32, "free": 32}}


def test_teams_and_quotas_show_usage_to_their_members(world: Any, api: Any) -> None:
    run_pass()
    client = api(world.member)
    teams = client.get("/api/v1/teams/").json()["results"]
    assert [(t["name"], t["gpus_held"], t["members"]) for t in teams] == [("vision", 1, ["alice", "bob"])]
    quotas = {q["pool"]: q for q in client.get("/api/v1/quotas/").json()["results"]}
    assert set(quotas) == {"training", "inference"}
    assert (quotas["training"]["used"], quotas["training"]["guaranteed"], quotas["training"]["limit"]) == (1, 8, 24)
    assert client.get("/api/v1/quotas/?pool=inference").json()["count"] == 1
    assert len(api(world.admin).get("/api/v1/quotas/").json()["results"]) == 6
