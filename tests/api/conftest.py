"""API test fixtures: the demo fleet with a member, a member of another team and a pool admin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class World:
    member: Any        # alice, team vision
    other: Any         # carol, team nlp
    admin: Any         # root, pool admin in no team
    lease_id: str      # a pending lease of alice's team
    host_id: int
    gpu_uuid: str
    quota_id: int      # vision@training
    event_id: int      # an audit event of alice's lease


@pytest.fixture
def world(demo_fleet: Any, make_user: Any, api: Any) -> World:
    from allocation.models import AuditEvent, Quota
    from inventory.models import Gpu, Host

    alice = make_user("alice", teams=("vision",))
    carol = make_user("carol", teams=("nlp",))
    root = make_user("root", admin=True)
    lease = api(alice).post("/api/v1/leases/", {"pool": "training", "gpus": 1}, format="json")
    assert lease.status_code == 201, lease.content
    lease_id = lease.json()["id"]
    host = Host.objects.filter(source__name="demo").order_by("name").first()  # a training host
    assert host is not None
    return World(
        member=alice, other=carol, admin=root, lease_id=lease_id, host_id=host.pk,
        gpu_uuid=Gpu.objects.filter(host=host).order_by("index").values_list("uuid", flat=True)[0],
        quota_id=Quota.objects.get(team__name="vision", pool__name="training").pk,
        event_id=AuditEvent.objects.filter(lease_id=lease_id).values_list("pk", flat=True)[0],
    )


@pytest.fixture
def schema(client: Any) -> dict[str, Any]:
    """The OpenAPI document as the server serves it."""
    import json

    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.fixture
def database_rows() -> Any:
    """`database_rows()`: every row a capacity move could touch (GPUs, hosts, pools, leases and
    their GPUs, quotas, the audit log), to compare before and after a call."""
    from allocation.models import AuditEvent, Lease, LeaseGpu, Quota
    from inventory.models import Gpu, Host, Pool

    def rows() -> dict[str, list[tuple[Any, ...]]]:
        return {model.__name__: list(model.objects.order_by("pk").values_list())
                for model in (Gpu, Host, Pool, Lease, LeaseGpu, Quota, AuditEvent)}

    return rows
