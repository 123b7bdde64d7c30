"""Pool admins cordon, drain and uncordon hosts, move GPUs between pools and change quotas; each
action takes effect and lands in the audit log."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_cordon_stops_new_grants_on_the_host_and_uncordon_restores_them(world: Any, api: Any) -> None:
    admin = api(world.admin)
    host = admin.post(f"/api/v1/hosts/{world.host_id}/cordon/").json()
    assert host["state"] == "cordoned" and host["admin_state"] == "cordoned"
    gpus = admin.get(f"/api/v1/gpus/?host={host['name']}").json()["results"]
    assert {g["state"] for g in gpus} == {"cordoned"}
    assert admin.post(f"/api/v1/hosts/{world.host_id}/uncordon/").json()["state"] == "ready"


def test_drain_preempts_the_hosts_leases_with_notice(world: Any, api: Any) -> None:
    run_pass()
    lease = api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()
    assert lease["state"] == "granted"
    host_id = api(world.admin).get(f"/api/v1/hosts/?name={lease['host']}").json()["results"][0]["id"]
    drained = api(world.admin).post(f"/api/v1/hosts/{host_id}/drain/").json()
    assert drained["state"] == "draining"
    after = api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()
    assert after["state"] == "preempted" and "drained by root" in after["reason"]


def test_moving_a_gpu_changes_its_pool_and_the_pool_capacities(world: Any, api: Any) -> None:
    admin = api(world.admin)
    moved = admin.post(f"/api/v1/gpus/{world.gpu_uuid}/move/", {"pool": "inference"}, format="json").json()
    assert moved["pool"] == "inference"
    pools = {p["name"]: p["capacity"] for p in admin.get("/api/v1/pools/").json()["results"]}
    assert pools == {"training": 31, "inference": 9}
    assert AuditEvent.objects.filter(action="capacity.move", actor="root").exists()
    bad = admin.post(f"/api/v1/gpus/{world.gpu_uuid}/move/", {"pool": "nowhere"}, format="json")
    assert bad.status_code == 400 and "pool" in bad.json()["details"]


def test_patching_a_quota_changes_it_and_refuses_a_limit_below_the_guarantee(world: Any, api: Any) -> None:
    admin = api(world.admin)
    url = f"/api/v1/quotas/{world.quota_id}/"
    changed = admin.patch(url, {"guaranteed": 4, "limit": None}, format="json").json()
    assert changed["guaranteed"] == 4 and changed["limit"] is None and changed["team"] == "vision"
    refused = admin.patch(url, {"guaranteed": 10, "limit": 5}, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_quota"
    event = AuditEvent.objects.get(action="quota.update")
    assert event.actor == "root" and event.data["after"] == {"guaranteed": 4, "limit": None}


def test_moving_a_held_gpu_goes_through_the_locked_service_and_the_lease_keeps_it(world: Any, api: Any) -> None:
    run_pass()
    lease = api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()
    assert lease["state"] == "granted"
    admin = api(world.admin)
    held = lease["gpus"][0]
    moved = admin.post(f"/api/v1/gpus/{held}/move/", {"pool": "inference"}, format="json")
    assert moved.status_code == 200 and moved.json()["pool"] == "inference"
    assert api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()["state"] == "granted"
    event = AuditEvent.objects.get(action="capacity.move")
    assert event.data["to"] == "inference"
    # Moving it again to the pool it is in changes nothing and writes nothing.
    again = admin.post(f"/api/v1/gpus/{held}/move/", {"pool": "inference"}, format="json")
    assert again.status_code == 200 and again.json()["pool"] == "inference"
    assert AuditEvent.objects.filter(action="capacity.move").count() == 1
