"""Reads of the allocated-but-idle flags that each idle check leaves on the links of leased GPUs
(allocation.services.idle_gpus): for /metrics, the fleet, team and lease pages.

A flag counts only while the checks keep coming: one not renewed for three sample intervals (the
worker that runs the checks is down) is not shown, rather than shown stale. Each read is one query.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from allocation.choices import HOLDING_STATES
from allocation.models import LeaseGpu


def _flagged(now: datetime | None) -> QuerySet[LeaseGpu]:
    now = now or timezone.now()
    fresh = now - timedelta(seconds=3 * settings.GPUPOOL["SAMPLE_INTERVAL_S"])
    return LeaseGpu.objects.filter(active=True, lease__state__in=HOLDING_STATES, idle_flagged_at__isnull=False,
                                   idle_metered_until__gte=fresh)


def idle_gpus_by_team_and_pool(*, now: datetime | None = None) -> dict[tuple[int, int], int]:
    """(team id, pool id) of the lease → GPUs flagged idle; pairs with none are absent."""
    rows = _flagged(now).values_list("lease__team_id", "lease__pool_id").annotate(n=Count("pk")).order_by()
    return {(team, pool): n for team, pool, n in rows}


def idle_gpus(*, gpu_ids: Iterable[int] | None = None, now: datetime | None = None) -> dict[int, datetime]:
    """GPU id → since when it sits idle (the start of its idle run), for the GPUs flagged among
    `gpu_ids` (None: all)."""
    links = _flagged(now).filter(idle_since__isnull=False)
    if gpu_ids is not None:
        links = links.filter(gpu_id__in=list(gpu_ids))
    return {gpu_id: since for gpu_id, since in links.values_list("gpu_id", "idle_since") if since is not None}


@dataclass(frozen=True)
class LeaseIdle:
    gpus: int  # of the lease's GPUs flagged idle
    since: datetime | None  # the earliest of their idle runs' starts


def idle_by_lease(lease_ids: Iterable[Any], *, now: datetime | None = None) -> dict[str, LeaseIdle]:
    """Lease id (as str) → its GPUs flagged idle, for the leases among `lease_ids` that have any."""
    rows = (_flagged(now).filter(lease_id__in=list(lease_ids)).values("lease_id")
            .annotate(n=Count("pk"), since=Min("idle_since", filter=Q(idle_since__isnull=False))).order_by())
    return {str(row["lease_id"]): LeaseIdle(row["n"], row["since"]) for row in rows}
