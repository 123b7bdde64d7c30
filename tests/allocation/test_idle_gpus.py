"""Allocated but idle, on real PostgreSQL: a leased GPU below the threshold for the idle time is
flagged (by its lease's idle reclaim rule, else the settings), cleared when it works or its
telemetry stops, never when a process outside gpupool uses it; its idle time is metered into
hourly rows from the moment it was flagged, once however often the check runs."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.models import IdleUsage, Lease, LeaseGpu
from allocation.selectors.idle import idle_by_lease, idle_gpus, idle_gpus_by_team_and_pool
from allocation.services.idle_gpus import gpus_idle_check
from inventory.models import Gpu, GpuSample

pytestmark = pytest.mark.django_db

FLEET = """
pools: [{name: gpus, idle_reclaim: {below_util_pct: 5, for_s: 600, warn_s: 86400}}, {name: plain}]
teams: [{name: a}]
priority_classes: [{name: default, value: 0}]
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 4}
  - {name: sim-plain, kind: simulated, pool: plain, hosts: 1, gpus_per_host: 4}
"""
# On an hour, so the metered rows' hours are known.
NOW = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


@pytest.fixture
def ann(apply_yaml: Any, make_user: Any, api: Any, settings: Any) -> Any:
    settings.GPUPOOL = {**settings.GPUPOOL, "IDLE_BELOW_UTIL_PCT": 10, "IDLE_FOR_S": 1200}
    apply_yaml(FLEET)
    GpuSample.objects.all().delete()  # the simulated fleet's own samples; each test writes its own
    return api(make_user("ann", teams=("a",)))


def _granted(client: Any, gpus: int = 2, pool: str = "gpus") -> str:
    lease = client.post("/api/v1/leases/", {"pool": pool, "gpus": gpus}, format="json").json()
    run_pass()
    Lease.objects.filter(pk=lease["id"]).update(granted_at=NOW - timedelta(hours=2))
    return str(lease["id"])


def _gpus(lease_id: str) -> list[int]:
    return sorted(LeaseGpu.objects.filter(lease_id=lease_id, active=True).values_list("gpu_id", flat=True))


def _samples(gpu_ids: list[int], util: float, *, start: datetime, end: datetime) -> None:
    rows = []
    for gpu_id in gpu_ids:
        at = start
        while at <= end:
            rows.append(GpuSample(gpu_id=gpu_id, at=at, utilization_pct=util))
            at += timedelta(seconds=60)
    GpuSample.objects.bulk_create(rows)


def test_a_gpu_idle_for_its_pools_idle_time_is_flagged_and_a_busy_one_is_not(ann: Any) -> None:
    lease_id = _granted(ann)
    idle, busy = _gpus(lease_id)
    _samples([idle], 1.0, start=NOW - timedelta(minutes=15), end=NOW)
    _samples([busy], 70.0, start=NOW - timedelta(minutes=15), end=NOW)
    checked = gpus_idle_check(now=NOW)
    assert (checked.links, checked.flagged) == (2, 1)
    assert set(idle_gpus(now=NOW)) == {idle}
    # Its run as far back as decides the flag (for_s and one tolerated gap), not further: a first
    # check reads no more than that of each GPU.
    assert idle_gpus(now=NOW)[idle] == NOW - timedelta(minutes=12)
    lease = Lease.objects.get(pk=lease_id)
    assert idle_gpus_by_team_and_pool(now=NOW) == {(lease.team_id, lease.pool_id): 1}
    assert idle_by_lease([lease_id], now=NOW)[lease_id].gpus == 1
    # Flagged once the run it read reached the pool's for_s (600 s), 2 minutes before the check:
    # metered from then. (A lease the checks saw from its grant is metered from the true start.)
    assert IdleUsage.objects.get().gpu_seconds == pytest.approx(120.0)


def test_without_a_rule_the_settings_decide(ann: Any) -> None:
    lease_id = _granted(ann, pool="plain")
    gpu = _gpus(lease_id)[0]
    _samples([gpu], 8.0, start=NOW - timedelta(minutes=15), end=NOW)  # below 10%, but for 15 min < 20
    assert gpus_idle_check(now=NOW).flagged == 0
    _samples([gpu], 8.0, start=NOW + timedelta(minutes=1), end=NOW + timedelta(minutes=6))
    assert gpus_idle_check(now=NOW + timedelta(minutes=6)).flagged == 1


def test_work_or_silence_clears_the_flag(ann: Any) -> None:
    lease_id = _granted(ann, gpus=1)
    gpu = _gpus(lease_id)[0]
    _samples([gpu], 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    assert gpus_idle_check(now=NOW).flagged == 1
    _samples([gpu], 50.0, start=NOW + timedelta(minutes=1), end=NOW + timedelta(minutes=1))
    assert gpus_idle_check(now=NOW + timedelta(minutes=1)).flagged == 0
    assert idle_gpus(now=NOW + timedelta(minutes=1)) == {}
    _samples([gpu], 0.0, start=NOW + timedelta(minutes=2), end=NOW + timedelta(minutes=13))
    assert gpus_idle_check(now=NOW + timedelta(minutes=13)).flagged == 1  # a new run, 11 minutes long
    # No sample for longer than the tolerated gap: nothing can be told, the flag falls.
    assert gpus_idle_check(now=NOW + timedelta(minutes=20)).flagged == 0


def test_a_gpu_used_outside_gpupool_is_never_idle(ann: Any) -> None:
    lease_id = _granted(ann, gpus=1)
    gpu = _gpus(lease_id)[0]
    Gpu.objects.filter(pk=gpu).update(foreign=True)
    _samples([gpu], 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    assert gpus_idle_check(now=NOW).flagged == 0


def test_idle_time_is_metered_once_per_interval_into_hourly_rows(ann: Any) -> None:
    lease_id = _granted(ann, gpus=2)
    gpus = _gpus(lease_id)
    _samples(gpus, 0.0, start=NOW - timedelta(minutes=50), end=NOW + timedelta(minutes=30))
    gpus_idle_check(now=NOW - timedelta(minutes=50))  # the run's first sample: not flagged yet
    assert gpus_idle_check(now=NOW - timedelta(minutes=20)).metered_gpu_s == pytest.approx(2 * 20 * 60)
    # The same instant again (another worker, a retried task): nothing more.
    assert gpus_idle_check(now=NOW - timedelta(minutes=20)).metered_gpu_s == 0
    # Across the hour: 20 more minutes before it, 30 after it, for both GPUs.
    assert gpus_idle_check(now=NOW + timedelta(minutes=30)).metered_gpu_s == pytest.approx(2 * 50 * 60)
    rows = dict(IdleUsage.objects.values_list("hour", "gpu_seconds"))
    # Flagged at NOW - 40 min (the pool's for_s after the run's start).
    assert rows == {NOW - timedelta(hours=1): pytest.approx(2 * 40 * 60), NOW: pytest.approx(2 * 30 * 60)}
    row = IdleUsage.objects.select_related("team", "pool", "user").first()
    assert row is not None and (row.team.name, row.pool.name, row.user.username) == ("a", "gpus", "ann")
    assert row.model == Gpu.objects.get(pk=gpus[0]).model


def test_a_check_reads_a_fixed_number_of_queries_and_each_sample_once(ann: Any) -> None:
    leases = [_granted(ann, gpus=1) for _ in range(3)]
    gpus = [g for lease in leases for g in _gpus(lease)]
    _samples(gpus, 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    with CaptureQueriesContext(connection) as first:
        gpus_idle_check(now=NOW)
    _samples(gpus, 0.0, start=NOW + timedelta(minutes=1), end=NOW + timedelta(minutes=1))
    with CaptureQueriesContext(connection) as second:
        assert gpus_idle_check(now=NOW + timedelta(minutes=1)).flagged == 3
    assert len(first) == len(second) <= 10
    # The second check read only what came after the samples the first one folded in.
    read = next(q["sql"] for q in second.captured_queries if "inventory_gpusample" in q["sql"])
    assert f"to_timestamp({NOW.timestamp()})" in read, read


def test_an_ended_lease_is_no_longer_idle(ann: Any) -> None:
    lease_id = _granted(ann, gpus=1)
    _samples(_gpus(lease_id), 0.0, start=NOW - timedelta(minutes=15), end=NOW)
    gpus_idle_check(now=NOW)
    assert ann.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json").status_code == 200
    assert idle_gpus(now=NOW) == {} and idle_gpus_by_team_and_pool(now=NOW) == {}
