"""A pass reads teams, classes, settings, quotas and reservations again only after someone changed
them (allocation/engine/pass_context.py), and sees every change at its next pass."""

from __future__ import annotations

from datetime import timedelta

import psycopg2
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import pass_context, run_pass
from allocation.engine.snapshot import read_pool
from allocation.models import PriorityClass, Quota, Reservation, SchedulerSettings, Team
from core.db.statements import positional

_CONFIG_TABLES = ("allocation_team", "allocation_priorityclass", "allocation_schedulersettings",
                  "allocation_quota", "allocation_reservation")


def _reads_of(queries: list[dict], table: str) -> int:
    """Statements naming `table`, the prepared ones (EXECUTE name) by their text."""
    from allocation.engine.lease_reads import CLASS_SQL, TEAM_SQL
    from allocation.engine.pass_context import QUOTA_SQL
    from core.db.statements import statement_name

    prepared = {statement_name(positional(sql)[0]): sql for sql in (CLASS_SQL, TEAM_SQL, QUOTA_SQL)}
    texts = [prepared.get(q["sql"].split("(")[0].removeprefix("EXECUTE "), q["sql"]) for q in queries]
    # Not the context statement itself (CONTEXT_SQL, the one naming the configuration number): it
    # reads, every pass, whether the running usage's sums are the half-life's (its settings row).
    texts = [text for text in texts if "allocation_configversion" not in text]
    return sum(f'"{table}"' in text or f" {table}" in text for text in texts)


def _version() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT version FROM allocation_configversion WHERE id = 1")
        return int(cur.fetchone()[0])


@pytest.mark.django_db
def test_a_pass_after_a_pass_reads_no_configuration(fleet, leases) -> None:
    pool = fleet(hosts=1)
    leases(pool, 2)
    run_pass([pool.pk])
    leases(pool, 1, team="b")
    with CaptureQueriesContext(connection) as queries:
        assert len(run_pass([pool.pk])[0].granted) == 1
    for table in _CONFIG_TABLES:
        assert _reads_of(queries.captured_queries, table) == 0, table
    assert sum("allocation_configversion" in q["sql"] for q in queries.captured_queries) == 1
    pass_context.forget()  # a new process reads it all once
    with CaptureQueriesContext(connection) as queries:
        run_pass([pool.pk])
    assert all(_reads_of(queries.captured_queries, table) for table in
               ("allocation_team", "allocation_priorityclass", "allocation_schedulersettings", "allocation_quota",
                "allocation_reservation"))


@pytest.mark.django_db(transaction=True)
def test_a_new_database_session_reads_the_configuration_again(fleet) -> None:
    """After a failover that lost the old primary's last commits, a number may be given again for
    other data: what is kept belongs to the session that read it."""
    pool = fleet(hosts=1)
    read_pool(pool, timezone.now())
    with CaptureQueriesContext(connection) as queries:
        read_pool(pool, timezone.now())
    assert _reads_of(queries.captured_queries, "allocation_team") == 0
    connection.close()  # the next statement opens a new session (a reconnection)
    with CaptureQueriesContext(connection) as queries:
        read_pool(pool, timezone.now())
    assert _reads_of(queries.captured_queries, "allocation_team") > 0


@pytest.mark.django_db
def test_every_change_of_the_configuration_is_read_by_the_next_pass(fleet, leases, make_user) -> None:
    pool = fleet(hosts=1)
    leases(pool, 1)
    read_pool(pool, timezone.now())  # kept from here on
    team = Team.objects.get(name="a")
    before = _version()

    Team.objects.filter(pk=team.pk).update(weight=3.5)
    snap = read_pool(pool, timezone.now()).snapshot
    assert snap.teams["a"].weight == 3.5 and _version() > before

    PriorityClass.objects.filter(name="default").update(value=42)
    assert read_pool(pool, timezone.now()).snapshot.priority_classes["default"].value == 42

    Quota.objects.create(team=team, pool=pool, guaranteed=3, limit=5)
    assert read_pool(pool, timezone.now()).snapshot.quotas[("a", pool.name)].limit == 5

    SchedulerSettings.objects.update_or_create(pk=1, defaults={"fair_share_half_life_hours": 2.0})
    assert read_pool(pool, timezone.now()).snapshot.half_life_s == 7200.0

    now = timezone.now()
    Reservation.objects.create(pool=pool, team=team, gpus=2, start=now - timedelta(minutes=1),
                               end=now + timedelta(hours=1), created_by=make_user("ann"))
    [reservation] = read_pool(pool, timezone.now()).snapshot.reservations
    assert (reservation.team, reservation.gpus) == ("a", 2)
    # Ended since it was read: left out without a read.
    assert read_pool(pool, now + timedelta(hours=2)).snapshot.reservations == ()


@pytest.mark.django_db
def test_the_fair_share_ledger_and_the_pools_own_settings_are_read_at_every_pass(fleet, leases) -> None:
    from allocation.models import PoolScheduling

    pool = fleet(hosts=1)
    leases(pool, 2, gpus=2)
    run_pass([pool.pk])
    first = read_pool(pool, timezone.now()).snapshot
    assert first.teams["a"].decayed_usage >= 0 and not first.pools[pool.name].fair_share_preemption
    at = timezone.now()
    PoolScheduling.objects.create(pool=pool, fair_share_preemption=True, last_fair_share_preemption_at=at)
    later = read_pool(pool, at + timedelta(minutes=5)).snapshot
    assert later.pools[pool.name].fair_share_preemption
    assert later.pools[pool.name].last_fair_share_preemption == at.timestamp()
    assert later.teams["a"].decayed_usage > first.teams["a"].decayed_usage  # 4 GPUs ran 5 minutes more


@pytest.mark.django_db
def test_a_team_made_after_the_context_was_read_is_read_with_its_lease(fleet, leases, monkeypatch) -> None:
    """Each statement has its own snapshot: a team committed between the context's read and the
    queue's is named by a lease the pass reads, and the pass reads the configuration again."""
    from allocation.engine import snapshot

    pool = fleet(hosts=1)
    read_pool(pool, timezone.now())
    real = snapshot.read_context

    def then_a_new_team(*args, **kwargs):
        context = real(*args, **kwargs)
        Team.objects.create(name="late", weight=2.0)
        leases(pool, 1, team="late")
        return context

    monkeypatch.setattr(snapshot, "read_context", then_a_new_team)
    snap = read_pool(pool, timezone.now()).snapshot
    assert [p.team for p in snap.pending] == ["late"] and snap.teams["late"].weight == 2.0


@pytest.mark.django_db(transaction=True)
def test_a_new_number_is_seen_only_once_its_change_is_committed() -> None:
    """Else a pass could keep the old configuration under the new number for good."""
    from django.db import transaction

    before = _version()
    params = connection.get_connection_params()
    other = psycopg2.connect(**params)
    other.autocommit = True
    try:
        with transaction.atomic():
            Team.objects.create(name="pending-change")
            assert _version() > before
            with other.cursor() as cur:
                cur.execute("SELECT version FROM allocation_configversion WHERE id = 1")
                assert cur.fetchone()[0] == before
        with other.cursor() as cur:
            cur.execute("SELECT version FROM allocation_configversion WHERE id = 1")
            assert cur.fetchone()[0] > before
    finally:
        other.close()
