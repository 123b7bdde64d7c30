"""Reads of the time series store, shaped as the charts draw them (the API answers the same).

A history is a list of charts; each chart has its timestamps, its series (values aligned with
the timestamps, null where nothing was known) and a summary per series (latest, mean, peak) that
is also the chart's text alternative. One indexed range read per table, whatever the fleet."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from allocation.models import Team
from history.choices import RANGES, Range, Step
from history.models import GpuPoint, ModelPoint, PoolPoint, TeamPoolPoint
from inventory.models import Gpu, GpuSample, Pool

History = dict[str, Any]
Chart = dict[str, Any]


@dataclass(frozen=True)
class Window:
    range: Range
    step: int
    start: datetime
    end: datetime


def window_for(range_name: str, *, now: datetime | None = None, step: int | None = None) -> Window:
    """The time window of a named range (`RANGES`); KeyError for an unknown name. `step` overrides
    the range's own resolution (per GPU the minutes reach less far back, see `gpu_history`)."""
    chosen = RANGES[range_name]
    end = now or timezone.now()
    return Window(chosen, step or chosen.step, end - timedelta(seconds=chosen.seconds), end)


def summary_of(values: list[float | None]) -> dict[str, float | None]:
    """Latest, mean and peak of the known values (None where there are none), rounded as they
    are read: whole numbers from 100 up, one decimal below."""
    known = [v for v in values if v is not None]
    if not known:
        return {"latest": None, "mean": None, "peak": None}
    return {"latest": _readable(known[-1]), "mean": _readable(sum(known) / len(known)),
            "peak": _readable(max(known))}


def _readable(value: float) -> float:
    return float(round(value)) if abs(value) >= 100 else round(value, 1)


def chart_json(chart_id: str, title: str, unit: str, at: list[datetime],
               series: list[tuple[str, str, list[float | None]]]) -> Chart:
    """One chart as history.js draws it: timestamps, and per series its values and summary."""
    return {"id": chart_id, "title": title, "unit": unit, "at": [t.isoformat() for t in at],
            "series": [{"key": key, "label": label, "values": values, "summary": summary_of(values)}
                       for key, label, values in series]}


def _history(window: Window, charts: list[Chart]) -> History:
    return {"range": window.range.name, "step_s": window.step, "start": window.start.isoformat(),
            "end": window.end.isoformat(), "charts": charts}


def _columns(rows: list[tuple[Any, ...]], names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: [row[i] for row in rows] for i, name in enumerate(names)}


_POOL_COLUMNS = ("at", "capacity", "allocated", "free", "pending_gpus", "queue_length", "queue_length_max",
                 "util_pct")


def pool_history(pool: Pool, window: Window) -> History:
    """Utilisation (the pool's and each GPU model's), allocated vs free, queue length."""
    rows = list(PoolPoint.objects.filter(pool=pool, step=window.step, at__gte=window.start, at__lte=window.end)
                .order_by("at").values_list(*_POOL_COLUMNS))
    c = _columns(rows, _POOL_COLUMNS)
    models: dict[str, dict[datetime, float]] = defaultdict(dict)
    for model, at, util in (ModelPoint.objects.filter(pool=pool, step=window.step, at__gte=window.start,
                                                      at__lte=window.end).values_list("model", "at", "util_pct")):
        models[model][at] = util
    per_model = [(f"model:{m}", m, [models[m].get(t) for t in c["at"]]) for m in sorted(models)]
    return _history(window, [
        chart_json("utilisation", "GPU utilisation", "%", c["at"],
               [("util_pct", "Pool mean", c["util_pct"]), *per_model]),
        chart_json("allocation", "Allocated vs free", "GPUs", c["at"],
               [("allocated", "Allocated", c["allocated"]), ("free", "Free", c["free"]),
                ("capacity", "Capacity", c["capacity"])]),
        chart_json("queue", "Queue", "leases", c["at"],
               [("queue_length", "Pending leases", c["queue_length"]),
                ("pending_gpus", "GPUs asked for", c["pending_gpus"])]),
    ])


_TEAM_COLUMNS = ("pool__name", "at", "held", "borrowed", "guaranteed", "limit", "pending_gpus", "wait_s",
                 "wait_max_s")


def team_history(team: Team, window: Window) -> History:
    """Per pool the team has history in: held vs guaranteed vs limit (and borrowed), and how long
    its pending leases waited (minutes)."""
    rows = list(TeamPoolPoint.objects.filter(team=team, step=window.step, at__gte=window.start,
                                             at__lte=window.end).order_by("pool__name", "at")
                .values_list(*_TEAM_COLUMNS))
    by_pool: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        by_pool[row[0]].append(row)
    charts = []
    for pool_name, pool_rows in by_pool.items():
        c = _columns(pool_rows, _TEAM_COLUMNS)
        charts.append(chart_json(f"quota-{pool_name}", f"{pool_name}: held vs guarantee and limit", "GPUs", c["at"],
                             [("held", "Held", c["held"]), ("guaranteed", "Guaranteed", c["guaranteed"]),
                              ("limit", "Limit", c["limit"]), ("borrowed", "Borrowed", c["borrowed"])]))
        charts.append(chart_json(f"wait-{pool_name}", f"{pool_name}: waiting time", "min", c["at"],
                             [("wait_s", "Mean wait", _minutes(c["wait_s"])),
                              ("wait_max_s", "Longest wait", _minutes(c["wait_max_s"]))]))
    return _history(window, charts)


def _minutes(seconds: list[float | None]) -> list[float | None]:
    return [None if s is None else round(s / 60, 2) for s in seconds]


_GPU_SERIES = (("util_pct", "Utilisation", "%"), ("memory_used_mb", "Memory used", "MiB"),
               ("temperature_c", "Temperature", "°C"), ("power_w", "Power", "W"))


def gpu_minutes_reach() -> timedelta:
    """How far back per-GPU minute samples go (inventory keeps TELEMETRY_HISTORY of them)."""
    return timedelta(seconds=settings.GPUPOOL["TELEMETRY_HISTORY"] * settings.GPUPOOL["SAMPLE_INTERVAL_S"])


def gpu_window(range_name: str, *, now: datetime | None = None) -> Window:
    """Per GPU a range is answered by minute samples only where they reach its start; else by the
    hourly points."""
    chosen = RANGES[range_name]
    minutes = chosen.step == Step.MINUTE and chosen.seconds <= gpu_minutes_reach().total_seconds()
    return window_for(range_name, now=now, step=Step.MINUTE if minutes else Step.HOUR)


def gpu_history(gpu: Gpu, window: Window) -> History:
    """Utilisation, memory, temperature and power of one GPU: its samples (minutes) or its hourly
    points (means)."""
    names = ("at", "utilization_pct", "memory_used_mb", "temperature_c", "power_w")
    if window.step == Step.MINUTE:
        source: Any = GpuSample.objects.filter(gpu=gpu)
    else:
        source = GpuPoint.objects.filter(gpu=gpu)
        names = ("at", "util_pct", "memory_used_mb", "temperature_c", "power_w")
    rows = list(source.filter(at__gte=window.start, at__lte=window.end).order_by("at").values_list(*names))
    at = [row[0] for row in rows]
    charts = [chart_json(key.split("_")[0], label, unit, at, [(key, label, [row[i + 1] for row in rows])])
              for i, (key, label, unit) in enumerate(_GPU_SERIES)]
    return _history(window, charts)
