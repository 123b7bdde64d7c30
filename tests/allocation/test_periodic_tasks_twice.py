"""High availability: two beats, or a retry that overlaps the run it retries, start the same
periodic work twice at once. Each such task must leave the same result as one run: checked here
with two threads (two database connections) started together on the real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease
from allocation.selectors.invariants import ledger_check
from allocation.services.reaper import leases_reap
from inventory.discovery import source_discover
from inventory.models import Gpu, Host, Source

pytestmark = pytest.mark.django_db(transaction=True)


def _twice(work: Callable[[], Any]) -> list[Any]:
    """Run `work` in two threads released together; their results (re-raising any error)."""
    start = threading.Barrier(2)
    results: list[Any] = [None, None]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def test_two_discoveries_of_one_source_take_turns(apply_yaml: Any) -> None:
    apply_yaml("pools: [{name: p}]\nsources: [{name: many, kind: simulated, pool: p, hosts: 40, "
               "gpus_per_host: 8}]\n", discover=False)
    source = Source.objects.get(name="many")
    reports = _twice(lambda: source_discover(source=Source.objects.get(pk=source.pk)))
    assert [r.errors for r in reports] == [[], []]
    assert Host.objects.filter(source=source).count() == 40
    assert Gpu.objects.filter(host__source=source).count() == 320


def test_two_reapers_expire_each_lease_once(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    made = leases(pool, 8)
    run_pass([pool.pk])
    Lease.objects.filter(pk__in=[m.pk for m in made]).update(expires_at=timezone.now() - timedelta(seconds=1))
    counts = _twice(leases_reap)
    assert sum(c["expired"] for c in counts) == 8
    assert AuditEvent.objects.filter(action="lease.expired").count() == 8
    assert not Gpu.objects.filter(leased=True).exists()
    assert ledger_check().ok


def test_two_passes_over_one_pool_grant_each_gpu_once(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    leases(pool, 12)
    _twice(lambda: run_pass([pool.pk]))
    assert Lease.objects.filter(state="granted").count() == 8
    assert AuditEvent.objects.filter(action="lease.granted").count() == 8
    assert Lease.objects.filter(state="pending").count() == 4
    assert ledger_check().ok


def test_two_history_recordings_of_one_minute_write_each_point_once(fleet: Any, leases: Any) -> None:
    from history.models import ModelPoint, PoolPoint, TeamPoolPoint
    from history.services import history_record

    pool = fleet(hosts=2)
    leases(pool, 6, gpus=2)
    leases(pool, 1, gpus=8, team="b")
    run_pass([pool.pk])
    now = timezone.now().replace(minute=0, second=30)  # the hour before is rolled up by both
    _twice(lambda: history_record(now=now - timedelta(minutes=1)))
    reports = _twice(lambda: history_record(now=now))
    assert reports[0].minute == reports[1].minute
    assert PoolPoint.objects.filter(step=60).count() == 4  # two minutes of the two pools
    assert PoolPoint.objects.filter(step=3600).count() == 2
    assert TeamPoolPoint.objects.filter(step=60, at=reports[0].minute).count() == 2
    assert ModelPoint.objects.filter(step=3600).count() == 2


def test_two_budget_refreshes_warn_of_each_threshold_once(fleet: Any, leases: Any, apply_yaml: Any) -> None:
    from allocation.models import Budget, LeaseUsage
    from allocation.services.budgets import budgets_refresh

    pool = fleet(hosts=1)
    leases(pool, 2, gpus=4)
    run_pass([pool.pk])
    apply_yaml("budgets: [{team: a, gpu_hours: 10, period: month}, {team: a, pool: gpus, gpu_hours: 10, "
               "period: week}]\n", discover=False)
    now = datetime(2026, 11, 18, 12, tzinfo=UTC)  # mid-week, mid-month: both periods hold the 2 h
    LeaseUsage.objects.update(started_at=now - timedelta(hours=2))  # 8 GPUs × 2 h: 160% of both
    for _ in range(3):
        counts = _twice(lambda: budgets_refresh(now=now))
        assert sum(c["budgets"] for c in counts) == 4
    warnings = AuditEvent.objects.filter(action="budget.warning")
    assert sorted((e.data["period"], e.data["threshold_pct"]) for e in warnings) == [("month", 100), ("week", 100)]
    assert set(Budget.objects.values_list("warned_pct", flat=True)) == {100}
