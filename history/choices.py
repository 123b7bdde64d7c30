"""Resolutions of the stored series, and the ranges the charts offer."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class Step(models.IntegerChoices):
    """A point's resolution, in seconds: it stands for the bucket [at, at + step)."""

    MINUTE = 60, "1 minute"
    HOUR = 3600, "1 hour"


@dataclass(frozen=True)
class Range:
    """A chart range: how far back it reaches and which resolution answers it."""

    name: str
    seconds: int
    step: int


# 1-minute points are kept for a day, hourly ones for 90 days (settings.GPUPOOL HISTORY_*), so
# the short ranges read minutes and the long ones hours.
RANGES: dict[str, Range] = {r.name: r for r in (
    Range("1h", 3600, Step.MINUTE),
    Range("24h", 24 * 3600, Step.MINUTE),
    Range("7d", 7 * 24 * 3600, Step.HOUR),
    Range("90d", 90 * 24 * 3600, Step.HOUR),
)}
DEFAULT_RANGE = "24h"
