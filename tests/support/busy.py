"""A busy demo fleet for history tests (tests/history and the pages in tests/frontend): leases
granted (some borrowed), some left waiting, and recorded minutes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone


@dataclass
class Busy:
    pools: dict[str, Any]
    teams: dict[str, Any]


def busy_fleet(make_user: Any) -> Busy:
    """Needs the demo fleet applied first. In training (32 H100) vision holds 12 (8 guaranteed,
    4 borrowed), nlp holds 16 (its limit) and waits for 24 more; every GPU reports 50 %."""
    from allocation.engine import run_pass
    from allocation.models import Lease, PriorityClass, Team
    from inventory.models import Gpu, Pool

    user = make_user("alice", teams=("vision",))
    pools = {p.name: p for p in Pool.objects.all()}
    teams = {t.name: t for t in Team.objects.all()}
    default = PriorityClass.objects.get(name="default")
    now = timezone.now()

    def lease(team: str, gpus: int, age_s: float) -> Lease:
        return Lease(team=teams[team], user=user, pool=pools["training"], priority_class=default,
                     gpu_count=gpus, ttl_seconds=3600, created_at=now - timedelta(seconds=age_s))

    Lease.objects.bulk_create([lease("vision", 4, 10) for _ in range(3)])
    run_pass([pools["training"].pk])
    Lease.objects.bulk_create([lease("nlp", 8, 600), lease("nlp", 8, 600), lease("nlp", 8, 600),
                               lease("nlp", 8, 600), lease("nlp", 8, 300)])
    run_pass([pools["training"].pk])
    Gpu.objects.update(utilization_pct=50.0)
    return Busy(pools=pools, teams=teams)


def record_minutes(n: int = 3) -> None:
    """History recorded for the last `n` minutes, the last one now."""
    from history.services import history_record

    now = timezone.now()
    for minutes_ago in reversed(range(n)):
        history_record(now=now - timedelta(minutes=minutes_ago))
