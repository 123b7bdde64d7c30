"""Passes that find their pool busy hand it over instead of waiting (several scheduler processes).

A triggered pass takes its pool's lock without waiting (`pg_try_advisory_xact_lock`). When
another transaction holds it, the pass records the wish in `PassWanted` (the same row a trigger
the broker refused leaves) and tries the lock once more: if it is still held, whoever holds it
holds it after the wish was committed, and sees it. The rule that makes that true: a pass
claims its pool's row inside its own transaction (`lock_and_claim`: the pass about to read the pool
covers every wish committed before), and after its commit looks again (`wanted`): a wish made
meanwhile runs one more pass at once. A row left by a holder that is not a pass (a capacity or
reservation write) is run by the catch-up task within a second (`run_wanted_passes`).

So a scheduler process never waits for another one's pass to take the pool's lock: it goes on to
the next pool in its queue, and no trigger is lost (tests/allocation/test_parallel_passes.py).
Nor does it wait to record its wish: a wish is a row of its own (allocation.models.wanted), so
inserting it never conflicts with the holder's claim of the earlier ones. With one row per pool,
upserted, it did: the conflict depended on whether the claim's delete would commit, and the
insert waited for the holder's commit (33 ms a wish in bench_kueue_baseline, where 435 wishes
against 15,000 leases were recorded so).
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from django.db import connection

from allocation.models import PassWanted
from core.db import POOL_LOCKS, advisory_key, lock_sql


def _table() -> str:
    return connection.ops.quote_name(PassWanted._meta.db_table)


def lock_and_claim(pool_id: int) -> datetime | None:
    """The pool's lock taken without waiting (`allocation.engine.lock_pool`: None at once when
    another transaction holds it, else the database's clock, JIT off) and, once it is held, its
    wishes claimed, in one statement: a round trip less for every pass. The claim runs
    only when the lock is held (its condition is decided first, once). Its snapshot may be a
    moment older than the lock: a wish committed in that moment is not claimed, and is served by
    one pass more (`wanted`), never lost. The claim takes the wishes with the pass (they come
    back if it rolls back); a wish the catch-up is claiming is left to it (SKIP LOCKED: waiting
    on it while holding the pool's lock could deadlock with that catch-up, which waits for the
    lock)."""
    with connection.cursor() as cur:
        cur.execute(f"WITH lock AS MATERIALIZED ({lock_sql(no_jit=True)}), "
                    f"claimed AS ({claim_sql(gate='(SELECT held FROM lock)')}) "
                    "SELECT held, now FROM lock", [advisory_key(POOL_LOCKS, pool_id), pool_id])
        held, now = cur.fetchone()
        return cast(datetime, now) if held else None


def claim_sql(*, gate: str = "TRUE") -> str:
    """The DELETE that claims a pool's wishes (one parameter, the pool), those a claim in progress
    holds skipped; only when `gate` (an SQL condition, decided first) holds."""
    table = _table()
    return (f"DELETE FROM {table} WHERE {gate} AND id IN "
            f"(SELECT id FROM {table} WHERE pool_id = %s FOR UPDATE SKIP LOCKED)")


def wanted(pool_id: int) -> bool:
    """After a pass's commit: whether a pass of the pool was wished for while it ran."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT 1 FROM {_table()} WHERE pool_id = %s LIMIT 1", [pool_id])
        return cur.fetchone() is not None
