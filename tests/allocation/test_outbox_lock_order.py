"""The outbox relay and the notification dispatcher mark overlapping outbox rows: each locks the
rows it reads in id order, as it reads them, so the two queue instead of deadlocking (each
UPDATE locking in its own plan's order deadlocked in bench_kueue_baseline). Shown on the real
PostgreSQL: with a middle row held by another transaction, the one reading holds the rows before
it and none after it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg2
import pytest
from django.db import connection

from allocation.models import LeaseOutbox
from allocation.notify.dispatch import notifications_dispatch
from allocation.outbox import relay
from tests.support import processes

pytestmark = pytest.mark.django_db(transaction=True)


def _rows(n: int) -> list[int]:
    return [LeaseOutbox.objects.create(lease_id=uuid.uuid4(), pool_id=1, team_id=1, state="granted").pk
            for _ in range(n)]


def _locked(conn: Any, row_id: int) -> bool:
    """Whether another transaction holds the row (a NOWAIT lock attempt fails)."""
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT id FROM allocation_leaseoutbox WHERE id = %s FOR UPDATE NOWAIT", [row_id])
        except psycopg2.errors.LockNotAvailable:
            conn.rollback()
            return True
    conn.rollback()
    return False


def _waiting(conn: Any) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'")
        waiting = cur.fetchone()[0] > 0
    conn.rollback()
    return waiting


@pytest.mark.parametrize("marker", [notifications_dispatch, relay], ids=["dispatcher", "relay"])
def test_rows_are_locked_in_id_order_as_they_are_read(marker: Callable[[], int]) -> None:
    first, middle, last = _rows(3)
    # The first row's version now lies after the others (a scan in the table's order meets it
    # last), as the relay's and the dispatcher's marks leave rows: id order is not the table's.
    LeaseOutbox.objects.filter(pk=first).update(state="granted")
    holder, probe = (psycopg2.connect(processes.test_database_url()) for _ in range(2))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            marker()
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)
        finally:
            connection.close()

    try:
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM allocation_leaseoutbox WHERE id = %s FOR UPDATE", [middle])
        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 20
        while not _waiting(probe):
            assert time.monotonic() < deadline, "the marker never waited for the held row"
            time.sleep(0.05)
        assert _locked(probe, first) and not _locked(probe, last)
        holder.commit()
        thread.join(30)
        assert not thread.is_alive() and not errors, errors
    finally:
        holder.close()
        probe.close()
    column = "notified_at" if marker is notifications_dispatch else "published_at"
    assert not LeaseOutbox.objects.filter(**{f"{column}__isnull": True}).exists()
