"""core.db.retry_on_deadlock on PostgreSQL: a transaction aborted as a deadlock victim (40P01) or
for a serialisation failure (40001) runs again, a few times at most; never inside a caller's
transaction; no other error is retried.

The errors are PostgreSQL's own, through psycopg2 and Django's wrapping: a real deadlock between
two connections, and `RAISE … USING ERRCODE` for a given SQLSTATE where a test counts attempts.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction

from core.db import is_retryable, retry_on_deadlock

pytestmark = pytest.mark.django_db(transaction=True)


def _raise_sqlstate(code: str) -> None:
    """Have PostgreSQL fail the current statement with SQLSTATE `code`."""
    with connection.cursor() as cur:
        cur.execute(f"DO $$ BEGIN RAISE EXCEPTION 'test: sqlstate {code}' USING ERRCODE = '{code}'; END $$")


def _failing(code: str, times: int, calls: list[int], attempts: int = 3) -> Any:
    """A decorated function whose transaction fails with `code` the first `times` runs."""
    @retry_on_deadlock(attempts=attempts, backoff_s=0.001)
    def work() -> str:
        calls.append(1)
        with transaction.atomic():
            get_user_model().objects.create(username=f"u{len(calls)}")  # undone with the failure
            if len(calls) <= times:
                _raise_sqlstate(code)
        return "done"

    return work


@pytest.mark.parametrize("code", ["40P01", "40001"])
def test_a_deadlock_or_serialisation_failure_runs_again_and_succeeds(code: str, caplog) -> None:
    calls: list[int] = []
    assert _failing(code, times=2, calls=calls)() == "done"
    assert len(calls) == 3
    # Only the last run's write is there: the failed ones were rolled back.
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["u3"]
    assert sum("running it again" in r.getMessage() for r in caplog.records if r.name == "core.db") == 2


def test_it_gives_up_after_the_last_attempt_and_raises_the_error() -> None:
    calls: list[int] = []
    with pytest.raises(OperationalError) as err:
        _failing("40P01", times=99, calls=calls, attempts=4)()
    assert len(calls) == 4
    assert getattr(err.value.__cause__, "pgcode", None) == "40P01" and is_retryable(err.value)
    assert not get_user_model().objects.exists()


def test_inside_an_open_transaction_it_raises_at_once() -> None:
    calls: list[int] = []
    work = _failing("40P01", times=1, calls=calls)
    with pytest.raises(OperationalError), transaction.atomic():
        get_user_model().objects.create(username="outer")
        work()  # would succeed on a second run; the outer transaction is not its to repeat
    assert len(calls) == 1
    assert not get_user_model().objects.exists()


@pytest.mark.parametrize("code", ["23505", "57014", "40002"])  # unique_violation, query_canceled, another 40xxx
def test_other_database_errors_are_not_retried(code: str) -> None:
    calls: list[int] = []
    with pytest.raises((IntegrityError, OperationalError)) as err:
        _failing(code, times=1, calls=calls)()
    assert len(calls) == 1 and not is_retryable(err.value)


def test_other_exceptions_are_not_retried() -> None:
    calls: list[int] = []

    @retry_on_deadlock(backoff_s=0.001)
    def work() -> None:
        calls.append(1)
        raise ValueError("not the database's")

    with pytest.raises(ValueError):
        work()
    assert calls == [1]


def test_the_victim_of_a_real_deadlock_runs_again_and_both_transactions_commit(make_user) -> None:
    """Two connections lock two rows in opposite orders, each waiting at a barrier after its first
    lock (first run only): PostgreSQL aborts one with `deadlock detected`; it runs again, after
    the other has committed, and both changes are there."""
    first, second = make_user("first"), make_user("second")
    barrier = threading.Barrier(2, timeout=10)
    runs: dict[str, int] = {"ab": 0, "ba": 0}
    errors: list[BaseException] = []

    @retry_on_deadlock(attempts=3, backoff_s=0.01)
    def lock_both(name: str, ids: tuple[int, int]) -> None:
        runs[name] += 1
        with transaction.atomic():
            users = get_user_model().objects.select_for_update()
            users.get(pk=ids[0])
            if runs[name] == 1:
                barrier.wait()
            user = users.get(pk=ids[1])
            user.last_name = (user.last_name + " " + name).strip()
            user.save(update_fields=["last_name"])

    def run(name: str, ids: tuple[int, int]) -> None:
        try:
            lock_both(name, ids)
        except BaseException as exc:  # asserted empty below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=("ab", (first.pk, second.pk))),
               threading.Thread(target=run, args=("ba", (second.pk, first.pk)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert sorted(runs.values()) == [1, 2]  # one victim, run once more
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.last_name, second.last_name) == ("ba", "ab")


def test_a_transaction_whose_connection_is_cut_is_not_run_again() -> None:
    """A connection lost at COMMIT (a failover, a restart) leaves the outcome unknown to the
    client: the commit may have happened. Running the function again could do its write twice,
    so only a definite abort (40P01, 40001) is retried; this error goes up (the API answers 503
    and the client decides: a lease create with an Idempotency-Key is safe to send again)."""
    calls: list[int] = []

    @retry_on_deadlock(backoff_s=0.001)
    def work() -> None:
        calls.append(1)
        with transaction.atomic():
            get_user_model().objects.create(username="cut")
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
            other = connection.get_new_connection(connection.get_connection_params())
            other.autocommit = True
            with other.cursor() as cur:  # the server ends this session, as a failover does
                cur.execute("SELECT pg_terminate_backend(%s)", [pid])
            other.close()

    try:
        with pytest.raises((OperationalError, InterfaceError)) as err:
            work()
    finally:
        connection.close()
    assert calls == [1] and not is_retryable(err.value)
    assert not get_user_model().objects.filter(username="cut").exists()  # here cut before COMMIT
