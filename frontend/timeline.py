"""The reservations timeline of the queue page: each pool's active reservations as blocks placed
on a time axis from now to the last end shown (at least a day, at most four weeks), as
percentages for plain CSS. Server-rendered; no business rule here (who may cancel is the
service's rule, spelled once in `can_cancel` for the buttons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from allocation.models import Reservation, Team
from core.roles import is_pool_admin

MIN_SPAN = timedelta(days=1)
MAX_SPAN = timedelta(days=28)


@dataclass
class Block:
    reservation: Reservation
    left: float  # % of the axis
    width: float  # % of the axis
    now_on: bool  # its window has begun
    can_cancel: bool


@dataclass
class PoolRow:
    pool: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Timeline:
    start: datetime
    end: datetime
    rows: list[PoolRow]
    ticks: list[tuple[float, datetime]]  # (% of the axis, moment)


def reservation_timeline(*, user: Any, now: datetime) -> Timeline:
    """Active reservations not yet ended, per pool, on one axis; blocks past the axis are cut."""
    rows = list(Reservation.objects.filter(state="active", end__gt=now)
                .select_related("pool", "team").order_by("pool__name", "start", "pk")[:500])
    last = max((r.end for r in rows), default=now + MIN_SPAN)
    end = now + min(max(last - now, MIN_SPAN), MAX_SPAN)
    span = (end - now).total_seconds()
    admin = is_pool_admin(user)
    mine = set() if admin else set(Team.objects.filter(members=user.pk).values_list("pk", flat=True))
    pools: dict[str, PoolRow] = {}
    for r in rows:
        left = max(0.0, (r.start - now).total_seconds() / span * 100)
        if left >= 100:
            continue
        right = min(100.0, (r.end - now).total_seconds() / span * 100)
        block = Block(r, round(left, 2), round(max(right - left, 0.5), 2), r.start <= now,
                      admin or r.team_id in mine)
        pools.setdefault(r.pool.name, PoolRow(r.pool.name)).blocks.append(block)
    ticks = [(i * 25.0, now + (end - now) * i / 4) for i in range(5)]
    return Timeline(now, end, list(pools.values()), ticks)
