"""`pending_code` through the API: set on a new lease, written by a pass beside the reason,
cleared by a grant and by an end, and a filter of `GET leases/` that refuses a code it does not
know."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass

pytestmark = pytest.mark.django_db


def _ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [lease["id"] for lease in response.json()["results"]]


def test_a_lease_carries_why_it_waits_and_the_list_filters_by_it(world: Any, api: Any) -> None:
    alice = api(world.member)  # team vision: limit 24 in pool training; the world's lease holds 1
    first = alice.get(f"/api/v1/leases/{world.lease_id}/").json()
    assert (first["state"], first["pending_code"]) == ("pending", "next_pass")
    created = [alice.post("/api/v1/leases/", {"pool": "training", "gpus": 8}, format="json") for _ in range(3)]
    assert [r.status_code for r in created] == [201] * 3
    assert {r.json()["pending_code"] for r in created} == {"next_pass"}
    run_pass()
    leases = {lease["id"]: lease for lease in alice.get("/api/v1/leases/").json()["results"]}
    waiting = [lease for lease in leases.values() if lease["state"] == "pending"]
    assert len(waiting) == 1 and waiting[0]["pending_code"] == "at_limit"
    assert "at its limit 24" in waiting[0]["reason"]
    assert {lease["pending_code"] for lease in leases.values() if lease["state"] == "granted"} == {""}

    assert _ids(alice.get("/api/v1/leases/?pending_code=at_limit")) == [waiting[0]["id"]]
    assert _ids(alice.get("/api/v1/leases/?pending_code=no_capacity&pending_code=at_limit")) == [waiting[0]["id"]]
    assert _ids(alice.get("/api/v1/leases/?pending_code=no_capacity")) == []
    # Another team's pending leases stay invisible through the filter.
    assert _ids(api(world.other).get("/api/v1/leases/?pending_code=at_limit")) == []

    released = alice.post(f"/api/v1/leases/{waiting[0]['id']}/release/", {}, format="json").json()
    assert (released["state"], released["pending_code"]) == ("released", "")


def test_an_unknown_pending_code_is_a_400_naming_the_parameter(world: Any, api: Any) -> None:
    response = api(world.member).get("/api/v1/leases/?pending_code=busy")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid" and "pending_code" in body["message"]


def test_the_schema_lists_every_code_for_the_field_and_the_filter(schema: dict[str, Any]) -> None:
    from allocation.policy.codes import PendingCode

    codes = [code.value for code in PendingCode]
    assert schema["components"]["schemas"]["PendingCodeEnum"]["enum"] == codes
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/leases/"]["get"]["parameters"]}
    assert sorted(parameters["pending_code"]["schema"]["items"]["enum"]) == sorted(codes)
    described = schema["components"]["schemas"]["Lease"]["properties"]["pending_code"]["description"]
    assert all(f"`{code}`" in described for code in codes)
