"""Several scheduler processes: a pass that finds its pool busy hands it over instead of waiting
(allocation.engine.handoff), and no request for a pass is lost. Two database connections (two
threads) on the real PostgreSQL; the pass in the middle is held there by its policy, not by a
timer."""

from __future__ import annotations

import threading
from typing import Any

import psycopg2
import pytest
from django.db import connection

from allocation import engine
from allocation.engine import run_pass, run_wanted_passes
from allocation.models import Lease, PassWanted
from allocation.policy import get_policy
from allocation.triggers import want_pass
from core.db import POOL_LOCKS, advisory_key
from tests.support import processes

pytestmark = pytest.mark.django_db(transaction=True)


def _holding_lock(pool_id: int) -> Any:
    """Another connection holding the pool's lock (a transaction in the middle of a write)."""
    other = psycopg2.connect(processes.test_database_url())
    with other.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(POOL_LOCKS, pool_id)])
    return other


def test_a_busy_pool_is_handed_over_and_its_wish_kept_for_the_holder(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    lease, = leases(pool, 1)
    PassWanted.objects.all().delete()
    other = _holding_lock(pool.pk)
    try:
        assert run_pass([pool.pk], hand_over=True) == []  # not waited for
        assert list(PassWanted.objects.values_list("pool_id", flat=True)) == [pool.pk]
        assert Lease.objects.get(pk=lease.pk).state == "pending"
    finally:
        other.rollback()  # the holder was no pass: the catch-up runs the wish
        other.close()
    assert [r.granted for r in run_wanted_passes()] == [[str(lease.pk)]]
    assert not PassWanted.objects.exists()


def test_a_wish_made_while_a_pass_claims_the_earlier_ones_does_not_wait(fleet: Any, leases: Any) -> None:
    """A pass has claimed the pool's wishes and not yet committed; a wish made meanwhile is
    recorded at once (it used to wait for that commit), and is there for the holder's look after
    its commit."""
    pool = fleet(hosts=1)
    leases(pool, 1)
    PassWanted.objects.all().delete()
    want_pass(pool.pk)
    other = psycopg2.connect(processes.test_database_url())  # the holder, in the middle of its pass
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(POOL_LOCKS, pool.pk)])
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('statement_timeout', '2000', false)")
        with other.cursor() as cur:
            cur.execute(f"DELETE FROM allocation_passwanted WHERE id IN (SELECT id FROM allocation_passwanted "
                        f"WHERE pool_id = {pool.pk} FOR UPDATE SKIP LOCKED)")  # handoff.lock_and_claim's claim
            assert cur.rowcount == 1
        want_pass(pool.pk)  # a wait here would end at the time-out, and the wish with it
        assert PassWanted.objects.filter(pool=pool).count() == 2  # ours, and the claimed one until it commits
        other.commit()
    finally:
        other.close()
        with connection.cursor() as cur:
            cur.execute("SELECT set_config('statement_timeout', '0', false)")
    assert list(PassWanted.objects.values_list("pool_id", flat=True)) == [pool.pk]


def test_a_handed_over_pass_claims_the_wish_it_serves(fleet: Any, leases: Any) -> None:
    pool = fleet(hosts=1)
    lease, = leases(pool, 1)
    PassWanted.objects.all().delete()
    want_pass(pool.pk)
    reports = run_pass([pool.pk], hand_over=True)
    assert [r.granted for r in reports] == [[str(lease.pk)]]  # one pass: the wish went with it
    assert not PassWanted.objects.exists()


def test_a_trigger_during_a_pass_makes_the_holder_pass_again(fleet: Any, leases: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Process 1 is in the middle of the pool's pass; a lease arrives and its trigger reaches
    process 2, which finds the pool busy and goes on at once. Process 1, once committed, passes
    the pool again and grants the new lease."""
    pool = fleet(hosts=1)
    first, = leases(pool, 1)
    PassWanted.objects.all().delete()
    inside, release = threading.Event(), threading.Event()
    fair = get_policy("fair")
    calls: list[int] = []

    def held_fair(snapshot: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the first pass waits here, lock held, until the test lets it go
            inside.set()
            assert release.wait(30)
        return fair(snapshot)

    monkeypatch.setattr(engine, "get_policy", lambda name: held_fair)
    reports: list[Any] = []
    errors: list[BaseException] = []

    def process_1() -> None:
        try:
            reports.extend(run_pass([pool.pk], hand_over=True))
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=process_1)
    thread.start()
    try:
        assert inside.wait(30)
        second, = leases(pool, 1)  # committed while process 1 holds the pool
        assert run_pass([pool.pk], hand_over=True) == []  # process 2: busy, handed over
    finally:
        release.set()
        thread.join(60)
    assert not errors, errors
    assert [r.granted for r in reports] == [[str(first.pk)], [str(second.pk)]]
    assert Lease.objects.get(pk=second.pk).state == "granted"
    assert not PassWanted.objects.exists()
