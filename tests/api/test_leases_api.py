"""The lease API end to end through a scheduling pass: request, grant, release, bad input."""

from __future__ import annotations

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent, LeaseGpu
from inventory.models import Gpu

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(demo_fleet, make_user):
    return make_user("alice", teams=("vision",))


def test_a_requested_lease_is_pending_until_a_pass_grants_it_and_release_frees_it(api, alice) -> None:
    client = api(alice)
    created = client.post("/api/v1/leases/", {"pool": "training", "gpus": 2, "ttl_seconds": 600},
                          format="json")
    assert created.status_code == 201, created.json()
    lease = created.json()
    assert lease["state"] == "pending" and lease["team"] == "vision" and lease["gpus"] == []

    run_pass()
    granted = client.get(f"/api/v1/leases/{lease['id']}/").json()
    assert granted["state"] == "granted"
    assert len(granted["gpus"]) == 2 and granted["host"]
    assert Gpu.objects.filter(uuid__in=granted["gpus"], state="leased").count() == 2
    assert granted["expires_at"] > granted["granted_at"]

    released = client.post(f"/api/v1/leases/{lease['id']}/release/", {}, format="json").json()
    assert released["state"] == "released" and released["ended_at"]
    assert Gpu.objects.filter(uuid__in=granted["gpus"], state="free").count() == 2
    assert not LeaseGpu.objects.filter(active=True).exists()
    # Releasing again is harmless and changes nothing.
    again = client.post(f"/api/v1/leases/{lease['id']}/release/", {}, format="json")
    assert again.status_code == 200 and again.json()["ended_at"] == released["ended_at"]
    actions = list(AuditEvent.objects.filter(lease_id=lease["id"]).values_list("action", flat=True))
    assert {"lease.created", "lease.granted", "lease.released"} <= set(actions)


@pytest.mark.parametrize("body, field", [
    ({}, "pool"),
    ({"pool": "training"}, "gpus"),
    ({"pool": "training", "gpus": -2}, "gpus"),
    ({"pool": "training", "gpus": 0}, "gpus"),
    ({"pool": "training", "gpus": "two"}, "gpus"),
    ({"pool": "training", "gpus": 1.5}, "gpus"),
    ({"pool": "nowhere", "gpus": 1}, "pool"),
    ({"pool": "training", "gpus": 1, "same_host": "maybe"}, "same_host"),
    ({"pool": "training", "gpus": 1, "ttl_seconds": -5}, "ttl_seconds"),
    ({"pool": "training", "gpus": 1, "binding": {"kind": "process"}}, "binding"),
    ({"pool": "training", "gpus": 1, "binding": {"kind": "vm"}}, "binding"),
    ({"pool": "training", "gpus": 1, "binding": {"kind": "process", "command": ["x"],
                                                "env": {"BAD-NAME": "1"}}}, "binding"),
    ({"pool": ["training"], "gpus": 1}, "pool"),
])
def test_bad_lease_input_gets_a_400_with_a_code_and_the_field(api, alice, body, field) -> None:
    response = api(alice).post("/api/v1/leases/", body, format="json")
    assert response.status_code == 400
    data = response.json()
    assert data["code"] == "invalid" and field in data["details"], data


@pytest.mark.parametrize("raw", [b"garbage", b"{", b"[]", b"null", b'"text"', b"\xff\xfe"])
def test_garbage_json_is_a_400_json_error_never_a_500(api, alice, raw) -> None:
    response = api(alice).post("/api/v1/leases/", raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] in {"parse_error", "invalid"}


def test_a_request_no_capacity_could_ever_satisfy_is_refused_at_once(api, alice) -> None:
    response = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 9}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "unsatisfiable"
    assert "at most 8 GPUs" in response.json()["message"] and "on one host" in response.json()["message"]
    spread = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 9, "same_host": False},
                             format="json")
    assert spread.status_code == 201


def test_a_model_that_the_pool_does_not_have_is_refused(api, alice) -> None:
    response = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1, "model": "V100"},
                               format="json")
    assert response.status_code == 400 and response.json()["code"] == "unsatisfiable"
    ok = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1, "model": "a100|h100"},
                         format="json")
    assert ok.status_code == 201


def test_the_same_idempotency_key_returns_the_same_lease_and_a_different_body_conflicts(api, alice) -> None:
    client = api(alice)
    body = {"pool": "training", "gpus": 1}
    first = client.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = client.post("/api/v1/leases/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    third = client.post("/api/v1/leases/", {"pool": "training", "gpus": 2}, format="json",
                        HTTP_IDEMPOTENCY_KEY="k-1")
    assert third.status_code == 409 and third.json()["code"] == "idempotency_key_reused"


def test_another_teams_member_gets_404_for_the_lease_and_cannot_release_it(api, alice, make_user) -> None:
    carol = make_user("carol", teams=("nlp",))
    lease = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json").json()
    assert api(carol).get(f"/api/v1/leases/{lease['id']}/").status_code == 404
    assert api(carol).post(f"/api/v1/leases/{lease['id']}/release/").status_code == 404
    assert all(item["id"] != lease["id"] for item in api(carol).get("/api/v1/leases/").json()["results"])
    admin = make_user("root", admin=True)
    assert api(admin).get(f"/api/v1/leases/{lease['id']}/").status_code == 200


def test_anonymous_requests_are_refused_with_a_json_401(api, demo_fleet) -> None:
    response = api().get("/api/v1/gpus/")
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"


def test_a_granted_lease_past_its_ttl_expires_and_frees_its_gpus(api, alice) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from allocation.services.reaper import leases_reap

    lease = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 2, "ttl_seconds": 30},
                            format="json").json()
    run_pass()
    counts = leases_reap(now=timezone.now() + timedelta(seconds=31))
    assert counts["expired"] == 1
    data = api(alice).get(f"/api/v1/leases/{lease['id']}/").json()
    assert data["state"] == "expired" and "TTL" in data["reason"]
    assert not Gpu.objects.filter(state="leased").exists()


def test_renew_pushes_the_expiry(api, alice) -> None:
    lease = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1, "ttl_seconds": 60},
                            format="json").json()
    run_pass()
    before = api(alice).get(f"/api/v1/leases/{lease['id']}/").json()["expires_at"]
    renewed = api(alice).post(f"/api/v1/leases/{lease['id']}/renew/", {"ttl_seconds": 600}, format="json")
    assert renewed.status_code == 200 and renewed.json()["expires_at"] > before
    api(alice).post(f"/api/v1/leases/{lease['id']}/release/")
    refused = api(alice).post(f"/api/v1/leases/{lease['id']}/renew/")
    assert refused.status_code == 409 and refused.json()["code"] == "not_renewable"


def test_gpus_list_the_demo_fleet_with_filters(api, alice) -> None:
    data = api(alice).get("/api/v1/gpus/?pool=training&limit=1000").json()
    assert data["count"] == 32
    assert {g["model"] for g in data["results"]} == {"NVIDIA H100 80GB HBM3"}
    assert api(alice).get("/api/v1/gpus/?model=a100").json()["count"] == 8
    assert api(alice).get("/api/v1/gpus/?state=leased").json()["count"] == 0
    bad = api(alice).get("/api/v1/gpus/?state=melting")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    pools = {p["name"]: p for p in api(alice).get("/api/v1/pools/").json()["results"]}
    assert pools["training"]["capacity"] == 32 and pools["inference"]["capacity"] == 8


def test_healthz_answers(client, db) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["status"] == "ok"
