"""Notifications read the outbox after a cursor, in the order transactions ended, and never write
an outbox row (allocation.notify.cursor). Shown on the real PostgreSQL with a second session:

- a row whose transaction commits late, with an id below rows committed meanwhile, is still
  notified, after nothing (a cursor on ids would have passed it); a transaction running in another
  database of the server holds nothing back;
- the dispatcher neither waits for nor takes an outbox row's lock (when it marked rows, it
  deadlocked with the relay marking the same rows: bench_kueue_baseline);
- the prune keeps published rows not yet notified.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import psycopg2
import pytest
from django.db import connection
from django.utils import timezone

from allocation.models import LeaseOutbox, NotificationCursor
from allocation.notify import dispatch
from allocation.notify.dispatch import notifications_dispatch
from allocation.outbox import prune
from tests.support import processes

pytestmark = pytest.mark.django_db(transaction=True)


def _row(conn: Any = None) -> int:
    """An outbox row, written through the ORM (autocommit) or in `conn`'s open transaction."""
    if conn is None:
        return LeaseOutbox.objects.create(lease_id=uuid.uuid4(), pool_id=1, team_id=1, state="granted").pk
    with conn.cursor() as cur:
        cur.execute("INSERT INTO allocation_leaseoutbox (lease_id, pool_id, team_id, state, created_at) "
                    "VALUES (%s, 1, 1, 'granted', now()) RETURNING id", [str(uuid.uuid4())])
        return int(cur.fetchone()[0])


@pytest.fixture
def heard(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The outbox ids each dispatch batch derived events from (one target that hears everything)."""
    batches: list[list[int]] = []

    def lease_events(rows: list[tuple[Any, ...]]) -> list[Any]:
        batches.append([row[0] for row in rows])
        return []

    monkeypatch.setattr(dispatch, "load_targets", lambda: [object()])
    monkeypatch.setattr(dispatch, "lease_events", lease_events)
    return batches


def _position() -> tuple[int, int] | None:
    return NotificationCursor.objects.values_list("xact", "outbox_id").first()


def _versions() -> dict[int, str]:
    with connection.cursor() as cur:
        cur.execute("SELECT id, xmin::text FROM allocation_leaseoutbox")
        return dict(cur.fetchall())


def test_a_row_committed_late_is_notified_though_later_ids_were_committed_first(heard: list[list[int]]) -> None:
    late = psycopg2.connect(processes.test_database_url())
    try:
        early_id = _row(late)  # its transaction started first and stays open
        committed = [_row(), _row()]
        start = _position()
        notifications_dispatch()
        # Nothing yet: the rows committed meanwhile come after a transaction still running.
        assert heard == [] and _position() == start
        late.commit()
        notifications_dispatch()
    finally:
        late.close()
    assert heard == [[early_id, *committed]] and early_id < committed[0]
    assert _position() == (LeaseOutbox.objects.get(pk=committed[-1]).xact, committed[-1])
    notifications_dispatch()  # nothing twice
    assert heard == [[early_id, *committed]]


def test_a_transaction_in_another_database_holds_nothing_back(heard: list[list[int]]) -> None:
    """Transaction ids are the server's, but one running in another database (a migration, a
    batch job) cannot write this database's outbox: the dispatcher does not wait for it."""
    url = urlsplit(processes.test_database_url())
    other = psycopg2.connect(url._replace(path="/postgres").geturl())
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_current_xact_id()")  # a transaction id, kept while it stays open
        early = _row()
        notifications_dispatch()
    finally:
        other.rollback()
        other.close()
    assert heard == [[early]]


def test_a_row_of_a_rolled_back_transaction_holds_nothing_back(heard: list[list[int]]) -> None:
    aborted = psycopg2.connect(processes.test_database_url())
    try:
        _row(aborted)
        kept = _row()
        aborted.rollback()
    finally:
        aborted.close()
    notifications_dispatch()
    assert heard == [[kept]]


def test_the_dispatcher_neither_waits_for_nor_writes_an_outbox_row(heard: list[list[int]]) -> None:
    ids = [_row() for _ in range(3)]
    before = _versions()
    holder = psycopg2.connect(processes.test_database_url())
    errors: list[BaseException] = []

    def run() -> None:
        try:
            notifications_dispatch()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connection.close()

    try:
        with holder.cursor() as cur:  # the relay, say, holding the middle row
            cur.execute("SELECT id FROM allocation_leaseoutbox WHERE id = %s FOR UPDATE", [ids[1]])
        thread = threading.Thread(target=run)
        thread.start()
        thread.join(20)
        assert not thread.is_alive(), "the dispatcher waited for a row another transaction holds"
        assert not errors, errors
    finally:
        holder.rollback()
        holder.close()
    assert heard == [ids]
    assert _versions() == before  # no row version written


def test_published_rows_are_pruned_only_once_notified() -> None:
    old = timezone.now() - timedelta(days=2)
    ids = [_row() for _ in range(2)]
    LeaseOutbox.objects.filter(pk__in=ids).update(stream_id="1-0", published_at=old)
    assert prune() == 0  # published long ago, but not notified yet
    notifications_dispatch()
    assert prune() == 2 and not LeaseOutbox.objects.exists()
