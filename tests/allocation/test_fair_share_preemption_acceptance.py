"""Fair-share preemption end to end: leases requested through the API, passes run by
`schedule`, the pool's setting and interval read from the configuration."""

from __future__ import annotations

import pytest

from allocation.models import AuditEvent, Lease, PoolScheduling
from tests.allocation.acceptance import ask, held, schedule, two_teams

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(apply_yaml, make_user, api):
    return two_teams(apply_yaml, make_user, api)


def _turn_on(apply_yaml, interval_s: float) -> None:
    apply_yaml("pools:\n  - {name: gpus, scheduler: {fair_share_preemption: true, "
               f"fair_share_preemption_interval_s: {interval_s}}}}}\n")


def test_a_team_below_its_share_takes_borrowed_gpus_back_until_shares_meet(fleet, apply_yaml) -> None:
    ann, ben = fleet()
    _turn_on(apply_yaml, 0)
    ask(ann, 16)
    schedule()
    assert held("a") == 16

    b_leases = ask(ben, 16)
    out = schedule()
    assert "preempted 8" in out
    assert held("a") == 8 and held("b") == 8
    victims = Lease.objects.filter(team__name="a", state="preempted")
    assert victims.count() == 8
    assert all("preempted for fair share in pool gpus: team b" in v.reason for v in victims)
    events = AuditEvent.objects.filter(action="lease.preempt")
    assert {e.data["cause"] for e in events} == {"fair_share"}
    waiting = Lease.objects.filter(pk__in=b_leases, state="pending")
    assert waiting.count() == 8
    assert all("team b at" not in w.reason for w in waiting)

    # Team a asking again cannot take them back: its share would be above b's.
    ask(ann, 4)
    assert "preempted" not in schedule().replace("preempted 0", "")
    assert held("a") == 8 and held("b") == 8


def test_the_pool_waits_its_interval_between_fair_share_preemptions(fleet, apply_yaml) -> None:
    ann, ben = fleet()
    _turn_on(apply_yaml, 3600)
    ask(ann, 16)
    schedule()
    ask(ben, 2)
    schedule()
    assert held("b") == 2
    assert PoolScheduling.objects.get(pool__name="gpus").last_fair_share_preemption_at is not None

    ask(ben, 2)
    schedule()
    assert held("b") == 2  # within the hour: no second fair-share preemption
    assert Lease.objects.filter(team__name="b", state="pending").count() == 2


def test_it_stays_off_without_the_setting(fleet) -> None:
    ann, ben = fleet()
    ask(ann, 16)
    schedule()
    ask(ben, 4)
    schedule()
    assert held("a") == 16 and held("b") == 0
