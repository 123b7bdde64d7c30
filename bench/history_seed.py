"""Synthetic history for the benchmark and the browser tests: a day of 1-minute points and 90 days
of hourly points for every pool, team and GPU model that exists now, and per-GPU telemetry (the
last hour of samples, 90 days of hourly points) for the GPUs asked for. Smooth waves, so a chart
has a shape; written in bulk (a few seconds for a 2,000-host fleet)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone

BATCH = 5000


def _times(now: datetime) -> Iterator[tuple[int, datetime, float]]:
    """(step, at, phase in 0..1 over a day) for a day of minutes and 90 days of hours."""
    from history.choices import Step
    from history.services import floor

    minute, hour = floor(now, Step.MINUTE), floor(now, Step.HOUR)
    for i in range(1, 24 * 60):
        at = minute - timedelta(minutes=i)
        yield Step.MINUTE, at, (at.hour * 60 + at.minute) / 1440
    for i in range(1, 90 * 24):
        at = hour - timedelta(hours=i)
        yield Step.HOUR, at, at.hour / 24 + i / 97


def _wave(phase: float, low: float, high: float) -> float:
    return low + (high - low) * (0.5 + 0.35 * math.sin(2 * math.pi * phase) + 0.15 * math.sin(14 * math.pi * phase))


def seed_history(*, gpu_uuids: Iterable[str] = (), now: datetime | None = None) -> int:
    """Write the synthetic history; returns the rows written."""
    from inventory.models import Gpu

    now = now or timezone.now()
    rows = _gauge_rows(now)
    for gpu_id in Gpu.objects.filter(uuid__in=list(gpu_uuids)).values_list("pk", flat=True):
        rows += _gpu_rows(gpu_id, now)
    by_model: dict[type[models.Model], list[Any]] = {}
    for row in rows:
        by_model.setdefault(type(row), []).append(row)
    for model, batch in by_model.items():
        model._default_manager.bulk_create(batch, batch_size=BATCH, ignore_conflicts=True)
    return len(rows)


def _gauge_rows(now: datetime) -> list[Any]:
    from history.models import ModelPoint, PoolPoint, TeamPoolPoint
    from history.snapshot import pool_and_model_points, team_points

    pools, models = pool_and_model_points(now)
    teams = team_points(now)
    rows: list[Any] = []
    for step, at, phase in _times(now):
        for p in pools:
            used = round(_wave(phase, 0.3, 0.95) * p.capacity)
            queue = round(_wave(phase + 0.2, 0, 40))
            rows.append(PoolPoint(pool_id=p.pool_id, step=step, at=at, capacity=p.capacity, allocated=used,
                                  free=p.capacity - used, pending_gpus=queue * 4, queue_length=queue,
                                  queue_length_max=queue, util_pct=_wave(phase, 20, 90)))
        rows += [ModelPoint(pool_id=m.pool_id, model=m.model, step=step, at=at, gpus=m.gpus,
                            util_pct=_wave(phase + 0.1, 15, 95)) for m in models]
        for t in teams:
            held = round(_wave(phase + t.team_id / 7, 0, 1.4) * max(t.guaranteed, 4))
            rows.append(TeamPoolPoint(team_id=t.team_id, pool_id=t.pool_id, step=step, at=at, held=held,
                                      held_max=held, borrowed=max(held - t.guaranteed, 0), guaranteed=t.guaranteed,
                                      limit=t.limit, pending_gpus=t.pending_gpus,
                                      wait_s=_wave(phase, 0, 900), wait_max_s=_wave(phase, 300, 3600)))
    return rows


def _gpu_rows(gpu_id: int, now: datetime) -> list[Any]:
    """The last hour as samples (a GPU's minutes are inventory's samples), older hours as points."""
    from history.models import GpuPoint
    from inventory.models import GpuSample

    rows: list[Any] = []
    for step, at, phase in _times(now):
        values = {"memory_used_mb": _wave(phase, 2000, 70000), "temperature_c": _wave(phase, 35, 80),
                  "power_w": _wave(phase, 90, 650)}
        if step == 60 and now - at <= timedelta(hours=1):
            rows.append(GpuSample(gpu_id=gpu_id, at=at, utilization_pct=_wave(phase, 10, 100), **values))
        elif step == 3600:
            rows.append(GpuPoint(gpu_id=gpu_id, at=at, util_pct=_wave(phase, 10, 100), util_max_pct=100,
                                 temperature_max_c=85, **values))
    return rows
