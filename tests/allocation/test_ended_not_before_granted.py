"""A lease never ends before it was granted, on PostgreSQL.

The pass stamps `granted_at` from its own read of the database's clock; whoever ends the lease
may carry an earlier `now` (a release whose transaction's time was taken before the pass read
the clock and which then waited for the pass's lock on the row; a reaper's sweep reading the
clock once; a process clock behind the database's). Ending the lease with that `now` must give
a zero duration, never a negative one: `ended_at == granted_at` on the lease row, and nothing
added to the GPU-hour meter or the fair-share ledger.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction

from allocation.engine import run_pass
from allocation.lease_states import lease_end, leases_end, transition
from allocation.models import Lease, LeaseUsage, UsageLedger
from allocation.services.admin import host_admin_action
from allocation.services.leases import lease_release
from core.db import db_now
from inventory.models import Host

pytestmark = pytest.mark.django_db
EARLY = timedelta(seconds=5)


@pytest.fixture
def granted(fleet: Any, leases: Any) -> Any:
    """`granted(n)` → n granted 1-GPU leases of team a, as the pass left them."""
    pool = fleet(hosts=1)

    def make(n: int = 1) -> list[Lease]:
        made = leases(pool, n)
        run_pass()
        rows = list(Lease.objects.filter(pk__in=[lease.pk for lease in made]))
        assert {lease.state for lease in rows} == {"granted"}
        return rows

    return make


def _stamp_grant(lease: Lease, at: datetime) -> Lease:
    """As if the pass had read its clock at `at`: the lease's grant and its meter row's start."""
    Lease.objects.filter(pk=lease.pk).update(granted_at=at)
    LeaseUsage.objects.filter(lease_id=lease.pk).update(started_at=at)
    return Lease.objects.get(pk=lease.pk)


def _assert_zero_duration(lease: Lease) -> None:
    lease.refresh_from_db()
    assert lease.granted_at is not None and lease.ended_at == lease.granted_at
    meter = LeaseUsage.objects.get(lease_id=lease.pk)
    assert meter.ended_at == meter.started_at == lease.granted_at
    assert set(UsageLedger.objects.filter(team_id=lease.team_id).values_list("closed_usage", flat=True)) == {0.0}


def test_lease_end_with_a_now_before_the_grant_ends_it_at_the_grant(granted) -> None:
    (lease,) = granted()
    assert lease.granted_at is not None
    with transaction.atomic():
        lease_end(lease, "released", actor="ann", reason="done", now=lease.granted_at - EARLY)
    assert lease.ended_at == lease.granted_at  # the instance, as the caller renders it
    _assert_zero_duration(lease)
    assert Lease.objects.get(pk=lease.pk).state == "released"


def test_leases_end_with_a_now_before_the_grants_ends_each_at_its_own_grant(granted) -> None:
    """The pass's preemptions end many leases with one `now`; each clamps to its own grant."""
    first, second = granted(2)
    assert first.granted_at is not None
    later = _stamp_grant(second, first.granted_at + timedelta(seconds=30))
    with transaction.atomic():
        locked = list(Lease.objects.select_for_update().filter(pk__in=[first.pk, second.pk]))
        leases_end(locked, "preempted", actor="system:scheduler", reasons=["test", "test"],
                   now=first.granted_at - EARLY)
    for lease in (first, later):
        _assert_zero_duration(lease)


def test_transition_to_an_end_state_never_sets_ended_at_before_granted_at(granted) -> None:
    (lease,) = granted()
    assert lease.granted_at is not None
    transition(lease, "expired", actor="system:reaper", now=lease.granted_at - EARLY, announce=False)
    assert lease.ended_at == lease.granted_at
    (other,) = granted()  # a `now` after the grant is kept as it is
    assert other.granted_at is not None
    transition(other, "expired", actor="system:reaper", now=other.granted_at + EARLY, announce=False)
    assert other.ended_at == other.granted_at + EARLY


def test_a_release_deciding_by_a_clock_before_the_grant_records_a_zero_duration(granted) -> None:
    """The whole release, on the database's clock: the pass's stamp lies after the release's
    `now` (its transaction's time), as when the release had waited for the pass's row lock."""
    (lease,) = granted()
    lease = _stamp_grant(lease, db_now() + timedelta(minutes=1))
    released = lease_release(lease=lease.pk, actor="ann")
    assert released.state == "released" and released.ended_at == lease.granted_at
    _assert_zero_duration(lease)


def test_a_drain_deciding_by_a_clock_before_the_grant_records_a_zero_duration(granted) -> None:
    (lease,) = granted()
    lease = _stamp_grant(lease, db_now() + timedelta(minutes=1))
    host_admin_action(host=Host.objects.get(leases=lease), verb="drain", actor="root")
    lease.refresh_from_db()
    assert lease.state == "preempted"
    _assert_zero_duration(lease)
