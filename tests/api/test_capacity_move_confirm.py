"""Confirming a capacity move by API: with the dry run's fingerprint it does what the preview said;
once the fleet changed, the same fingerprint is a 409 `preview_stale` and nothing changes. The host
and pool moves answer what they did; a held GPU picked without its host blocks a pool move."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease
from allocation.services.leases import lease_create, lease_release
from inventory.models import Gpu, Host, Pool

pytestmark = pytest.mark.django_db


def _host(name: str) -> Host:
    return Host.objects.get(name=name)


def _pools_of(host: Host) -> set[str]:
    return set(Gpu.objects.filter(host=host).values_list("pool__name", flat=True))


def test_a_confirm_with_the_fingerprint_does_what_the_preview_said(seeded: Any, api: Any) -> None:
    research = seeded.leases["research"]
    node = _host(research.host.name)
    admin = api(seeded.users["root"])
    url = f"/api/v1/hosts/{node.pk}/move/"
    preview = admin.post(url + "?dry_run=true", {"pool": "inference", "mode": "drain"}, format="json").json()
    done = admin.post(url, {"pool": "inference", "mode": "drain", "fingerprint": preview["fingerprint"]},
                      format="json")
    assert done.status_code == 200, done.content[:300]
    answer = done.json()
    assert answer["dry_run"] is False and answer["moved"] == 8
    assert answer["preempted"] == preview["preempted"] and answer["fingerprint"] == preview["fingerprint"]
    assert _pools_of(node) == {"inference"} and _host(node.name).state == "draining"
    assert Lease.objects.get(pk=research.pk).state == "preempted"
    assert list(AuditEvent.objects.filter(actor="root").order_by("id").values_list("action", flat=True))[-1] == \
        "capacity.move"


def test_a_stale_fingerprint_is_a_409_and_changes_nothing(seeded: Any, api: Any, database_rows: Any) -> None:
    free = _host("demo-node-3")
    admin = api(seeded.users["root"])
    url = f"/api/v1/hosts/{free.pk}/move/"
    preview = admin.post(url + "?dry_run=true", {"pool": "inference"}, format="json").json()
    assert preview["fence_hosts"] == []
    # Meanwhile a lease lands on that host: moving it now would cordon it, which nobody reviewed.
    training = Pool.objects.get(name="training")
    lease_release(lease=seeded.leases["waiting"], actor="alice")
    lease_create(user=seeded.users["carol"], pool=training, gpus=1, ttl_seconds=60)
    run_pass([training.pk])
    before = database_rows()
    stale = admin.post(url, {"pool": "inference", "fingerprint": preview["fingerprint"]}, format="json")
    assert stale.status_code == 409, stale.content[:300]
    body = stale.json()
    assert body["code"] == "preview_stale" and "fingerprint" in body["details"] and body["message"]
    assert database_rows() == before
    assert _pools_of(free) == {"training"}
    # A new dry run shows what changed, and its fingerprint confirms.
    fresh = admin.post(url + "?dry_run=true", {"pool": "inference"}, format="json").json()
    assert fresh["fingerprint"] != preview["fingerprint"] and fresh["fence_hosts"] == [
        {"id": free.pk, "name": free.name}]
    done = admin.post(url, {"pool": "inference", "fingerprint": fresh["fingerprint"]}, format="json")
    assert done.status_code == 200 and _pools_of(free) == {"inference"} and _host(free.name).state == "cordoned"


def test_a_gpu_move_checks_the_fingerprint_and_still_answers_the_gpu(seeded: Any, api: Any,
                                                                    database_rows: Any) -> None:
    gpu = Gpu.objects.filter(host=_host("demo-node-3")).order_by("index").first()
    assert gpu is not None
    admin = api(seeded.users["root"])
    url = f"/api/v1/gpus/{gpu.uuid}/move/"
    preview = admin.post(url + "?dry_run=true", {"pool": "inference"}, format="json").json()
    before = database_rows()
    wrong = admin.post(url, {"pool": "inference", "fingerprint": "0" * 16}, format="json")
    assert wrong.status_code == 409 and wrong.json()["code"] == "preview_stale"
    assert database_rows() == before
    moved = admin.post(url, {"pool": "inference", "fingerprint": preview["fingerprint"]}, format="json")
    assert moved.status_code == 200 and moved.json()["uuid"] == gpu.uuid and moved.json()["pool"] == "inference"


def test_a_held_gpu_picked_alone_blocks_a_pool_move_unless_it_follows_its_lease(
        seeded: Any, api: Any, database_rows: Any) -> None:
    lease = seeded.leases["vision"]
    gpu = Gpu.objects.filter(host=lease.host).order_by("index").first()
    assert gpu is not None
    admin = api(seeded.users["root"])
    url = "/api/v1/pools/inference/move/"
    preview = admin.post(url + "?dry_run=true", {"gpus": [gpu.uuid]}, format="json").json()
    assert preview["can_confirm"] is False and "select the whole host" in preview["blocked"][0]
    before = database_rows()
    blocked = admin.post(url, {"gpus": [gpu.uuid], "fingerprint": preview["fingerprint"]}, format="json")
    assert blocked.status_code == 409 and blocked.json()["code"] == "move_blocked"
    assert database_rows() == before
    follows = admin.post(url, {"gpus": [gpu.uuid], "held_alone": "follow_lease"}, format="json")
    assert follows.status_code == 200 and follows.json()["moved"] == 1
    assert Gpu.objects.get(pk=gpu.pk).pool.name == "inference"
    assert Lease.objects.get(pk=lease.pk).state == "granted"


@pytest.mark.parametrize(("body", "field"), [
    ({}, "gpus"),
    ({"gpus": ["GPU-nowhere"]}, "gpus"),
    ({"gpus": ["MIG-lab-0-0"]}, "gpus"),  # a MIG slice moves with its GPU
    ({"hosts": [99999]}, "hosts"),
    ({"hosts": ["x"]}, "hosts"),
    ({"hosts": [1], "mode": "yolo"}, "mode"),
    ({"hosts": [1], "held_alone": "sometimes"}, "held_alone"),
])
def test_a_pool_move_refuses_what_it_cannot_resolve(seeded: Any, api: Any, database_rows: Any,
                                                    body: dict[str, Any], field: str) -> None:
    before = database_rows()
    response = api(seeded.users["root"]).post("/api/v1/pools/training/move/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid" and field in response.json()["details"]
    assert database_rows() == before


def test_a_host_already_in_the_pool_has_nothing_to_move(seeded: Any, api: Any) -> None:
    lab = _host("lab-a100-0")
    response = api(seeded.users["root"]).post(f"/api/v1/hosts/{lab.pk}/move/", {"pool": "inference"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "nothing_to_move"
