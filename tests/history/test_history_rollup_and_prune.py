"""Downsampling: finished hours become hourly points (means, peaks as maxima), per GPU from the
inventory's telemetry samples; minute points go after a day, hourly ones after 90 days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from history.choices import Step
from history.models import GpuPoint, ModelPoint, PoolPoint, TeamPoolPoint
from history.services import history_prune, history_record

pytestmark = pytest.mark.django_db
HOUR0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _pool_minutes(pool: Any, start: datetime, values: list[float]) -> None:
    PoolPoint.objects.bulk_create([
        PoolPoint(pool=pool, step=Step.MINUTE, at=start + timedelta(minutes=i), capacity=32, allocated=v,
                  free=32 - v, pending_gpus=0, queue_length=i % 7, queue_length_max=i % 7,
                  util_pct=None if i % 2 else v)
        for i, v in enumerate(values)])


def test_a_finished_hour_becomes_one_point_of_means_and_peaks(demo_fleet: Any) -> None:
    from inventory.models import Pool

    pool = Pool.objects.get(name="training")
    _pool_minutes(pool, HOUR0, [float(i % 10) for i in range(60)])
    history_record(now=HOUR0 + timedelta(minutes=30))
    assert not PoolPoint.objects.filter(step=Step.HOUR).exists()  # the hour is not over yet
    history_record(now=HOUR0 + timedelta(hours=1, seconds=5))
    hour = PoolPoint.objects.get(pool=pool, step=Step.HOUR)
    assert hour.at == HOUR0
    # 60 minutes seeded; the recording at 9:30 replaced none (its key existed) and is in the hour.
    assert hour.allocated == pytest.approx(4.5)
    assert hour.queue_length_max == 6
    assert hour.util_pct == pytest.approx(sum(float(i % 10) for i in range(0, 60, 2)) / 30)  # nulls skipped
    history_record(now=HOUR0 + timedelta(hours=1, minutes=1))
    assert PoolPoint.objects.filter(step=Step.HOUR, pool=pool).count() == 1


def test_hours_missed_while_the_worker_was_down_are_caught_up_within_the_day(demo_fleet: Any) -> None:
    from inventory.models import Pool

    pool = Pool.objects.get(name="training")
    for h in range(5):
        _pool_minutes(pool, HOUR0 + timedelta(hours=h), [float(h)] * 3)
    history_record(now=HOUR0 + timedelta(hours=5, minutes=2))
    hours = list(PoolPoint.objects.filter(pool=pool, step=Step.HOUR).order_by("at").values_list("at", "allocated"))
    assert hours == [(HOUR0 + timedelta(hours=h), float(h)) for h in range(5)]


def test_team_and_model_points_roll_up_too(busy_fleet: Any) -> None:
    for minute in range(3):
        history_record(now=HOUR0 + timedelta(minutes=minute))
    history_record(now=HOUR0 + timedelta(hours=1))
    vision = TeamPoolPoint.objects.get(team=busy_fleet.teams["vision"], pool=busy_fleet.pools["training"],
                                       step=Step.HOUR)
    assert (vision.at, vision.held, vision.held_max, vision.limit) == (HOUR0, 12, 12, 24)
    assert ModelPoint.objects.filter(step=Step.HOUR).count() == 2


def test_per_gpu_hours_come_from_the_telemetry_samples(demo_fleet: Any, settings: Any) -> None:
    from inventory.models import Gpu, GpuSample

    settings.GPUPOOL = {**settings.GPUPOOL, "TELEMETRY_HISTORY": 10_000}  # keep the seeded samples
    GpuSample.objects.all().delete()
    gpu = Gpu.objects.order_by("pk").first()
    assert gpu is not None
    GpuSample.objects.bulk_create([
        GpuSample(gpu=gpu, at=HOUR0 + timedelta(minutes=m), utilization_pct=u, temperature_c=t, power_w=300,
                  memory_used_mb=1000)
        for m, u, t in [(0, 20, 40), (20, 40, 60), (40, 90, 80), (70, 5, 30)]])
    history_record(now=HOUR0 + timedelta(hours=1, minutes=30))
    point = GpuPoint.objects.get(gpu=gpu)
    assert point.at == HOUR0  # the 10:10 sample's hour is not over
    assert (point.util_pct, point.util_max_pct) == (50, 90)
    assert (point.temperature_c, point.temperature_max_c, point.power_w) == (60, 80, 300)
    history_record(now=HOUR0 + timedelta(hours=2, minutes=1))
    assert GpuPoint.objects.filter(gpu=gpu).count() == 2


def test_minutes_go_after_a_day_and_hours_after_ninety_days(demo_fleet: Any) -> None:
    from inventory.models import Gpu, Pool

    pool = Pool.objects.get(name="training")
    now = HOUR0 + timedelta(days=100)
    common = {"pool": pool, "capacity": 1, "allocated": 0, "free": 1, "pending_gpus": 0, "queue_length": 0,
              "queue_length_max": 0}
    PoolPoint.objects.bulk_create([
        PoolPoint(step=Step.MINUTE, at=now - timedelta(hours=23), **common),
        PoolPoint(step=Step.MINUTE, at=now - timedelta(hours=25), **common),
        PoolPoint(step=Step.HOUR, at=now - timedelta(days=89), **common),
        PoolPoint(step=Step.HOUR, at=now - timedelta(days=91), **common)])
    gpu = Gpu.objects.first()
    GpuPoint.objects.bulk_create([GpuPoint(gpu=gpu, at=now - timedelta(days=d)) for d in (2, 95)])
    assert history_prune(now=now) == 3
    kept = sorted(PoolPoint.objects.values_list("step", "at"))
    assert kept == [(Step.MINUTE, now - timedelta(hours=23)), (Step.HOUR, now - timedelta(days=89))]
    assert list(GpuPoint.objects.values_list("at", flat=True)) == [now - timedelta(days=2)]


def test_retention_follows_the_settings(demo_fleet: Any, settings: Any) -> None:
    from inventory.models import Pool

    settings.GPUPOOL = {**settings.GPUPOOL, "HISTORY_MINUTE_HOURS": 2}
    pool = Pool.objects.get(name="training")
    _pool_minutes(pool, HOUR0, [1.0, 1.0])
    history_prune(now=HOUR0 + timedelta(hours=2, seconds=30))
    assert PoolPoint.objects.filter(step=Step.MINUTE).count() == 1
