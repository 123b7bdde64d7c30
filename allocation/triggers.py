"""Enqueue follow-up work after a commit: scheduling passes (debounced; kept in PostgreSQL when the
broker cannot take the trigger, `want_pass`), bind and unbind.

Kept apart from tasks.py so services can ask for work without importing Celery task objects at
module import time, and so GPUPOOL_AUTOSCHEDULE=0 can switch event-driven passes off in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection, transaction

logger = logging.getLogger(__name__)

PASS_FLAG = "gpupool:pass-queued:{pool_id}"


def request_pass(pool_id: int | None = None) -> bool:
    """Ask for a scheduling pass soon (of one pool; None: of every pool); True if this call asked.
    Debounced: while one is queued and not yet started, further requests add nothing (the queued
    pass will see their rows; it clears the flag as it starts). When the broker cannot take the
    message, the wish is recorded in PostgreSQL instead (`want_pass`), and the first worker to
    hear the broker again runs the pass (allocation.engine.run_wanted_passes)."""
    if not settings.GPUPOOL["AUTOSCHEDULE"]:
        return False
    if not cache.add(PASS_FLAG.format(pool_id=pool_id), 1, timeout=30):
        return False
    _queue_pass(pool_id)
    return True


def request_every_pass() -> int:
    """The periodic pass, fanned out: one task per pool on the schedule queue, so every
    scheduler process takes its share (one task over every pool would pass them one after the
    other in one process). Sent whether or not a triggered pass is queued (its flag may outlive
    a task lost with its worker: the periodic pass is what catches that up). Returns the pools."""
    from inventory.models import Pool

    pool_ids = list(Pool.objects.order_by("pk").values_list("pk", flat=True))
    for pool_id in pool_ids:
        cache.set(PASS_FLAG.format(pool_id=pool_id), 1, timeout=30)
        _queue_pass(pool_id)
    return len(pool_ids)


def _queue_pass(pool_id: int | None) -> None:
    from allocation.tasks import schedule_pass

    if not _send(schedule_pass, pool_id):
        want_pass(pool_id)
        clear_pass_flag(pool_id)  # nothing is queued: the next request may try the broker again


def want_pass(pool_id: int | None) -> None:
    """Record that `pool_id` (None: every pool) wants a pass: a row a wish (never waiting on a
    pass claiming the pool's earlier ones, allocation.models.wanted), in its own savepoint. A
    database that fails too is logged: the periodic pass remains."""
    from allocation.models import PassWanted
    from inventory.models import Pool

    table = connection.ops.quote_name(PassWanted._meta.db_table)
    rows, params = ("VALUES (%s, now())", [pool_id]) if pool_id is not None else (
        f"SELECT id, now() FROM {connection.ops.quote_name(Pool._meta.db_table)}", [])
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"INSERT INTO {table} (pool_id, wanted_at) {rows}", params)
    except DatabaseError:
        logger.warning("could not record the pass wanted for pool %s; the periodic pass will run it", pool_id,
                       exc_info=True)


def clear_pass_flag(pool_id: int | None) -> None:
    cache.delete(PASS_FLAG.format(pool_id=pool_id))


def request_bind(lease_id: Any) -> None:
    from allocation.tasks import bind_lease

    _send(bind_lease, str(lease_id))


def request_unbind(lease_id: Any, countdown: float | None = None) -> None:
    """Ask for an attempt at stopping the lease's workload, now or in `countdown` seconds (a
    retry after a failed one; the observe sweep asks again if this message is lost)."""
    from allocation.tasks import unbind_lease

    _send(unbind_lease, str(lease_id), countdown=countdown)


# One immediate retry (a pooled connection the broker dropped reconnects on it) and no more:
# with the broker down, Celery's default policy (3 retries, 0.4 s of waits) kept every lease
# request 0.6 s longer before giving up; the periodic pass picks the work up either way.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}


def _send(task: Any, *args: Any, countdown: float | None = None) -> bool:
    """Publish `task`; False (logged) when the broker would not take it."""
    try:
        task.apply_async(args, retry_policy=PUBLISH_RETRY, **({"countdown": countdown} if countdown else {}))
    except Exception:  # broker down: what asked decides how the work is caught up
        logger.warning("could not enqueue %s%r; it will be caught up", task.name, args, exc_info=True)
        return False
    return True
