"""Database helpers shared by every app."""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections

P = ParamSpec("P")
R = TypeVar("R")
logger = logging.getLogger(__name__)

# SQLSTATEs after which the whole transaction may simply be run again: PostgreSQL aborted it to
# break a lock cycle (40P01 deadlock_detected) or a serialisation conflict (40001).
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})

# Namespaces of advisory lock keys (two ASCII letters in the high bits), one per kind of object,
# so a pool's lock and a source's lock with the same id never collide.
POOL_LOCKS = 0x6770  # "gp": a pool's scheduling pass and the writes that must not interleave with it
SOURCE_LOCKS = 0x6773  # "gs": one discovery sync of a source at a time
EVENT_LOCKS = 0x6765  # "ge": the relay of lease events (one publisher at a time, in order)
BEAT_LOCKS = 0x6762  # "gb": the beat leader (core.beat_lock), a session lock: one beat sends at a time
IDLE_LOCKS = 0x6769  # "gi": the check of allocated but idle GPUs (one at a time: it meters what it saw)
QUEUE_LOCKS = 0x6771  # "gq": one team's queue in one pool (allocation.services.queue_caps): one creator at a time


def advisory_key(namespace: int, key: int, second: int | None = None) -> int:
    """The bigint key of an advisory lock on (`namespace`, `key`), or on (`namespace`, `key`,
    `second`) with 24 bits each (two ids below 16,777,216; above that two objects may share a
    lock, which only makes them wait for each other)."""
    if second is None:
        return (namespace << 48) | key
    return (namespace << 48) | ((key & 0xFFFFFF) << 24) | (second & 0xFFFFFF)


def advisory_key_sql(namespace: int, key: str, second: str) -> str:
    """`advisory_key(namespace, key, second)` as an SQL expression over the SQL `key` and `second`
    (columns, or a trigger's `NEW.pool_id`): the same bits, for a lock taken inside the database
    that must be the one the application takes (allocation/migrations/0023_queue_bounds.py)."""
    return f"(({namespace}::bigint << 48) | ((({key})::bigint & 16777215) << 24) | (({second})::bigint & 16777215))"


def lock_sql(function: str = "pg_try_advisory_xact_lock", *, no_jit: bool = False) -> str:
    """The SELECT of `advisory_xact_lock` (`function` pg_advisory_xact_lock) and
    `advisory_xact_try_lock`, one parameter (the key), columns `held` and `now`: to run with
    another statement in the same round trip (a CTE)."""
    # set_config(…, true) is SET LOCAL, riding with the lock: no statement more.
    return (f"SELECT {function}(%s) AS held, clock_timestamp() AS now"
            + (", set_config('jit', 'off', true)" if no_jit else ""))


def advisory_xact_lock(namespace: int, key: int, *, no_jit: bool = False) -> datetime:
    """Hold a PostgreSQL advisory lock on (`namespace`, `key`) until the current transaction ends;
    whoever asks next waits for it. Call inside `transaction.atomic()`. `no_jit`: no JIT
    compilation for the rest of the transaction either.

    Returns the database's clock once the lock is held (`db_now`), read in the same query, so a
    pass deciding by that clock pays no query for it."""
    with connection.cursor() as cur:
        cur.execute(lock_sql("pg_advisory_xact_lock", no_jit=no_jit), [advisory_key(namespace, key)])
        return cast(datetime, cur.fetchone()[1])


def advisory_xact_try_lock(namespace: int, key: int, *, no_jit: bool = False) -> datetime | None:
    """`advisory_xact_lock` without the wait: None at once when another transaction holds it."""
    with connection.cursor() as cur:
        cur.execute(lock_sql(no_jit=no_jit), [advisory_key(namespace, key)])
        held, now = cur.fetchone()[:2]
        return cast(datetime, now) if held else None


def db_now() -> datetime:
    """The database's clock, now (PostgreSQL `clock_timestamp()`).

    Every decision that compares times written by different processes (a lease's `expires_at`
    set by the web server on renewal, checked by a worker's reaper; a host's `offline_since`
    set by one worker's discovery, checked by another's) must read one clock, or a web server
    and a worker whose clocks disagree by minutes end leases minutes early or late. The database
    is the one clock every process shares.
    """
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        return cast(datetime, cur.fetchone()[0])


def is_retryable(error: BaseException) -> bool:
    """Whether `error` (Django's wrapper, or the driver's own exception) is a deadlock or a
    serialisation failure. Django raises its own OperationalError with the driver's exception as
    `__cause__`: psycopg2 names the SQLSTATE `pgcode`, psycopg 3 `sqlstate`."""
    for exc in (error, error.__cause__):
        if (getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None)) in RETRYABLE_SQLSTATES:
            return True
    return False


def retry_on_deadlock(attempts: int = 3, *, backoff_s: float = 0.05,
                      using: str = DEFAULT_DB_ALIAS) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose transaction PostgreSQL may abort as a deadlock victim (or for a
    serialisation failure): it is run again, up to `attempts` times in all, after a short jittered
    backoff (about `backoff_s`, doubling each time, so two victims do not collide again in step).
    The last failure is re-raised.

    Only a call that opens the outermost transaction is retried. Called inside an atomic block
    the error is re-raised at once: the transaction is the caller's, and so are the locks that
    closed the cycle. Running this part again inside it would queue behind the same locks, on a
    transaction that is aborted (or, from a savepoint, whose earlier reads may no longer hold);
    only whoever opens the outermost transaction can start it again. Every other error passes
    through.

    The function must be safe to run again from the top: it re-reads what it decides on inside
    its transaction (what a rolled-back attempt wrote, and its on_commit callbacks, are gone)."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            attempt = 1
            while True:
                outermost = not connections[using].in_atomic_block
                try:
                    return func(*args, **kwargs)
                except DatabaseError as error:
                    if not outermost or attempt >= attempts or not is_retryable(error):
                        raise
                    delay = backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                    first_line = (str(error).splitlines() or [type(error).__name__])[0]
                    logger.warning("%s: %s (attempt %d of %d); running it again in %.0f ms",
                                   func.__qualname__, first_line, attempt, attempts, delay * 1000)
                    time.sleep(delay)
                    attempt += 1

        return run

    return decorate
