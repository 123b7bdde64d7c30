"""The GPU-hour meter on PostgreSQL: opened by the pass that grants, closed by every end (release,
expiry, preemption, loss), weighted for MIG slices and time-sliced replicas, and exact across
restarts (a pass killed midway meters nothing; a new worker meters nothing twice)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from allocation.economy.usage import usage_report
from allocation.engine import apply as engine_apply
from allocation.engine import run_pass, snapshot
from allocation.models import Lease, LeaseUsage
from allocation.services.leases import lease_release
from allocation.services.reaper import leases_mark_lost, leases_reap
from inventory.models import Gpu

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus}]
teams: [{name: a}, {name: b}]
priority_classes:
  - {name: high, value: 100}
  - {name: default, value: 0}
  - {name: low, value: -10, preemptible: true, grace_s: 0}
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 2, gpus_per_host: 4, model: "NVIDIA H100 80GB HBM3"}
"""


@pytest.fixture
def ann(apply_yaml: Any, make_user: Any, api: Any) -> Any:
    apply_yaml(FLEET)
    return api(make_user("ann", teams=("a",)))


def _granted(client: Any, gpus: int = 2, **body: Any) -> str:
    lease = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": gpus, **body}, format="json").json()
    run_pass()
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    return str(lease["id"])


def _backdate(lease_id: str, hours: float) -> None:
    """As if the lease had been granted `hours` ago (its meter row and its own timestamp)."""
    at = timezone.now() - timedelta(hours=hours)
    LeaseUsage.objects.filter(lease_id=lease_id, ended_at__isnull=True).update(started_at=at)
    Lease.objects.filter(pk=lease_id).update(granted_at=at)


def _hours(**kw: Any) -> float:
    now = timezone.now()
    report = usage_report(since=now - timedelta(days=1), until=now + timedelta(hours=1), group_by="team",
                          now=now, **kw)
    return report.total_gpu_hours


def test_a_grant_opens_one_meter_row_with_the_lease_model_and_weight(ann) -> None:
    lease_id = _granted(ann, gpus=3)
    row = LeaseUsage.objects.get(lease_id=lease_id)
    lease = Lease.objects.get(pk=lease_id)
    assert row.ended_at is None and row.started_at == lease.granted_at
    assert row.gpu_equiv == 3.0 and row.model == "NVIDIA H100 80GB HBM3"
    assert (row.team.name, row.pool.name) == ("a", "gpus")


def test_a_running_lease_counts_up_to_now_and_a_release_closes_the_meter(ann) -> None:
    lease_id = _granted(ann, gpus=2)
    _backdate(lease_id, 3)
    assert _hours() == pytest.approx(6.0, abs=0.01)
    lease_release(lease=lease_id, actor="ann")
    row = LeaseUsage.objects.get(lease_id=lease_id)
    assert row.ended_at == Lease.objects.get(pk=lease_id).ended_at
    frozen = _hours()
    assert frozen == pytest.approx(6.0, abs=0.01)
    assert _hours() == frozen  # ended: it no longer grows


def test_expiry_preemption_and_loss_each_close_the_meter(ann, make_user, api) -> None:
    expiring = _granted(ann, gpus=1, ttl_seconds=60)
    victim = _granted(ann, gpus=6, priority_class="low", same_host=False)
    Lease.objects.filter(pk=expiring).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert leases_reap()["expired"] == 1
    bob = api(make_user("bob", teams=("b",)))
    bob.post("/api/v1/leases/", {"pool": "gpus", "gpus": 8, "priority_class": "high", "same_host": False},
             format="json")
    run_pass()
    assert Lease.objects.get(pk=victim).state == "preempted"
    high = Lease.objects.get(team__name="b")
    run_pass()
    assert Lease.objects.get(pk=high.pk).state == "granted"
    leases_mark_lost([high.pk], reason_prefix="test")
    for lease_id in (expiring, victim, high.pk):
        row = LeaseUsage.objects.get(lease_id=lease_id)
        assert row.ended_at is not None and row.ended_at == Lease.objects.get(pk=lease_id).ended_at
    assert not LeaseUsage.objects.filter(ended_at__isnull=True).exists()


