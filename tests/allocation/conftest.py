"""A small fleet and leases made straight in the database, for the engine's tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

_BASE = timezone.now() - timedelta(hours=1)
_ORDER = itertools.count()

FLEET = """
pools: [{name: gpus}, {name: spare}]
teams: [{name: a}, {name: b}]
priority_classes:
  - {name: high, value: 100}
  - {name: default, value: 0}
  - {name: best-effort, value: -10, preemptible: true, grace_s: 30}
sources:
  - {name: sim, kind: simulated, pool: gpus, hosts: %(hosts)s, gpus_per_host: 8}
  - {name: sim-spare, kind: simulated, pool: spare, hosts: 1, gpus_per_host: 8}
"""


@pytest.fixture(autouse=True)
def _fresh_engine_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts as a new worker process would: no views kept, no tail write remembered."""
    from allocation.engine import apply, snapshot

    snapshot.forget()
    monkeypatch.setattr(apply, "_tail_written", {})
    yield
    snapshot.forget()


@pytest.fixture
def fleet(apply_yaml: Any, make_user: Any) -> Any:
    """`fleet(hosts=2)` → the pool "gpus" (hosts × 8 GPUs) and a user in teams a and b."""
    from inventory.models import Pool

    def build(hosts: int = 2) -> Any:
        apply_yaml(FLEET % {"hosts": hosts})
        make_user("ann", teams=("a", "b"))
        return Pool.objects.get(name="gpus")

    return build


@pytest.fixture
def leases(make_user: Any) -> Any:
    """`leases(pool, n, gpus=1, team="a", priority="default", **fields)` → n pending leases,
    created one after the other (so their queue order is their creation order)."""
    from allocation.models import Lease, PriorityClass, Team

    def make(pool: Any, n: int, gpus: int = 1, team: str = "a", priority: str = "default",
             **fields: Any) -> list[Lease]:
        user = make_user("ann")
        fields = {"ttl_seconds": 3600, **fields}
        made = [Lease(team=Team.objects.get(name=team), user=user, pool=pool,
                      priority_class=PriorityClass.objects.get(name=priority), gpu_count=gpus,
                      created_at=_BASE + timedelta(milliseconds=next(_ORDER)), **fields)
                for _ in range(n)]
        return Lease.objects.bulk_create(made)

    return make
