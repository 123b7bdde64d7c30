"""Deliveries → receivers: claim the due ones, send them (a few at once), record each outcome.

A claim moves the row's `next_attempt_at` CLAIM_S ahead and counts the attempt, in one UPDATE
(`FOR UPDATE SKIP LOCKED`: senders on several workers never take the same row). The outcome is
recorded only if the row is still as claimed (state and attempt count), so a sender that outlived
its claim never overwrites the one who took the row over. A sender that dies between the send and
the record leaves the row pending: it is sent again once the claim lapses, with the same delivery
id. Failures wait `backoff` (doubling from BACKOFF_BASE_S, capped, jittered) up to MAX_ATTEMPTS;
a 410 Gone gives up at once and disables the target.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from prometheus_client import Counter

from allocation.models import Notification, NotificationDelivery, NotificationEvent
from allocation.notify.transports import TRANSPORTS, TransportError
from core.db import db_now
from core.tasks import TASK_METRICS, backoff_s

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 10  # ~17 min of backoff in all before giving up
BACKOFF_BASE_S = 2.0
BACKOFF_MAX_S = 600.0
CLAIM_S = 30.0  # longer than any one attempt (webhook 3 + 5 s, SMTP 10 s)
BATCH = 50
THREADS = 8
RETENTION = timedelta(days=30)  # delivered and failed rows kept this long in the log

DELIVERIES = Counter("gpupool_notification_deliveries", "Notification delivery attempts by target kind and outcome "
                     "(delivered, retry, failed: given up, gone: the receiver answered 410)", ["kind", "outcome"],
                     registry=TASK_METRICS)
for _kind in TRANSPORTS:  # every series exported from the start, at 0 (pool.metrics says why)
    for _outcome in ("delivered", "retry", "failed", "gone"):
        DELIVERIES.labels(_kind, _outcome)
PENDING, DELIVERED, FAILED = NotificationDelivery.PENDING, NotificationDelivery.DELIVERED, NotificationDelivery.FAILED


@dataclass
class Outcome:
    status: int | None = None
    error: TransportError | None = None


def deliveries_claim(*, limit: int = BATCH, now: datetime | None = None) -> list[NotificationDelivery]:
    """Claim up to `limit` due deliveries for CLAIM_S (committed at once), oldest due first."""
    now = now or db_now()
    table = connection.ops.quote_name(NotificationDelivery._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} SET next_attempt_at = %s, attempts = attempts + 1 WHERE id IN ("
                    f"SELECT id FROM {table} WHERE state = %s AND next_attempt_at <= %s "
                    "ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id",
                    [now + timedelta(seconds=CLAIM_S), PENDING, now, limit])
        ids = [row[0] for row in cur.fetchall()]
    return list(NotificationDelivery.objects.filter(id__in=ids).select_related("notification")
                .order_by("occurred_at", "created_at"))


def body_of(delivery: NotificationDelivery) -> bytes:
    """The bytes sent (and signed): the stored payload, compact. The same on every attempt."""
    return json.dumps(delivery.payload, separators=(",", ":"), ensure_ascii=False).encode()


def _attempt(delivery: NotificationDelivery) -> Outcome:
    target = delivery.notification
    if target is None:
        return Outcome(error=TransportError("its target was removed", permanent=True))
    if not target.enabled:
        return Outcome(error=TransportError(f"its target is disabled: {target.disabled_reason}", permanent=True))
    try:
        return Outcome(status=TRANSPORTS[target.kind].send(target, delivery, body_of(delivery)))
    except TransportError as exc:
        return Outcome(error=exc)
    except Exception as exc:  # a bug or an odd library error: recorded and retried, never lost
        logger.exception("notification delivery %s failed unexpectedly", delivery.pk)
        return Outcome(error=TransportError(f"{type(exc).__name__}: {exc}"[:500]))


def deliveries_send(*, limit: int = BATCH) -> dict[str, int]:
    """Claim, send and record one batch; returns the count of each outcome."""
    claimed = deliveries_claim(limit=limit)
    if not claimed:
        return {}
    with ThreadPoolExecutor(max_workers=min(THREADS, len(claimed))) as pool:
        outcomes = list(pool.map(_attempt, claimed))
    now = db_now()
    counts: dict[str, int] = {}
    for delivery, outcome in zip(claimed, outcomes, strict=True):
        result = delivery_record(delivery, outcome, now=now)
        counts[result] = counts.get(result, 0) + 1
    return counts


def delivery_record(delivery: NotificationDelivery, outcome: Outcome, *, now: datetime) -> str:
    """Record one attempt's outcome on the row as claimed; returns the outcome's name (delivered,
    retry, failed, gone; `lapsed` when the claim was lost to another sender meanwhile)."""
    claimed = NotificationDelivery.objects.filter(pk=delivery.pk, state=PENDING, attempts=delivery.attempts)
    error = outcome.error
    if error is None:
        result, n = "delivered", claimed.update(state=DELIVERED, delivered_at=now, last_status=outcome.status,
                                                last_error="")
    elif error.gone or error.permanent or delivery.attempts >= MAX_ATTEMPTS:
        result = "gone" if error.gone else "failed"
        n = claimed.update(state=FAILED, last_status=error.status, last_error=error.message)
        if error.gone and n and delivery.notification_id is not None:
            Notification.objects.filter(pk=delivery.notification_id).update(
                enabled=False, disabled_reason=f"the receiver answered 410 Gone at {now:%Y-%m-%d %H:%M:%S} UTC")
    else:
        wait = backoff_s(delivery.attempts - 1, base=BACKOFF_BASE_S, cap=BACKOFF_MAX_S)
        result, n = "retry", claimed.update(next_attempt_at=now + timedelta(seconds=wait), last_status=error.status,
                                            last_error=error.message)
    if not n:
        return "lapsed"
    DELIVERIES.labels(delivery.kind, result).inc()
    if result != "delivered":
        logger.warning("notification %s of %s to %s: %s (attempt %d): %s", delivery.pk, delivery.event,
                       delivery.target, result, delivery.attempts, error.message if error else "")
    return result


def deliveries_send_due(*, budget_s: float = 20.0) -> dict[str, int]:
    """Send batches while any is due, for at most about `budget_s`."""
    deadline = time.monotonic() + budget_s
    totals: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = deliveries_send()
        for key, value in counts.items():
            totals[key] = totals.get(key, 0) + value
        if sum(counts.values()) < BATCH:
            break
    return totals


def deliveries_prune(*, older_than: timedelta = RETENTION, limit: int = 10_000) -> int:
    """Delete up to `limit` delivered or failed rows older than `older_than`, and as many facts
    (budget and idle warnings) dispatched as long ago; returns how many rows went."""
    cutoff = db_now() - older_than
    old = (NotificationDelivery.objects.exclude(state=PENDING).filter(created_at__lt=cutoff)
           .order_by("created_at").values_list("pk", flat=True)[:limit])
    deleted, _ = NotificationDelivery.objects.filter(pk__in=list(old)).delete()
    facts = (NotificationEvent.objects.filter(dispatched_at__lt=cutoff).order_by("id")
             .values_list("pk", flat=True)[:limit])
    gone, _ = NotificationEvent.objects.filter(pk__in=list(facts)).delete()
    return deleted + gone


def deliveries_retry(*, ids: list[Any]) -> int:
    """Make failed (or pending) deliveries due now with a fresh count of attempts (an admin's
    action, once the receiver is mended); returns how many. Delivered ones are left alone."""
    return NotificationDelivery.objects.filter(pk__in=ids).exclude(state=DELIVERED).update(
        state=PENDING, attempts=0, next_attempt_at=db_now(), last_error="")
