"""The fair-share ledger in stripes: releases of one team add to their leases' stripes without
waiting on each other, and the stripes sum to the team's usage exactly."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import psycopg2
import pytest
from django.db import connection
from django.utils import timezone

from allocation.ledger import STRIPES, half_life_s, ledger_close_sql, ledger_stripe, team_usage_views
from allocation.models import Team, UsageLedger
from allocation.policy.fairshare import interval_usage
from tests.support import processes


def test_a_lease_s_stripe_is_its_id_s_and_every_stripe_is_used() -> None:
    ids = [uuid.uuid4() for _ in range(400)]
    assert {ledger_stripe(i) for i in ids} == set(range(STRIPES))
    assert all(ledger_stripe(i) == ledger_stripe(str(i)) for i in ids)


@pytest.mark.django_db
def test_the_stripes_sum_to_the_usage_of_the_leases_that_ended() -> None:
    team = Team.objects.create(name="striped")
    now = timezone.now()
    ended = [(4, now - timedelta(hours=3), now - timedelta(hours=1)), (2, now - timedelta(hours=2), now),
             (8, now - timedelta(minutes=30), now - timedelta(minutes=10))]
    for stripe, (gpus, granted, end) in enumerate(ended):
        sql, params = ledger_close_sql(team_id=team.pk, gpus=gpus, granted_at=granted, ended_at=end, stripe=stripe)
        with connection.cursor() as cur:
            cur.execute(sql, params)
    assert UsageLedger.objects.filter(team=team).count() == 3
    h, t = half_life_s(), now.timestamp()
    want = sum(interval_usage(gpus, granted.timestamp(), end.timestamp(), t, h) for gpus, granted, end in ended)
    assert team_usage_views(now)["striped"].decayed_usage == pytest.approx(want, rel=1e-7)


@pytest.mark.django_db(transaction=True)
def test_two_releases_of_a_team_in_two_stripes_do_not_wait_on_each_other() -> None:
    team = Team.objects.create(name="busy")
    now = timezone.now()
    first = ledger_close_sql(team_id=team.pk, gpus=1, granted_at=now - timedelta(minutes=5), ended_at=now, stripe=1)
    second = ledger_close_sql(team_id=team.pk, gpus=1, granted_at=now - timedelta(minutes=5), ended_at=now, stripe=2)
    other = psycopg2.connect(processes.test_database_url())  # a release not yet committed
    try:
        with other.cursor() as cur:
            cur.execute(*first)
        _within(second, seconds=2)  # a wait for the other's commit would end at the time-out
        with pytest.raises(Exception, match="statement timeout"):
            _within(first, seconds=1)  # the same stripe does wait: the row is the other's until it commits
        other.commit()
    finally:
        other.close()
    assert sorted(UsageLedger.objects.filter(team=team).values_list("stripe", flat=True)) == [1, 2]


def _within(statement: tuple[str, list[Any]], *, seconds: float) -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT set_config('statement_timeout', %s, false)", [str(int(seconds * 1000))])
        try:
            cur.execute(*statement)
        finally:
            cur.execute("SELECT set_config('statement_timeout', '0', false)")
