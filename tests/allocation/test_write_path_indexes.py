"""The indexes of the tables every lease writes: what each grant and release must not pay for.

Read from the database's own catalogue, so a new index (a `db_index=True`, a ForeignKey's default
index) that brings the cost back fails here, naming itself."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from allocation.models import Lease, PriorityClass, Team
from allocation.policy.admission import QueueCaps
from allocation.services.queue_caps import queue_guard

pytestmark = pytest.mark.django_db

# Each table every lease writes, and the columns of its indexes (in order), as the catalogue has them.
INDEX_COLUMNS = """
SELECT i.indexrelid::regclass::text,
       array_agg(a.attname ORDER BY k.n) FILTER (WHERE a.attname IS NOT NULL)
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s::regclass AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY 1
"""


def _indexes(table: str) -> dict[str, list[str]]:
    with connection.cursor() as cur:
        cur.execute(INDEX_COLUMNS, [table])
        return {name: columns for name, columns in cur.fetchall()}


def test_a_gpus_grant_and_release_touch_no_indexed_column() -> None:
    """Each grant and release rewrites its GPUs' `state` and `leased`: unindexed, the update is
    HOT (no new index entry; the old version pruned on the page), migration inventory 0009."""
    written = {"state", "leased"}
    covering = {name: cols for name, cols in _indexes("inventory_gpu").items() if written & set(cols)}
    assert covering == {}
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE oid = 'inventory_gpu'::regclass")
        assert "fillfactor=50" in (cur.fetchone()[0] or [])  # room on the page for the new version


@pytest.mark.parametrize("table", ["allocation_lease", "allocation_leasegpu", "allocation_leaseusage"])
def test_no_index_repeats_the_lead_of_another(table: str) -> None:
    """An index whose columns lead another index (and is not unique) serves nothing the longer
    one does not, and costs an entry at every insert and non-HOT update (migration allocation 0019)."""
    indexes = _indexes(table)
    with connection.cursor() as cur:
        cur.execute("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = %s::regclass AND indisunique",
                    [table])
        unique = {row[0] for row in cur.fetchall()}
    repeated = [(short, long) for short, cols in indexes.items() for long, longer in indexes.items()
                if short != long and short not in unique and len(cols) < len(longer) and longer[:len(cols)] == cols]
    assert repeated == []


def test_a_creates_queue_count_reads_the_partial_index_under_a_generic_plan(fleet: Any) -> None:
    """The create statement is prepared (GPUPOOL_DB_PREPARE); after five executions PostgreSQL
    may keep a generic plan, which can use the partial index of pending leases only when the
    predicate `state = 'pending'` is in the text, not a parameter."""
    pool = fleet(hosts=1)
    user, default = get_user_model().objects.get(username="ann"), PriorityClass.objects.get(name="default")
    teams = [Team.objects.create(name=f"t{i}") for i in range(20)]
    Lease.objects.bulk_create([Lease(team=team, user=user, pool=pool, priority_class=default, gpu_count=1,
                                     ttl_seconds=60, state=state)
                               for team in teams for state in ["pending"] * 10 + ["released"] * 40])
    team = teams[0]
    guard = queue_guard(pool_id=pool.pk, team_id=team.pk, gpus=1, caps=QueueCaps(pending_leases_per_team=10))
    assert guard is not None
    sql, params = dict(guard.ctes)["queue"]
    with connection.cursor() as cur:
        cur.execute("ANALYZE allocation_lease")
        cur.execute("PREPARE queue_count(bigint, bigint) AS " + sql.replace("%s", "$1", 1).replace("%s", "$2", 1))
        try:
            cur.execute("SET plan_cache_mode = force_generic_plan")
            cur.execute("SET enable_seqscan = off")  # 400 rows: whether it can, not whether it pays
            cur.execute("EXPLAIN EXECUTE queue_count(%s, %s)", params)
            plan = "\n".join(row[0] for row in cur.fetchall())
        finally:
            cur.execute("DEALLOCATE queue_count; RESET plan_cache_mode; RESET enable_seqscan")
    assert "lease_pending_queue" in plan, plan
