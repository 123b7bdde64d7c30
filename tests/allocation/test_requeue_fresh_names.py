"""Every requeue of a lease names its next workload apart (pod name, lease directory on the
host): `<lease id>-<generation>` with the generation counting requeues. A lease requeued again
before its new workload started must not fall back to an earlier name, which its first
workload, still being stopped by the stranded copy, may hold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services.reaper import leases_mark_lost
from allocation.workloads.binding import bind_request
from inventory.models import Gpu, Host

pytestmark = pytest.mark.django_db


def _lose_host_of(lease_id: str) -> None:
    host = Lease.objects.get(pk=lease_id).host
    assert host is not None
    Host.objects.filter(pk=host.pk).update(reported_state="offline", state="offline",
                                           offline_since=timezone.now() - timedelta(hours=1))
    Gpu.objects.filter(host=host).update(state="offline")
    assert leases_mark_lost([lease_id], reason_prefix="host offline") == (1, 1)


def _name(lease: Lease) -> str:
    request = bind_request(lease)
    assert request is not None
    return request.binding_id


def test_each_requeue_gives_the_next_workload_a_name_never_used_before(demo_fleet: Any, make_user: Any,
                                                                       api: Any) -> None:
    client = api(make_user("alice", teams=("vision",)))
    lease_id = client.post("/api/v1/leases/", {"pool": "training", "gpus": 1, "requeue_on_loss": True},
                           format="json").json()["id"]
    run_pass()
    # Bound: a workload runs under the lease's first name.
    Lease.objects.filter(pk=lease_id).update(state="bound", binding_spec={"kind": "process", "command": ["true"]},
                                             binding_status={"handle": {"binding_id": lease_id}})
    names = [_name(Lease.objects.get(pk=lease_id))]
    _lose_host_of(lease_id)  # requeued; a stranded copy stops the first workload, by its name
    stranded = Lease.objects.exclude(pk=lease_id).get(binding_status__binding_of__lease=lease_id)
    assert _name(stranded) == names[0]
    run_pass()
    granted = Lease.objects.get(pk=lease_id)
    assert granted.state == "granted"
    names.append(_name(granted))
    # Lost again before its second workload started (no handle, no bind mark): requeued again.
    _lose_host_of(lease_id)
    run_pass()
    again = Lease.objects.get(pk=lease_id)
    assert again.state == "granted"
    names.append(_name(again))
    assert len(set(names)) == 3, names
    assert names == [lease_id, f"{lease_id}-1", f"{lease_id}-2"]
