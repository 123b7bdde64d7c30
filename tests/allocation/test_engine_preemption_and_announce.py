"""Preemptions are written set-based with the same audit trail and ledger as one by one, and every
lease a pass grants or preempts is announced to watchers in one batch."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import allocation.engine
import allocation.lease_states
from allocation.models import AuditEvent, Lease, UsageLedger

pytestmark = pytest.mark.django_db


@pytest.fixture
def announced(monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[Any]], list[Any]]:
    """Batches of outbox rows the engine writes (one a pass), and leases announced one by one (none)."""
    batches: list[list[Any]] = []
    single: list[Any] = []
    real = allocation.engine.outbox_insert

    def recorded(changes: Any) -> Any:
        batches.append(list(changes))
        return real(changes)

    monkeypatch.setattr(allocation.engine, "outbox_insert", recorded)
    monkeypatch.setattr(allocation.lease_states, "announce_lease", lambda lease: single.append(lease.pk))
    return batches, single


def test_a_pass_that_preempts_and_grants_announces_both_in_one_batch(fleet, leases, announced) -> None:
    batches, single = announced
    pool = fleet(hosts=1)
    victims = leases(pool, 2, gpus=4, priority="best-effort")
    allocation.engine.run_pass([pool.pk])
    Lease.objects.filter(pk__in=[v.pk for v in victims]).update(granted_at=timezone.now() - timedelta(hours=1))
    [urgent] = leases(pool, 1, gpus=8, team="b", priority="high")
    batches.clear()

    report = allocation.engine.run_pass([pool.pk])[0]

    assert sorted(report.preempted) == sorted(str(v.pk) for v in victims)
    assert report.granted == [str(urgent.pk)] and report.freed_now == 2  # freed at once, granted in round 2
    assert len(batches) == 1 and single == []
    assert sorted((c.lease_id, c.state, c.pool_id) for c in batches[0]) == sorted(
        [(str(v.pk), "preempted", pool.pk) for v in victims] + [(str(urgent.pk), "granted", pool.pk)])
    team_of = {str(v.pk): v.team_id for v in victims} | {str(urgent.pk): urgent.team_id}
    assert all(c.team_id == team_of[c.lease_id] for c in batches[0])

    for victim in Lease.objects.filter(pk__in=[v.pk for v in victims]):
        assert victim.state == "preempted" and victim.preempted_by_id == urgent.pk
        assert victim.ended_at is not None and victim.ending_since is None
        assert not victim.gpu_links.filter(active=True).exists()
        events = AuditEvent.objects.filter(lease=victim).order_by("id")
        assert [e.action for e in events] == ["lease.granted", "lease.preempted", "lease.preempt"]
        preempted, notice = events[1], events[2]
        assert preempted.data == {"from": "granted", "to": "preempted"}
        assert preempted.message == victim.reason and victim.reason.startswith(f"preempted for lease {urgent.pk}: ")
        assert notice.data == {"victim": str(victim.pk), "by": str(urgent.pk), "victim_team": "a", "grace_s": 30,
                               "cause": "priority"}
    # The ledger took both victims' hour on 4 GPUs each (barely decayed over a 7-day half-life).
    closed = sum(UsageLedger.objects.filter(team__name="a").values_list("closed_usage", flat=True))  # its stripes
    assert 2 * 4 * 3600 * 0.99 < closed <= 2 * 4 * 3600 * 1.001


def test_a_preempted_lease_with_a_running_workload_keeps_its_gpus_through_its_grace(fleet, leases, announced,
                                                                                   django_capture_on_commit_callbacks,
                                                                                   monkeypatch) -> None:
    batches, _ = announced
    unbinds: list[str] = []
    monkeypatch.setattr(allocation.engine, "request_unbind", unbinds.append)
    pool = fleet(hosts=1)
    [victim] = leases(pool, 1, gpus=8, priority="best-effort")
    allocation.engine.run_pass([pool.pk])
    Lease.objects.filter(pk=victim.pk).update(state="bound", binding_status={"handle": "pid-1", "state": "running"})
    [urgent] = leases(pool, 1, gpus=8, team="b", priority="high")
    batches.clear()

    with django_capture_on_commit_callbacks(execute=True):
        report = allocation.engine.run_pass([pool.pk])[0]

    assert report.preempted == [str(victim.pk)] and report.granted == [] and report.freed_now == 0
    assert [(c.lease_id, c.state) for c in batches[0]] == [(str(victim.pk), "preempted")]
    victim.refresh_from_db()
    assert victim.state == "preempted" and victim.ending_since is not None
    assert victim.binding_status == {"handle": "pid-1", "state": "stopping"}
    assert victim.gpu_links.filter(active=True).count() == 8
    assert unbinds == [str(victim.pk)]
    assert Lease.objects.get(pk=urgent.pk).state == "pending"
