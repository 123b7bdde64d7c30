"""The teams' running usage from the sums a trigger keeps (allocation.running_usage), against the
running leases summed one by one: after a pass's grants, a release, a bulk end, a hand edit, an
insert and a delete of running lease rows; and the fallback while the half-life changed."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from allocation import running_usage
from allocation.choices import LeaseState
from allocation.engine import run_pass
from allocation.lease_states import lease_end, leases_end
from allocation.ledger import USAGE_SQL, half_life_s, running_rows, team_usage_views
from allocation.models import GrantLedger, Lease, SchedulerSettings, Team, UsageLedger
from allocation.policy.fairshare import interval_usage
from allocation.running_usage import COLUMNS, running_from_sums
from allocation.selectors.invariants import ledger_check

pytestmark = pytest.mark.django_db


def _reference(t: float, h: float) -> dict[int, float]:
    """Each team's running usage at `t`, lease by lease (interval_usage, as passes read it before)."""
    usage: dict[int, float] = {}
    for team_id, since, n in running_rows():
        usage[team_id] = usage.get(team_id, 0.0) + interval_usage(n, since, t, t, h)
    return {team: value for team, value in usage.items() if value}


def _sums() -> tuple[Any, ...]:
    with connection.cursor() as cur:
        cur.execute(USAGE_SQL)
        return cur.fetchone()


def _assert_sums_hold(later_s: float = 0.0) -> None:
    """The sums give every team's running usage, now and `later_s` from now; the invariant holds."""
    arrays = _sums()
    assert arrays[COLUMNS - 1], "the sums are the half-life's"
    h = half_life_s()
    for t in (timezone.now().timestamp(), timezone.now().timestamp() + later_s):
        got, want = running_from_sums(arrays, t, h), _reference(t, h)
        assert set(got) == set(want)
        for team, value in want.items():
            assert got[team] == pytest.approx(value, rel=1e-9, abs=1e-6)
    assert ledger_check().counts()["running_usage_sums"] == 0


def test_the_sums_follow_every_writer_of_the_lease_table(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=2)
    made = leases(pool, 3, gpus=2, team="a") + leases(pool, 2, gpus=1, team="b")
    run_pass([pool.pk])  # the pass's set-based grant
    assert Lease.objects.filter(state=LeaseState.GRANTED).count() == 5
    assert sum(GrantLedger.objects.values_list("gpus", flat=True)) == 8
    _assert_sums_hold(later_s=3600)

    first = Lease.objects.get(pk=made[0].pk)
    lease_end(first, LeaseState.RELEASED, actor="tester", reason="done")  # the one-statement release
    _assert_sums_hold(later_s=600)

    rest = list(Lease.objects.select_for_update().filter(pk__in=[made[1].pk, made[3].pk]))
    leases_end(rest, LeaseState.RELEASED, actor="tester", reasons=["bulk", "bulk"], now=timezone.now())
    _assert_sums_hold()

    # Granted → bound changes nothing; a hand edit of a running lease's size or grant time does.
    Lease.objects.filter(pk=made[2].pk).update(state=LeaseState.BOUND)
    Lease.objects.filter(pk=made[4].pk).update(gpu_count=3, granted_at=timezone.now() - timedelta(hours=5))
    _assert_sums_hold(later_s=60)

    # A running lease inserted as it is (a restore, a fixture), then one deleted.
    inserted = Lease.objects.create(team=Team.objects.get(name="b"), user=made[0].user, pool=pool,
                                    priority_class=made[0].priority_class, gpu_count=4, ttl_seconds=600,
                                    state=LeaseState.GRANTED, granted_at=timezone.now() - timedelta(minutes=30))
    _assert_sums_hold()
    Lease.objects.filter(pk=inserted.pk).delete()
    Lease.objects.filter(pk=made[2].pk).update(ended_at=timezone.now(), state=LeaseState.RELEASED)
    _assert_sums_hold()
    assert not _reference(timezone.now().timestamp(), half_life_s()).get(Team.objects.get(name="a").pk)


