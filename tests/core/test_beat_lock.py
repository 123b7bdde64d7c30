"""The beat lock on the real database: one session holds it, a claim moves a run only from what
its claimer read, and a session the server ended is a lost lead that can be won again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from core.beat_lock import BeatLock, LockLost
from stacktools.ready import wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the lock's connections see committed rows only


@pytest.fixture
def locks() -> Iterator[tuple[BeatLock, BeatLock]]:
    a, b = BeatLock(lease_s=10), BeatLock(lease_s=10)
    a.name, b.name = "beat a", "beat b"
    try:
        yield a, b
    finally:
        a.release()
        b.release()


def test_one_session_holds_the_lock_and_another_takes_it_once_released(locks: tuple[BeatLock, BeatLock]) -> None:
    a, b = locks
    assert a.hold() is not None
    assert a.hold() is not None  # confirmed, not taken twice
    assert b.hold() is None
    assert (b.holder() or "").startswith("beat a")
    a.release()
    # The server ends the session a moment after the client closes it: b wins at one of its tries.
    wait_for(b.hold, 10, "b to take the released lock")
    assert a.hold() is None


def test_a_claim_moves_a_run_only_from_the_last_run_its_claimer_read(locks: tuple[BeatLock, BeatLock]) -> None:
    a, b = locks
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    assert a.last_runs(["tick"], default=t0) == {"tick": t0}
    assert b.last_runs(["tick"], default=t0 + timedelta(hours=1)) == {"tick": t0}  # recorded wins over default
    assert a.claim("tick", t0, t0 + timedelta(seconds=1)) == (True, t0 + timedelta(seconds=1))
    # b read t0 too: its claim of the same run finds it taken, and learns when.
    assert b.claim("tick", t0, t0 + timedelta(seconds=1.2)) == (False, t0 + timedelta(seconds=1))


def test_a_session_the_server_ended_is_a_lost_lead_that_can_be_won_again(locks: tuple[BeatLock, BeatLock]) -> None:
    a, b = locks
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    assert a.hold() is not None
    a.last_runs(["tick"], default=t0)
    with connection.cursor() as cur:  # what a failover, or the server's idle_session_timeout, does
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", [a.name])
    with pytest.raises(LockLost):
        a.claim("tick", t0, t0 + timedelta(seconds=1))
    wait_for(b.hold, 10, "b to take the lock the ended session held")
    assert a.hold() is None
    b.release()
    wait_for(a.hold, 10, "a, in a new session, to take the lock again")
