"""The audit log's writers: one event per change an actor made (a lease transition, an admin's
cordon, a quota edit, a capacity move), built unsaved so the caller writes it in its own
transaction, one row or many in one statement."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.utils import timezone

from allocation.models import AuditEvent, Lease
from core.db.bulk import Insert, bulk_insert_columns


def audit(*, actor: str, action: str, obj: Any, message: str = "", lease: Lease | None = None,
          data: dict[str, Any] | None = None, at: datetime | None = None) -> AuditEvent:
    return AuditEvent(
        at=at or timezone.now(), actor=actor, action=action,
        object_type=type(obj).__name__.lower(), object_id=str(getattr(obj, "pk", obj)),
        lease=lease, message=message, data=data or {},
    )


class AuditRow(NamedTuple):
    """An audit event as plain values, for writers that move many leases in one statement."""

    at: datetime
    actor: str
    action: str
    object_type: str
    object_id: str
    lease_id: str | None
    message: str
    data: dict[str, Any]


AUDIT_ROW_FIELDS = ("at", "actor", "action", "object_type", "object_id", "lease", "message", "data")


def audit_rows_insert(rows: Sequence[AuditRow]) -> int:
    """Write audit rows in one statement (none for no rows); returns how many."""
    return bulk_insert_columns(*audit_insert(rows))


def audit_insert(rows: Sequence[AuditRow]) -> Insert:
    """The insert of `audit_rows_insert`, to run with others (core.db.bulk.bulk_insert_together)."""
    return AuditEvent, AUDIT_ROW_FIELDS, list(zip(*rows, strict=True)) if rows else []


def bulk_audit(events: Iterable[AuditEvent]) -> None:
    AuditEvent.objects.bulk_create(list(events), batch_size=1000)
