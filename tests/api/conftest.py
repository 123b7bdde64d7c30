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


@pytest.fixture
def fill(world: World) -> Any:
    """`fill(path)`: an OpenAPI path template with real objects of the `world` fixture (a
    reservation, a subscription of the admin's and a delivery are made for it)."""
    from datetime import timedelta

    from django.utils import timezone

    from allocation.models import NotificationDelivery
    from allocation.notify.subscriptions import subscription_put
    from allocation.services.reservations import reservation_create

    start = timezone.now() + timedelta(days=1)
    reservation = reservation_create(user=world.member, pool="training", team="vision", gpus=1, model="",
                                     start=start, end=start + timedelta(hours=1))
    subscription, _ = subscription_put(user=world.admin, name="mine", kind="webhook", events=["lease.granted"],
                                    url="http://127.0.0.1:9/hook")
    delivery = NotificationDelivery.objects.create(target="ops", kind="webhook", event="lease.granted",
                                                   event_key="fill", team="vision", occurred_at=timezone.now())
    ids = {"hosts": world.host_id, "leases": world.lease_id, "quotas": world.quota_id,
           "reservations": reservation.pk, "audit-events": world.event_id,
           "notifications/subscriptions": subscription.pk, "notifications/deliveries": delivery.pk}
    names = {"pools": "training", "teams": "vision", "priority-classes": "default"}

    def fill_path(path: str) -> str:
        parts = path.split("/")
        resource = parts[4] if parts[3] == "history" else (
            "/".join(parts[3:5]) if parts[3] == "notifications" else parts[3])
        return (path.replace("{uuid}", world.gpu_uuid).replace("{id}", str(ids.get(resource, "")))
                .replace("{name}", names.get(resource, "")))

    return fill_path
