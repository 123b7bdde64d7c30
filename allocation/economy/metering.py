"""Closing the GPU-hour meter when a lease ends (the pass that grants opens it:
allocation.engine.apply). Every end of a lease goes through `allocation.lease_states.lease_end` or
`leases_end`, and both close the lease's open meter row in the same transaction (on PostgreSQL,
in the same statement as the lease row)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Greatest

from allocation.models import Lease, LeaseUsage
from core.db.statements import Statement


def meter_close(lease_ids: Sequence[Any], now: datetime) -> int:
    """End the open meter rows of these leases at `now` (never before their start); returns how
    many were open. One UPDATE; none for no leases."""
    if not lease_ids:
        return 0
    return LeaseUsage.objects.filter(lease_id__in=lease_ids, ended_at__isnull=True).update(
        ended_at=Greatest(F("started_at"), Value(now)))


def meter_close_sql(lease_id: Any, now: datetime) -> Statement:
    """`meter_close` of one lease as a statement for a data-modifying CTE (core.db.statements)."""
    pk = Lease._meta.pk.get_db_prep_value(lease_id, connection)
    return (f"UPDATE {LeaseUsage._meta.db_table} SET ended_at = GREATEST(started_at, %s::timestamptz) "
            "WHERE lease_id = %s AND ended_at IS NULL", [now, pk])
