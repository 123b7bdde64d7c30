"""The ledger's one SQL twin (`ledger_close_sql`, the fair-share part of ending a lease in one
statement) is the policy's arithmetic (`fairshare.decay` + `fairshare.interval_usage`) for any
lease, any existing ledger row and any half-life."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from allocation.ledger import ledger_close_sql
from allocation.models import SchedulerSettings, Team, UsageLedger
from allocation.policy.fairshare import decay, interval_usage

pytestmark = pytest.mark.django_db

BASE = datetime(2025, 1, 1, tzinfo=UTC)
DAY_S = 86_400


def _at(seconds: int, micros: int) -> datetime:
    return BASE + timedelta(seconds=seconds, microseconds=micros)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(gpus=st.integers(1, 64), duration_s=st.integers(-600, 30 * DAY_S), micros=st.integers(0, 999_999),
       half_life_h=st.floats(0.01, 10_000.0), closed=st.floats(0.0, 1e10),
       as_of_shift_s=st.none() | st.integers(-60 * DAY_S, DAY_S))
# A tiny ledger idle for thousands of half-lives: once an underflow error in PostgreSQL (the
# product of two non-zero float8s was 0), found by this test.
@example(gpus=1, duration_s=60, micros=0, half_life_h=0.01, closed=5e-324, as_of_shift_s=-60 * DAY_S)
@example(gpus=1, duration_s=60, micros=0, half_life_h=0.01, closed=1e-30, as_of_shift_s=-60 * DAY_S)
@example(gpus=1, duration_s=60, micros=0, half_life_h=1.0, closed=1e-99, as_of_shift_s=-DAY_S)
def test_ledger_close_sql_is_the_policy_arithmetic(gpus: int, duration_s: int, micros: int, half_life_h: float,
                                                    closed: float, as_of_shift_s: int | None) -> None:
    ended = _at(40 * DAY_S, micros)
    granted = ended - timedelta(seconds=duration_s)
    h = half_life_h * 3600.0
    with transaction.atomic():
        SchedulerSettings.objects.update_or_create(pk=1, defaults={"fair_share_half_life_hours": half_life_h})
        team = Team.objects.create(name="t")
        start, end = granted.timestamp(), ended.timestamp()
        if as_of_shift_s is None:
            want, want_as_of = interval_usage(gpus, start, end, end, h), ended
        else:
            as_of = ended + timedelta(seconds=as_of_shift_s)
            UsageLedger.objects.create(team=team, closed_usage=closed, as_of=as_of)
            t = max(ended, as_of)
            want = (decay(closed, (t - as_of).total_seconds(), h)
                    + interval_usage(gpus, start, end, t.timestamp(), h))
            want_as_of = t
        sql, params = ledger_close_sql(team_id=team.pk, gpus=gpus, granted_at=granted, ended_at=ended)
        with connection.cursor() as cur:
            cur.execute(sql, params)
        row = UsageLedger.objects.get(team=team)
        transaction.set_rollback(True)  # each example starts from an empty ledger
    # The SQL subtracts two powers where the policy multiplies (no cancellation): equal to far
    # below a GPU-second, not to the last bit.
    assert row.closed_usage == pytest.approx(want, rel=1e-7, abs=1e-6)
    assert row.as_of == want_as_of
