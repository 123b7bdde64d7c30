"""Ask for a delivery run as soon as a transaction that may have made a notification commits: a
debounced Celery message (by name: nothing of the tasks is imported here), skipped outright while
no target is enabled. The beat's run every second delivers whatever a lost message leaves, so a
trigger is an optimisation of latency, never needed for correctness."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from allocation.models import Notification

logger = logging.getLogger(__name__)

TASK = "allocation.deliver_notifications"
FLAG = "gpupool:notify-queued"
TARGETS_TTL_S = 5.0  # how long a process trusts its "is any target enabled?" answer
_targets: tuple[float, bool] = (0.0, False)


def targets_enabled() -> bool:
    """Whether any target is enabled, as seen within the last TARGETS_TTL_S (one indexed EXISTS)."""
    global _targets
    checked, answer = _targets
    if time.monotonic() - checked > TARGETS_TTL_S:
        answer = Notification.objects.filter(enabled=True).exists()
        _targets = (time.monotonic(), answer)
    return answer


def request_delivery() -> bool:
    """Enqueue one delivery run unless one is queued and not started (its run sees every commit
    before it starts). Off with GPUPOOL_AUTOSCHEDULE=0 (tests, simulations), as passes are."""
    if not settings.GPUPOOL["AUTOSCHEDULE"]:
        return False
    try:
        if not targets_enabled() or not cache.add(FLAG, 1, timeout=10):
            return False
        from celery import current_app

        current_app.send_task(TASK, retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0,
                                                  "interval_max": 0})
    except Exception:  # broker or cache down: the beat's run catches up
        logger.warning("could not ask for a notification run; beat will", exc_info=True)
        return False
    return True


def clear_delivery_flag() -> None:
    """Called by the run as it starts: commits from now on ask for another run."""
    cache.delete(FLAG)


def delivery_after_commit() -> None:
    """`request_delivery` once the current transaction commits (once per transaction)."""
    pending = getattr(connection, "run_on_commit", [])
    if not any(entry[1] is _after_commit for entry in pending):
        transaction.on_commit(_after_commit)


def _after_commit() -> None:
    request_delivery()
