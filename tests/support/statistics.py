"""Planner statistics as a test wants them: fresh (ANALYZE), or none at all, as PostgreSQL has them
for a table no ANALYZE has seen (autovacuum off, or rows just loaded). Inside the test's
transaction: rolled back with it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from django.db import connection

STATISTICS = ("never analysed", "analysed")


def set_statistics(tables: Sequence[str], statistics: str) -> None:
    """`statistics` one of STATISTICS. Forgetting them writes pg_statistic: a superuser's right
    (the machine's server and the embedded one both connect as one); the case is skipped
    elsewhere."""
    with connection.cursor() as cur:
        if statistics == "analysed":
            cur.execute(f"ANALYZE {', '.join(tables)}")
            return
        cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        if not cur.fetchone()[0]:
            pytest.skip("forgetting statistics needs a superuser connection")
        cur.execute("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(tables)])
