"""Database helpers shared by every app."""

from __future__ import annotations

from django.db import connection

# Namespaces of advisory lock keys (two ASCII letters in the high bits), one per kind of object,
# so a pool's lock and a source's lock with the same id never collide.
POOL_LOCKS = 0x6770  # "gp": a pool's scheduling pass and the writes that must not interleave with it
SOURCE_LOCKS = 0x6773  # "gs": one discovery sync of a source at a time


def advisory_xact_lock(namespace: int, key: int) -> None:
    """Hold a PostgreSQL advisory lock on (`namespace`, `key`) until the current transaction ends;
    whoever asks next waits for it. Call inside `transaction.atomic()`. On SQLite it does nothing:
    its IMMEDIATE transactions already let one writer in at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [(namespace << 48) | key])
