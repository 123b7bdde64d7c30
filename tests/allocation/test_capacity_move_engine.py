"""A GPU moved to another pool while a lease holds it stays out of the new pool until that lease ends."""

from __future__ import annotations

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services.capacity import capacity_move
from inventory.models import Gpu, Pool

pytestmark = pytest.mark.django_db


def test_gpus_moved_from_under_a_running_lease_are_not_granted_twice(demo_fleet, make_user, api) -> None:
    alice = api(make_user("alice", teams=("vision",)))
    held = alice.post("/api/v1/leases/", {"pool": "training", "gpus": 8}, format="json").json()
    run_pass()
    host = Lease.objects.get(pk=held["id"]).host
    # Picked one by one (as the API moves them), not as a whole host: nothing fences the host off.
    capacity_move(gpu_ids=list(Gpu.objects.filter(host=host).values_list("pk", flat=True)),
                  pool=Pool.objects.get(name="inference"), actor="root", held_alone="follow_lease")
    # The inference pool now has 16 GPUs; 8 of them are still held by the training lease.
    wants = alice.post("/api/v1/leases/", {"pool": "inference", "gpus": 8, "model": "H100"}, format="json").json()
    run_pass()
    assert Lease.objects.get(pk=wants["id"]).state == "pending"
    alice.post(f"/api/v1/leases/{held['id']}/release/")
    run_pass()
    granted = Lease.objects.get(pk=wants["id"])
    assert granted.state == "granted" and granted.host == host
