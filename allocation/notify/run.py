"""One delivery run, as the Celery task runs it (every second from beat, and at once after a commit
that may have made a notification): derive, then send what is due, then the periodic chores."""

from __future__ import annotations

import time

from allocation.notify.dispatch import expiring_dispatch, notifications_dispatch
from allocation.notify.send import deliveries_prune, deliveries_send_due

EXPIRING_EVERY_S = 5.0  # `lease.expiring` is told within this of its notice time
PRUNE_EVERY_S = 300.0
_next_run: dict[str, float] = {}


def _due(chore: str, every_s: float) -> bool:
    now = time.monotonic()
    if now < _next_run.get(chore, 0.0):
        return False
    _next_run[chore] = now + every_s
    return True


def notifications_run() -> dict[str, int]:
    """Derive the deliveries of every committed fact, send every due delivery (for about 20 s at
    most; the next run goes on), and now and then look for expiring leases and prune the log.
    Returns counts: `derived` and one per outcome."""
    derived = notifications_dispatch()
    if _due("expiring", EXPIRING_EVERY_S):
        derived += expiring_dispatch()
    counts = {"derived": derived, **deliveries_send_due()}
    if _due("prune", PRUNE_EVERY_S):
        counts["pruned"] = deliveries_prune()
    return counts
