"""Database helpers shared by every app."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from django.db import connection
from django.utils import timezone

# Namespaces of advisory lock keys (two ASCII letters in the high bits), one per kind of object,
# so a pool's lock and a source's lock with the same id never collide.
POOL_LOCKS = 0x6770  # "gp": a pool's scheduling pass and the writes that must not interleave with it
SOURCE_LOCKS = 0x6773  # "gs": one discovery sync of a source at a time


def advisory_xact_lock(namespace: int, key: int) -> datetime:
    """Hold a PostgreSQL advisory lock on (`namespace`, `key`) until the current transaction ends;
    whoever asks next waits for it. Call inside `transaction.atomic()`. On SQLite it does nothing:
    its IMMEDIATE transactions already let one writer in at a time.

    Returns the database's clock once the lock is held (`db_now`), read in the same query, so a
    pass deciding by that clock pays no query for it."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s), clock_timestamp()", [(namespace << 48) | key])
            return cast(datetime, cur.fetchone()[1])
    return timezone.now()


def db_now() -> datetime:
    """The database's clock, now (PostgreSQL `clock_timestamp()`).

    Every decision that compares times written by different processes (a lease's `expires_at`
    set by the web server on renewal, checked by a worker's reaper; a host's `offline_since`
    set by one worker's discovery, checked by another's) must read one clock, or a web server
    and a worker whose clocks disagree by minutes end leases minutes early or late. The database
    is the one clock every process shares. On SQLite (embedded mode: one machine, one clock)
    it is this process's clock.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT clock_timestamp()")
            return cast(datetime, cur.fetchone()[0])
    return timezone.now()
