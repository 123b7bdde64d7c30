"""Lease JSON rendered by allocation.api.lease_json (the fast path of every lease endpoint) is exactly
what LeaseSerializer rendered by DRF's stock JSON renderer gives: same keys, order, values and
formats, for pending, granted, released, requeued, bound-with-binding and preempted leases."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer as StockJSONRenderer

from allocation.api.lease_json import lease_dict, lease_dicts
from allocation.api.lease_topology import LeaseSerializer
from allocation.engine import run_pass
from allocation.models import Lease
from allocation.selectors import lease_list
from allocation.services.leases import lease_create, lease_release
from allocation.services.reaper import leases_mark_lost

pytestmark = pytest.mark.django_db


def _drf(lease_id: Any, user: Any) -> dict[str, Any]:
    """The reference: LeaseSerializer through DRF's stock renderer (stdlib json, DRF's encoder)."""
    lease = lease_list(user=user).get(pk=lease_id)
    return json.loads(StockJSONRenderer().render(LeaseSerializer(lease).data))


@pytest.fixture
def many_leases(world: Any) -> list[str]:
    from inventory.models import Pool

    alice = world.member
    training = Pool.objects.get(name="training")
    made = [world.lease_id]
    made.append(str(lease_create(user=alice, pool=training, gpus=2, ttl_seconds=600,
                                 binding={"kind": "process", "command": ["sleep", "1"], "env": {"A": "1"}})[0].pk))
    requeued = lease_create(user=alice, pool=training, gpus=1, requeue_on_loss=True)[0]
    released = lease_create(user=alice, pool="training", gpus=1, model="H100")[0]
    made += [str(requeued.pk), str(released.pk)]
    run_pass()
    leases_mark_lost([requeued.pk], reason_prefix="test")  # lost → pending again, its old link inactive
    lease_release(lease=released, actor="alice", reason="done")
    preempted = lease_create(user=alice, pool=training, gpus=1)[0]
    Lease.objects.filter(pk=preempted.pk).update(preempted_by_id=world.lease_id, state="preempted",
                                                 ended_at=timezone.now().replace(microsecond=0),
                                                 estimated_start=timezone.now() + timedelta(seconds=5))
    made.append(str(preempted.pk))
    return made


def test_lease_dicts_equal_leaseserializer_for_every_kind_of_lease(world: Any, many_leases: list[str]) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    lease_dicts(many_leases[:2])  # compiles the read of several ids (the watch feed's)
    with CaptureQueriesContext(connection) as queries:
        rendered = lease_dicts(many_leases)
    # Two statements (the rows, their links); the rows' read is the compiled, prepared one, its
    # ids one comma-separated text parameter (an ORM-built IN list would name each id apart).
    joined = ",".join(uuid.UUID(i).hex for i in many_leases)
    assert len(queries) == 2 and queries[0]["sql"].startswith("EXECUTE") and joined in queries[0]["sql"]
    assert [r["id"] for r in rendered] == many_leases
    states = {r["state"] for r in rendered}
    assert {"pending", "granted", "released", "preempted"} <= states, states
    assert any(r["binding"] for r in rendered) and any(r["gpus"] for r in rendered)
    for got in rendered:
        assert json.loads(json.dumps(got)) == _drf(got["id"], world.admin), got["id"]
        assert list(got) == list(LeaseSerializer.Meta.fields)


def test_a_loaded_lease_renders_the_same(world: Any, many_leases: list[str]) -> None:
    for lease in lease_list(user=world.admin).filter(pk__in=many_leases):
        assert json.loads(json.dumps(lease_dict(lease))) == _drf(lease.pk, world.admin)


def test_lease_dicts_leave_out_unknown_and_invisible_leases(world: Any, many_leases: list[str]) -> None:
    assert lease_dicts([]) == []
    assert lease_dicts(["not-a-uuid", "00000000-0000-0000-0000-000000000000"]) == []
    assert lease_dicts(many_leases, visible_to=world.other) == []
    assert len(lease_dicts(many_leases, visible_to=world.member)) == len(many_leases)


def test_every_lease_endpoint_answers_with_leaseserializers_json(world: Any, many_leases: list[str], api: Any) -> None:
    client = api(world.member)
    for lease_id in many_leases:
        assert client.get(f"/api/v1/leases/{lease_id}/").json() == _drf(lease_id, world.member)
    listed = client.get("/api/v1/leases/?limit=1000").json()["results"]
    assert listed == [_drf(item["id"], world.member) for item in listed] and len(listed) >= len(many_leases)
    created = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, "binding": {"kind": "pod", "pod": {
        "metadata": {"name": "x"}}}}, format="json", HTTP_IDEMPOTENCY_KEY="json-1")
    assert created.status_code == 201 and created.json() == _drf(created.json()["id"], world.member)
    replay = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, "binding": {"kind": "pod", "pod": {
        "metadata": {"name": "x"}}}}, format="json", HTTP_IDEMPOTENCY_KEY="json-1")
    assert replay.status_code == 200 and replay.json() == created.json()
    granted = next(r for r in lease_dicts(many_leases) if r["state"] == "granted")
    renewed = client.post(f"/api/v1/leases/{granted['id']}/renew/", {"ttl_seconds": 900}, format="json")
    assert renewed.status_code == 200 and renewed.json() == _drf(granted["id"], world.member)
    released = client.post(f"/api/v1/leases/{granted['id']}/release/", {}, format="json")
    assert released.status_code == 200 and released.json() == _drf(granted["id"], world.member)
    assert released.json()["gpus"] == granted["gpus"] and released.json()["state"] == "released"


def test_timestamps_keep_drfs_format(world: Any, api: Any) -> None:
    """ISO 8601 in UTC with a Z, microseconds when there are any (what DRF's DateTimeField gives)."""
    Lease.objects.filter(pk=world.lease_id).update(created_at=timezone.now().replace(microsecond=0),
                                                   estimated_start=timezone.now().replace(microsecond=123456))
    data = api(world.member).get(f"/api/v1/leases/{world.lease_id}/").json()
    assert data["created_at"].endswith("Z") and "." not in data["created_at"] and "+" not in data["created_at"]
    assert data["estimated_start"].endswith(".123456Z")
    assert data == _drf(world.lease_id, world.member)
