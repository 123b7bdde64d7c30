"""GPU-hour metering arithmetic: what one leased GPU counts as, and the calendar periods budgets
are counted over. Pure: no Django, no I/O (the simulator and the live meter share it).

A lease is metered from its grant to its end in *GPU-equivalents*: a whole GPU counts 1, a MIG
slice its share of the parent's compute slices (`3g.40gb` on an H100: 3/7), a time-sliced replica
1/N of its GPU (N replicas), so a GPU split any way still meters at most 1 GPU-hour per hour.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

# Compute slices of a whole GPU under MIG: 7 on A100, H100, H200, B200 and GB200; 4 on A30.
# Profiles name their share as `<n>g.<memory>` (`1g.10gb`, `3g.40gb`, `1c.3g.40gb` for a
# compute instance of a 3g slice, `1g.10gb+me`).
MIG_SLICES_DEFAULT = 7
MIG_SLICES_BY_MODEL = (("A30", 4),)
_PROFILE_SLICES = re.compile(r"(?:^|\.)(\d+)g\.")

PERIODS = ("week", "month", "quarter")


def mig_share(model: str, mig_profile: str) -> float:
    """The share of its parent GPU a MIG slice of `mig_profile` is (1.0 for no profile, or one
    whose slice count cannot be read: better to charge a whole GPU than nothing)."""
    if not mig_profile:
        return 1.0
    found = _PROFILE_SLICES.search(mig_profile)
    if found is None:
        return 1.0
    upper = model.upper()
    slices = next((n for name, n in MIG_SLICES_BY_MODEL if name in upper), MIG_SLICES_DEFAULT)
    return min(1.0, int(found.group(1)) / slices)


def gpu_equivalent(model: str, mig_profile: str = "", replicas: int = 1) -> float:
    """What one leased GPU row counts as in GPU-hours per hour: its MIG share divided among its
    time-sliced replicas."""
    return mig_share(model, mig_profile) / max(1, replicas)


def period_start(period: str, now: datetime) -> datetime:
    """The start (UTC midnight) of the calendar period holding `now`: ISO week (Monday), month,
    or quarter (January, April, July, October). ValueError for another period."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        return day - timedelta(days=day.weekday())
    if period == "month":
        return day.replace(day=1)
    if period == "quarter":
        return day.replace(day=1, month=(day.month - 1) // 3 * 3 + 1)
    raise ValueError(f"unknown period {period!r} (one of {', '.join(PERIODS)})")


def period_end(period: str, now: datetime) -> datetime:
    """When the period holding `now` ends (the next one's start): when a budget resets."""
    start = period_start(period, now)
    if period == "week":
        return start + timedelta(days=7)
    months = 1 if period == "month" else 3
    month = start.month - 1 + months
    return start.replace(year=start.year + month // 12, month=month % 12 + 1)


def overlap_hours(gpu_equiv: float, start: float, end: float, since: float, until: float) -> float:
    """GPU-hours of `gpu_equiv` GPUs held over [start, end) that fall within [since, until)
    (epoch seconds)."""
    return gpu_equiv * max(0.0, min(end, until) - max(start, since)) / 3600.0


def price_for(model: str, prices: Mapping[str, float]) -> float | None:
    """The price per GPU-hour of a GPU `model`: the price whose `model` names it exactly
    (case-insensitively), else the longest one found in it as a substring (`H100` prices
    `NVIDIA H100 80GB HBM3`); None when no price names it."""
    lowered = model.lower()
    best: tuple[int, float] | None = None
    for name, price in prices.items():
        key = name.lower()
        if key == lowered:
            return price
        if key and key in lowered and (best is None or len(key) > best[0]):
            best = (len(key), price)
    return None if best is None else best[1]
