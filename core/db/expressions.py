"""SQL expressions of PostgreSQL the ORM has no word for."""

from __future__ import annotations

from django.db import models


class CurrentTransaction(models.Func):
    """The id of the transaction that writes the row (`pg_current_xact_id()`, the 64-bit form that
    never wraps around), as a bigint: a column default (`db_default`), so every INSERT stamps it,
    whoever writes it."""

    template = "(pg_current_xact_id()::text::bigint)"
    output_field = models.BigIntegerField()
