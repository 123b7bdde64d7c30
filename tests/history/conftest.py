"""History fixtures: the demo fleet with leases granted (some borrowed) and some left waiting."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone


@dataclass
class Busy:
    pools: dict[str, Any]
    teams: dict[str, Any]


@pytest.fixture
def busy_fleet(demo_fleet: Any, make_user: Any) -> Busy:
    """training (32 H100): vision holds 12 (8 guaranteed + 4 borrowed), nlp asks for 24 more than
    is free and waits; every GPU reports 50 % utilisation."""
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
