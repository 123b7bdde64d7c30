"""Enqueue follow-up work after a commit: scheduling passes (debounced), bind and unbind.

Kept apart from tasks.py so services can ask for work without importing Celery task objects at
module import time, and so GPUPOOL_AUTOSCHEDULE=0 can switch event-driven passes off in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)

PASS_FLAG = "gpupool:pass-queued:{pool_id}"


def request_pass(pool_id: int | None = None) -> bool:
    """Ask for a scheduling pass soon. Debounced: while one is queued and not yet started, further
    requests add nothing (the queued pass will see their rows; it clears the flag as it starts)."""
    if not settings.GPUPOOL["AUTOSCHEDULE"]:
        return False
    if not cache.add(PASS_FLAG.format(pool_id=pool_id), 1, timeout=30):
        return False
    from allocation.tasks import schedule_pass

    _send(schedule_pass, pool_id)
    return True


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


def _send(task: Any, *args: Any, countdown: float | None = None) -> None:
    try:
        task.apply_async(args, retry_policy=PUBLISH_RETRY, **({"countdown": countdown} if countdown else {}))
    except Exception:  # broker down: the periodic beat entries pick the work up later
        logger.warning("could not enqueue %s%r; beat will catch up", task.name, args, exc_info=True)
