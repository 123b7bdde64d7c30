"""Writes of the time series store: the minute's points, the hourly roll-up, the pruning.

`history_record` is what the periodic task runs once a minute. Every write is one bulk statement
per table, and every insert skips rows whose key (thing, step, at) exists: a second run in the
same minute, two beats, or a retry overlapping the run it retries, leave what one run leaves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.db import models, transaction
from django.db.models import Avg, Max
from django.db.models.functions import TruncHour
from django.utils import timezone

from history.choices import Step
from history.models import GpuPoint, ModelPoint, PoolPoint, TeamPoolPoint
from history.snapshot import pool_and_model_points, team_points
from inventory.models import GpuSample

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class _Rollup:
    """How one table's minutes become hours: the columns naming the thing, and per value column
    its aggregate over the hour's minutes."""

    model: type[models.Model]
    keys: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)


_GAUGE_ROLLUPS = (
    _Rollup(PoolPoint, ("pool_id",), {
        "capacity": Avg, "allocated": Avg, "free": Avg, "pending_gpus": Avg, "queue_length": Avg,
        "queue_length_max": Max, "util_pct": Avg}),
    _Rollup(TeamPoolPoint, ("team_id", "pool_id"), {
        "held": Avg, "held_max": Max, "borrowed": Avg, "guaranteed": Avg, "limit": Avg,
        "pending_gpus": Avg, "wait_s": Avg, "wait_max_s": Max}),
    _Rollup(ModelPoint, ("pool_id", "model"), {"gpus": Avg, "util_pct": Avg}),
)

# Per GPU the minutes are inventory's own samples (GpuSample); hours are rolled up from them.
_GPU_ROLLUP = _Rollup(GpuPoint, ("gpu_id",), {
    "util_pct": ("utilization_pct", Avg), "util_max_pct": ("utilization_pct", Max),
    "memory_used_mb": ("memory_used_mb", Avg), "temperature_c": ("temperature_c", Avg),
    "temperature_max_c": ("temperature_c", Max), "power_w": ("power_w", Avg)})


@dataclass
class RecordReport:
    minute: datetime
    # table -> points offered (minute and hour); a point whose key exists is skipped
    points: dict[str, int] = field(default_factory=dict)
    pruned: int = 0


def minute_keep() -> timedelta:
    return timedelta(hours=settings.GPUPOOL["HISTORY_MINUTE_HOURS"])


def hour_keep() -> timedelta:
    return timedelta(days=settings.GPUPOOL["HISTORY_HOUR_DAYS"])


def floor(at: datetime, step: int) -> datetime:
    """The start of the `step`-second bucket holding `at` (UTC)."""
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % step, tz=UTC)


def history_record(*, now: datetime | None = None) -> RecordReport:
    """Record this minute's points, roll finished hours up, prune what is past its retention.

    Safe to run twice (see the module's docstring). Returns the points offered to each table."""
    now = now or timezone.now()
    minute = floor(now, Step.MINUTE)
    report = RecordReport(minute=minute)
    pools, models_ = pool_and_model_points(minute)
    teams = team_points(minute)
    with transaction.atomic():
        for rows in (pools, teams, models_):
            if rows:
                report.points[rows[0]._meta.model_name or ""] = _insert(type(rows[0]), rows)
    for rollup in _GAUGE_ROLLUPS:
        _count(report, rollup.model, history_roll_up(rollup, now=now))
    _count(report, GpuPoint, gpu_history_roll_up(now=now))
    report.pruned = history_prune(now=now)
    return report


def _count(report: RecordReport, model: type[models.Model], n: int) -> None:
    name = model._meta.model_name or ""
    report.points[name] = report.points.get(name, 0) + n


def _insert(model: type[models.Model], rows: list[Any]) -> int:
    """One INSERT for all rows, skipping keys already present (ON CONFLICT DO NOTHING); returns
    how many rows were offered (counting what was new would cost a scan of a large table)."""
    if rows:
        model._default_manager.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def _pending_hours(model: type[models.Model], filters: dict[str, Any], reach: timedelta,
                   now: datetime) -> tuple[datetime, datetime] | None:
    """The finished hours not rolled up yet: from after the newest hourly point (no further back
    than the minutes kept, `reach`) to the start of the current hour. None: nothing to do."""
    end = floor(now, Step.HOUR)
    newest = model._default_manager.filter(**filters).aggregate(m=Max("at"))["m"]
    start = floor(now - reach, Step.HOUR)
    if newest is not None:
        start = max(start, newest + HOUR)
    return (start, end) if start < end else None


def history_roll_up(rollup: _Rollup, *, now: datetime) -> int:
    """Hourly points of one gauge table from its minute points (mean per hour, peaks as max).
    Returns the hourly points offered."""
    window = _pending_hours(rollup.model, {"step": Step.HOUR}, minute_keep(), now)
    if window is None:
        return 0
    aggregates = {f"agg_{name}": agg(name) for name, agg in rollup.values.items()}
    rows = (rollup.model._default_manager.filter(step=Step.MINUTE, at__gte=window[0], at__lt=window[1])
            .annotate(hour=TruncHour("at", tzinfo=UTC)).values(*rollup.keys, "hour")
            .annotate(**aggregates).order_by())
    points = [rollup.model(step=Step.HOUR, at=row["hour"], **{k: row[k] for k in rollup.keys},
                           **{name: row[f"agg_{name}"] for name in rollup.values}) for row in rows]
    return _insert(rollup.model, points)


def gpu_history_roll_up(*, now: datetime) -> int:
    """Hourly points per GPU from inventory's telemetry samples. Returns the points offered."""
    kept = timedelta(seconds=settings.GPUPOOL["TELEMETRY_HISTORY"] * settings.GPUPOOL["SAMPLE_INTERVAL_S"])
    window = _pending_hours(GpuPoint, {}, kept, now)
    if window is None:
        return 0
    aggregates = {f"agg_{name}": agg(column) for name, (column, agg) in _GPU_ROLLUP.values.items()}
    # The aggregates' names are built, which the plugin's TypedDict rows cannot follow.
    rows = cast(Iterable[dict[str, Any]], GpuSample.objects.filter(at__gte=window[0], at__lt=window[1])
                .annotate(hour=TruncHour("at", tzinfo=UTC)).values("gpu_id", "hour").annotate(**aggregates).order_by())
    points = [GpuPoint(gpu_id=row["gpu_id"], at=row["hour"],
                       **{name: row[f"agg_{name}"] for name in _GPU_ROLLUP.values}) for row in rows]
    return _insert(GpuPoint, points)


def history_prune(*, now: datetime) -> int:
    """Delete minute points older than their retention, and hourly ones older than theirs (one
    DELETE per table and resolution). Returns the rows deleted."""
    deleted = 0
    for rollup in _GAUGE_ROLLUPS:
        manager = rollup.model._default_manager
        deleted += manager.filter(step=Step.MINUTE, at__lt=now - minute_keep()).delete()[0]
        deleted += manager.filter(step=Step.HOUR, at__lt=now - hour_keep()).delete()[0]
    deleted += GpuPoint.objects.filter(at__lt=now - hour_keep()).delete()[0]
    return deleted
