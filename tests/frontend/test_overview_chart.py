"""The overview's utilisation chart reads the minutes the history recorded (one point a pool and
minute) and raw samples only outside them: a sample inside the recorded span is not read twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from frontend.selectors import utilisation_series
from history.choices import Step
from history.models import PoolPoint
from inventory.models import Gpu, GpuSample

pytestmark = pytest.mark.django_db


def _minute(at: Any) -> Any:
    return at.replace(second=0, microsecond=0)


def test_recorded_minutes_come_from_the_history_and_the_rest_from_samples(apply_yaml: Any) -> None:
    apply_yaml("""
pools: [{name: training}]
teams: [{name: vision}]
sources: [{name: sim, kind: simulated, pool: training, hosts: 2, gpus_per_host: 4}]
""")
    gpu = Gpu.objects.filter(pool__name="training").first()
    assert gpu is not None
    GpuSample.objects.all().delete()
    end = _minute(timezone.now())
    start = end - timedelta(minutes=20)
    # Minutes 20..11 ago recorded at 80%; a raw sample at 0% inside that span must not count.
    PoolPoint.objects.bulk_create([PoolPoint(pool=gpu.pool, step=Step.MINUTE, at=start + timedelta(minutes=m),
                                             capacity=8, allocated=0, free=8, pending_gpus=0, queue_length=0,
                                             queue_length_max=0, util_pct=80.0) for m in range(10)])
    GpuSample.objects.create(gpu=gpu, at=start + timedelta(minutes=5, seconds=10), utilization_pct=0.0)
    # Minutes 10..0 ago not recorded: raw samples at 20%.
    GpuSample.objects.bulk_create([GpuSample(gpu=gpu, at=start + timedelta(minutes=m, seconds=5), utilization_pct=20.0)
                                   for m in range(10, 20)])
    series = utilisation_series(start, end, buckets=2)[gpu.pool_id]
    assert [value for _, value in series] == [pytest.approx(80.0), pytest.approx(20.0)]


def test_without_recorded_minutes_the_samples_make_the_chart(apply_yaml: Any) -> None:
    apply_yaml("""
pools: [{name: training}]
sources: [{name: sim, kind: simulated, pool: training, hosts: 1, gpus_per_host: 2}]
""")
    gpus = list(Gpu.objects.filter(pool__name="training"))
    GpuSample.objects.all().delete()
    end = _minute(timezone.now())
    start = end - timedelta(minutes=4)
    GpuSample.objects.bulk_create([GpuSample(gpu=g, at=start + timedelta(minutes=1), utilization_pct=pct)
                                   for g, pct in zip(gpus, (10.0, 30.0), strict=True)])
    series = utilisation_series(start, end, buckets=2)[gpus[0].pool_id]
    assert [value for _, value in series] == [pytest.approx(20.0), None]