def test_ends_on_one_stripe_carry_its_weights_to_each_new_as_of(fleet: Any, leases: Any) -> None:
    """Three leases on ledger stripe 0, ended one after the other by the one-statement release
    (SQL) and the bulk end (Python): each end moves the row's as_of, and the weights of the ends
    before it must decay with it (else the team's running usage is off by their GPUs × the move)."""
    pool = fleet(hosts=1)
    ids = [uuid.UUID(int=uuid.uuid4().int >> 3 << 3) for _ in range(4)]  # stripe 0 (allocation.ledger)
    made = [leases(pool, 1, gpus=2, team="a", id=pk)[0] for pk in ids]
    run_pass([pool.pk])
    Lease.objects.filter(pk=ids[3]).update(granted_at=timezone.now() - timedelta(hours=20))
    for pk in ids[:2]:
        time.sleep(0.05)
        lease_end(Lease.objects.get(pk=pk), LeaseState.RELEASED, actor="tester", reason="done")
        _assert_sums_hold()
    time.sleep(0.05)
    leases_end([Lease.objects.select_for_update().get(pk=ids[2])], LeaseState.RELEASED, actor="tester",
               reasons=["bulk"], now=timezone.now())
    _assert_sums_hold(later_s=3600)
    # Three ends, and the hand edit of the fourth's grant time (it ended and ran again).
    assert UsageLedger.objects.get(team=made[0].team, stripe=0).ended_gpus == 8


def test_a_team_that_ran_and_stopped_has_no_running_usage_at_all(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    made = leases(pool, 2, gpus=4, team="a")
    run_pass([pool.pk])
    for lease in Lease.objects.filter(pk__in=[m.pk for m in made]):
        lease_end(lease, LeaseState.RELEASED, actor="tester", reason="done")
    # Exactly none (not a rounding residue): ties between teams stay ties.
    assert running_from_sums(_sums(), timezone.now().timestamp() + 86400, half_life_s()) == {}


def test_a_new_half_life_falls_back_to_the_leases_until_the_sums_are_rebuilt(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    leases(pool, 2, gpus=2, team="a")
    run_pass([pool.pk])
    Lease.objects.filter(state=LeaseState.GRANTED).update(granted_at=timezone.now() - timedelta(hours=30))
    SchedulerSettings.objects.get_or_create(pk=1)
    SchedulerSettings.objects.filter(pk=1).update(fair_share_half_life_hours=24.0)  # as an admin's edit would
    assert running_usage.half_life_changed() and not _sums()[COLUMNS - 1]
    now = timezone.now()
    want = _reference(now.timestamp(), 24 * 3600.0)[Team.objects.get(name="a").pk]
    assert team_usage_views(now)["a"].decayed_usage == pytest.approx(want, rel=1e-9)  # the leases, one by one
    running_usage.rebuild()
    assert not running_usage.half_life_changed()
    assert SchedulerSettings.objects.get(pk=1).weights_half_life_hours == 24.0
    _assert_sums_hold(later_s=7200)
    assert team_usage_views(now)["a"].decayed_usage == pytest.approx(want, rel=1e-9, abs=1e-6)


def test_applying_a_new_half_life_rebuilds_the_sums(fleet: Any, leases: Any, apply_yaml: Any) -> None:
    from tests.allocation.conftest import FLEET

    pool = fleet(hosts=1)
    leases(pool, 1, gpus=3, team="b")
    run_pass([pool.pk])
    apply_yaml(FLEET % {"hosts": 1} + "scheduler: {fair_share_half_life_hours: 12}\n", discover=False)
    assert SchedulerSettings.objects.get(pk=1).fair_share_half_life_hours == 12
    assert not running_usage.half_life_changed()
    _assert_sums_hold(later_s=3600)


def test_the_ledger_check_finds_sums_that_drifted(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    leases(pool, 1, gpus=2, team="a")
    run_pass([pool.pk])
    assert ledger_check().counts()["running_usage_sums"] == 0
    GrantLedger.objects.update(gpus=5)  # a manual edit, a bad restore
    assert ledger_check().counts()["running_usage_sums"] == 1
    running_usage.rebuild()
    assert ledger_check().counts()["running_usage_sums"] == 0
    assert UsageLedger.objects.filter(ended_gpus__gt=0).count() == 0
