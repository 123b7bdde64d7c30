"""Facts worth a notification that are not lease transitions, written by the service that
establishes them, in its transaction: a budget's 80%/100% warning, an idle lease's warning. Their
key names the fact (budget, period, threshold; lease, warning time), so the same fact is one row
however many workers or retries write it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from allocation.models import NotificationEvent
from allocation.notify.trigger import delivery_after_commit
from allocation.notify_vocabulary import BUDGET, IDLE


def facts_record(facts: Sequence[NotificationEvent]) -> None:
    """Write `facts` (unsaved rows) in the current transaction, one INSERT, a fact already written
    skipped; a delivery run is asked for after the commit. Nothing for none."""
    if not facts:
        return
    NotificationEvent.objects.bulk_create(facts, ignore_conflicts=True)
    delivery_after_commit()


def budget_warning_fact(*, budget_id: int, team_id: int, pool_id: int | None, period_start: datetime,
                        threshold_pct: int, message: str, data: dict[str, Any], now: datetime) -> NotificationEvent:
    """Keyed by the budget's limit too: a new limit re-arms the warnings of the period (apply)."""
    key = f"budget:{budget_id}:{period_start.isoformat()}:{data.get('gpu_hours')}:{threshold_pct}"
    return NotificationEvent(event=BUDGET, key=key,
                             team_id=team_id, pool_id=pool_id, message=message, data=data, created_at=now)


def idle_warning_fact(*, lease_id: Any, team_id: int, pool_id: int, message: str, data: dict[str, Any],
                      now: datetime) -> NotificationEvent:
    return NotificationEvent(event=IDLE, key=f"idle:{lease_id}:{now.isoformat()}", team_id=team_id,
                             pool_id=pool_id, lease_id=lease_id, message=message, data=data, created_at=now)
