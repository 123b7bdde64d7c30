"""`/metrics` exports every series whose labels are known in advance from the start, at 0 (every
pool, team and pool, cause, pending code), as Prometheus' guidance asks; a drain's preemptions count with
cause "drain"; allocated but idle GPUs show per pool and team. Read back through /metrics with
Prometheus' own parser."""

from __future__ import annotations

from datetime import timedelta
from itertools import product
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from allocation.choices import ACTIVE_STATES, PREEMPTION_CAUSES
from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.policy.codes import PendingCode
from allocation.policy.replay import CAUSES
from inventory.choices import GpuState

pytestmark = pytest.mark.django_db

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples() -> Samples:
    text = Client().get("/metrics").content.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _series(got: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in got.items() if n == name}


def test_a_fleet_where_nothing_happened_yet_exports_every_known_series_at_zero(fleet: Any) -> None:
    fleet(hosts=1)
    got = _samples()
    pools, teams = ("gpus", "spare"), ("a", "b")
    assert _series(got, "gpupool_leases_pending") == {
        (("code", c.value), ("pool", p)): 0 for p, c in product(pools, PendingCode)}
    assert _series(got, "gpupool_preemptions_total") == {
        (("cause", c), ("pool", p)): 0 for p, c in product(pools, PREEMPTION_CAUSES)}
    assert _series(got, "gpupool_team_gpus_held") == {(("pool", p), ("team", t)): 0 for p, t in product(pools, teams)}
    assert _series(got, "gpupool_gpus_idle_allocated") == {
        (("pool", p), ("team", t)): 0 for p, t in product(pools, teams)}
    assert _series(got, "gpupool_leases") == {(("pool", p), ("state", s)): 0 for p, s in product(pools, ACTIVE_STATES)}
    gpus = _series(got, "gpupool_gpus")
    assert set(gpus) == {(("pool", p), ("state", s)) for p, s in product(pools, GpuState.values)}
    assert gpus[(("pool", "gpus"), ("state", "free"))] == 8 and gpus[(("pool", "spare"), ("state", "leased"))] == 0
    for pool in pools:
        assert got[("gpupool_admission_seconds_count", (("pool", pool),))] == 0
        assert got[("gpupool_admission_seconds_bucket", (("le", "+Inf"), ("pool", pool)))] == 0


def test_every_cause_the_pass_can_give_is_a_known_cause() -> None:
    assert set(CAUSES) | {"idle", "drain"} == set(PREEMPTION_CAUSES)


def test_a_drain_counts_its_preemptions_with_cause_drain(fleet: Any, leases: Any, make_user: Any, api: Any) -> None:
    from inventory.models import Host

    pool = fleet(hosts=1)
    leases(pool, 3, gpus=2, team="a")
    run_pass([pool.pk])
    host = Host.objects.get(source__name="sim")
    response = api(make_user("root", admin=True)).post(f"/api/v1/hosts/{host.pk}/drain/", {}, format="json")
    assert response.status_code == 200, response.content
    got = _samples()
    assert got[("gpupool_preemptions_total", (("cause", "drain"), ("pool", "gpus")))] == 3
    assert got[("gpupool_preemptions_total", (("cause", "priority"), ("pool", "gpus")))] == 0
    events = AuditEvent.objects.filter(action="lease.preempt")
    assert {(e.data["cause"], e.data["host"], e.actor) for e in events} == {("drain", host.name, "root")}


def test_allocated_but_idle_gpus_show_per_pool_and_team(fleet: Any, leases: Any) -> None:
    from allocation.services.idle_gpus import gpus_idle_check
    from inventory.models import GpuSample

    pool = fleet(hosts=1)
    made = leases(pool, 2, gpus=2, team="b")
    run_pass([pool.pk])
    now = timezone.now()
    Lease.objects.filter(pk__in=[lease.pk for lease in made]).update(granted_at=now - timedelta(hours=1))
    idle = list(LeaseGpu.objects.filter(lease=made[0], active=True).values_list("gpu_id", flat=True))
    GpuSample.objects.all().delete()
    GpuSample.objects.bulk_create([GpuSample(gpu_id=g, at=now - timedelta(minutes=m), utilization_pct=0.0)
                                   for g in idle for m in range(40)])
    assert gpus_idle_check(now=now).flagged == 2
    got = _samples()
    assert got[("gpupool_gpus_idle_allocated", (("pool", "gpus"), ("team", "b")))] == 2
    assert got[("gpupool_gpus_idle_allocated", (("pool", "gpus"), ("team", "a")))] == 0