def test_a_requeued_lease_meters_both_grants_and_nothing_in_between(ann) -> None:
    lease_id = _granted(ann, gpus=2, requeue_on_loss=True)
    _backdate(lease_id, 2)
    leases_mark_lost([lease_id], reason_prefix="host offline")
    assert Lease.objects.get(pk=lease_id).state == "pending"
    first = LeaseUsage.objects.get(lease_id=lease_id)
    assert first.ended_at is not None
    LeaseUsage.objects.filter(pk=first.pk).update(ended_at=first.ended_at - timedelta(hours=1))  # lost 1 h ago
    run_pass()
    assert Lease.objects.get(pk=lease_id).state == "granted"
    assert LeaseUsage.objects.filter(lease_id=lease_id).count() == 2
    _backdate(lease_id, 0.5)  # the second grant, half an hour ago
    assert _hours() == pytest.approx(2 * 1 + 2 * 0.5, abs=0.01)


def test_mig_slices_meter_their_share_of_the_parent_and_replicas_one_nth(ann) -> None:
    host_a, host_b = sorted({g.host_id for g in Gpu.objects.all()})
    Gpu.objects.filter(host_id=host_a).update(mig_profile="3g.40gb")
    Gpu.objects.filter(host_id=host_b).update(shared_replicas=4, physical_uuid="GPU-phys")
    mig = _granted(ann, gpus=4, model="MIG 3g.40gb")
    shared = _granted(ann, gpus=4)
    assert LeaseUsage.objects.get(lease_id=mig).gpu_equiv == pytest.approx(4 * 3 / 7)
    assert LeaseUsage.objects.get(lease_id=shared).gpu_equiv == pytest.approx(4 * 0.25)
    _backdate(mig, 7)
    _backdate(shared, 1)
    assert _hours() == pytest.approx(4 * 3 / 7 * 7 + 1.0, abs=0.01)


def test_a_pass_killed_midway_meters_nothing_and_the_next_one_meters_once(ann, monkeypatch) -> None:
    lease = ann.post("/api/v1/leases/", {"pool": "gpus", "gpus": 2}, format="json").json()

    def killed(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("worker killed after writing the grants")

    real = engine_apply.bulk_set
    monkeypatch.setattr(engine_apply, "bulk_set", killed)
    with pytest.raises(SystemExit):
        run_pass()
    assert Lease.objects.get(pk=lease["id"]).state == "pending"
    assert not LeaseUsage.objects.exists()  # rolled back with the grant
    monkeypatch.setattr(engine_apply, "bulk_set", real)
    snapshot.forget()  # a new worker process: nothing remembered
    run_pass()
    snapshot.forget()
    run_pass()  # and another restart: the lease is running, not metered again
    assert LeaseUsage.objects.filter(lease_id=lease["id"]).count() == 1


def test_the_database_refuses_a_second_open_meter_row_for_a_lease(ann) -> None:
    lease_id = _granted(ann)
    row = LeaseUsage.objects.get(lease_id=lease_id)
    with pytest.raises(IntegrityError), transaction.atomic():
        LeaseUsage.objects.create(lease_id=lease_id, team_id=row.team_id, pool_id=row.pool_id,
                                  model=row.model, gpu_equiv=1.0, started_at=timezone.now())


def test_usage_over_a_window_clips_each_grant_to_it(ann) -> None:
    lease_id = _granted(ann, gpus=2)
    _backdate(lease_id, 10)
    now = timezone.now()
    report = usage_report(since=now - timedelta(hours=4), until=now - timedelta(hours=1), group_by="team", now=now)
    assert report.total_gpu_hours == pytest.approx(2 * 3, abs=0.01)
    future = usage_report(since=now + timedelta(hours=1), until=now + timedelta(hours=2), group_by="team", now=now)
    assert future.rows == ()
