"""Grants are written set-based: the same rows and audit events as one by one, in a fixed number of
statements, and never to a lease that stopped being pending after the snapshot."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.engine.apply import apply_decisions
from allocation.engine.snapshot import read_pool
from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.policy import get_policy
from allocation.services.leases import lease_release
from inventory.models import Gpu, Pool

pytestmark = pytest.mark.django_db


def test_every_lease_granted_in_one_pass_gets_its_gpus_its_fields_and_exactly_one_audit_event(fleet, leases) -> None:
    pool = fleet(hosts=2)
    made = leases(pool, 6, gpus=2) + leases(pool, 4, gpus=1, team="b")
    report = run_pass([pool.pk])[0]
    assert sorted(report.granted) == sorted(str(lease.pk) for lease in made)
    held: list[int] = []
    for lease in Lease.objects.filter(pk__in=[m.pk for m in made]).select_related("host"):
        links = sorted(lease.gpu_links.filter(active=True).values_list("gpu_id", flat=True))
        assert len(links) == lease.gpu_count
        assert set(Gpu.objects.filter(pk__in=links).values_list("host_id", flat=True)) == {lease.host_id}
        held += links
        assert lease.host is not None and lease.granted_at is not None
        reason = f"granted {lease.gpu_count} GPU(s) on {lease.host.name}" + (
            " (borrowed capacity)" if lease.borrowed else "")
        assert (lease.state, lease.reason, lease.queue_position, lease.estimated_start) == (
            "granted", reason, None, None)
        assert lease.expires_at == lease.granted_at + timedelta(seconds=lease.ttl_seconds)
        [event] = AuditEvent.objects.filter(lease=lease).exclude(action="lease.created")
        assert (event.actor, event.action, event.object_type, event.object_id, event.message, event.at) == (
            "system:scheduler", "lease.granted", "lease", str(lease.pk), reason, lease.granted_at)
        assert event.data == {"from": "pending", "to": "granted", "gpus": event.data["gpus"],
                              "borrowed": lease.borrowed}
        assert sorted(event.data["gpus"]) == links
    assert len(held) == len(set(held)) == 16
    assert set(Gpu.objects.filter(pk__in=held).values_list("state", "leased")) == {("leased", True)}


def test_a_pass_granting_many_leases_takes_as_many_queries_as_one_granting_two(fleet, leases) -> None:
    large = fleet(hosts=2)
    small = Pool.objects.get(name="spare")
    leases(large, 12, gpus=1)
    leases(large, 2, gpus=2, team="b")
    leases(small, 2, gpus=1)
    for pool in (large, small):  # both with the configuration kept (a pass's first read of it is more)
        read_pool(pool, timezone.now())
    counts = {}
    for pool, granted in ((large, 14), (small, 2)):
        with CaptureQueriesContext(connection) as queries:
            report = run_pass([pool.pk])[0]
        assert len(report.granted) == granted
        counts[pool.name] = len(queries)
    assert counts["gpus"] == counts["spare"]


def test_a_lease_cancelled_after_the_snapshot_is_not_granted(fleet, leases) -> None:
    pool = fleet(hosts=1)
    kept, cancelled = leases(pool, 2, gpus=4)
    now = timezone.now()
    read = read_pool(pool, now)
    decisions = get_policy("fair")(read.snapshot)
    assert {g.lease_id for g in decisions.grants} == {str(kept.pk), str(cancelled.pk)}
    lease_release(lease=cancelled, actor="ann")  # between the pass's read and its writes
    with transaction.atomic():
        step = apply_decisions(pool, read, decisions, now)
    assert step.granted == [str(kept.pk)] and [c.lease_id for c in step.changes] == [str(kept.pk)]
    assert [row.lease_id for row in step.audit] == [str(kept.pk)]
    cancelled.refresh_from_db()
    assert cancelled.state == "released" and not LeaseGpu.objects.filter(lease=cancelled).exists()
    assert Gpu.objects.filter(pool=pool, leased=True).count() == 4
