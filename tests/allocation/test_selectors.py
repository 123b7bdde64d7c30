"""The shared counts every reader uses (dashboard, history, API, /metrics): a pool's queue
(`pending_by_pool`) and what each team holds (`team_gpus_held`)."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.choices import LeaseState
from allocation.engine import run_pass
from allocation.models import Lease, Team
from allocation.selectors import Held, Pending, pending_by_pool, team_gpus_held
from inventory.models import Pool

pytestmark = pytest.mark.django_db


def test_pending_by_pool_counts_waiting_leases_and_the_gpus_they_ask(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    spare = Pool.objects.get(name="spare")
    leases(pool, 2, gpus=8)  # one is granted, one waits
    leases(pool, 1, gpus=3, team="b")
    run_pass([pool.pk])
    assert pending_by_pool() == {pool.pk: Pending(2, 11)}
    assert pending_by_pool([spare.pk]) == {}
    leases(spare, 1, gpus=9)  # more than the pool has: waits for ever
    assert pending_by_pool([pool.pk, spare.pk]) == {pool.pk: Pending(2, 11), spare.pk: Pending(1, 9)}
    Lease.objects.filter(pool=spare).update(state=LeaseState.RELEASED)
    assert spare.pk not in pending_by_pool()


def test_team_gpus_held_counts_active_links_per_team_and_pool_and_the_borrowed_part(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    a, b = (Team.objects.get(name=name).pk for name in ("a", "b"))
    leases(pool, 2, gpus=2, team="a")
    leases(pool, 1, gpus=3, team="b")
    run_pass([pool.pk])
    # No quota: everything they hold is borrowed.
    assert team_gpus_held() == {(a, pool.pk): Held(4, 4), (b, pool.pk): Held(3, 3)}
    Lease.objects.filter(team_id=b).update(borrowed=False)
    assert team_gpus_held([b]) == {(b, pool.pk): Held(3, 0)}
    granted = Lease.objects.filter(team_id=a, state=LeaseState.GRANTED).first()
    assert granted is not None
    granted.gpu_links.update(active=False)  # an ended lease's links: no longer held
    assert team_gpus_held([a]) == {(a, pool.pk): Held(2, 2)}
