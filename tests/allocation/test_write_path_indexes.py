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


@pytest.mark.parametrize("table", ["allocation_lease", "allocation_leasegpu", "allocation_leaseusage",
                                   "allocation_auditevent"])
def test_no_two_indexes_cover_the_same_columns(table: str) -> None:
    """A column's plain index and its LIKE twin (what `db_index=True` makes of a CharField) are
    two entries at every insert where one serves every look-up (migration allocation 0022)."""
    seen: dict[tuple[str, ...], str] = {}
    twins = []
    for name, columns in sorted(_indexes(table).items()):
        if tuple(columns) in seen:
            twins.append((seen[tuple(columns)], name))
        seen[tuple(columns)] = name
    assert twins == []


def test_no_index_on_what_no_query_looks_up() -> None:
    """A lease's preemptor is read with the lease, never looked up; leases are never deleted, the
    one use Django's SET_NULL would make of an index on it (migration allocation 0022)."""
    assert [name for name, cols in _indexes("allocation_lease").items() if "preempted_by_id" in cols] == []


def test_the_audit_log_checks_no_key_at_commit() -> None:
    """Three audit events a lease, each a key-share check of the lease row at commit with a
    foreign key constraint; the log names leases that are never deleted (migration 0022)."""
    with connection.cursor() as cur:
        cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'allocation_auditevent'::regclass "
                    "AND contype = 'f'")
        assert cur.fetchall() == []


@pytest.mark.parametrize(("where", "index"), [
    ("action = 'lease.preempt'", "audit_action"),  # pool.metrics
    ("action LIKE 'lease.%%'", "audit_action"),  # the API's action_prefix
    ("object_id = 'x'", "audit_object_id"),
])
def test_the_audit_logs_look_ups_have_their_index(where: str, index: str) -> None:
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off")  # an empty table: whether it can, not whether it pays
        try:
            cur.execute(f"EXPLAIN SELECT id FROM allocation_auditevent WHERE {where}")
            plan = "\n".join(row[0] for row in cur.fetchall())
        finally:
            cur.execute("RESET enable_seqscan")
    assert index in plan, plan


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
    ctes = dict(guard.ctes)  # the count, as the create's statement runs it: after the bound's look-up
    sql = f"WITH queue_bound AS ({ctes['queue_bound'][0]}) {ctes['queue_count'][0]}"
    params = [*ctes["queue_bound"][1], *ctes["queue_count"][1]]
    numbered = sql
    for n in range(1, len(params) + 1):
        numbered = numbered.replace("%s", f"${n}", 1)
    # The team's (team, state) index answers the count too, and where the table's pages are not
    # all-visible (rows other tests rolled back, never vacuumed) PostgreSQL may rightly prefer it:
    # dropped in this test's transaction, the question is only whether the partial index can serve.
    team_state = next(index.name for index in Lease._meta.indexes if index.fields == ["team", "state"])
    with connection.cursor() as cur:
        cur.execute(f"DROP INDEX {team_state}")
        cur.execute("ANALYZE allocation_lease")
        cur.execute(f"PREPARE queue_count({', '.join(['bigint'] * len(params))}) AS {numbered}")
        try:
            cur.execute("SET plan_cache_mode = force_generic_plan")
            cur.execute("SET enable_seqscan = off")  # 400 rows: whether it can, not whether it pays
            cur.execute(f"EXPLAIN EXECUTE queue_count({', '.join(['%s'] * len(params))})", params)
            plan = "\n".join(row[0] for row in cur.fetchall())
        finally:
            cur.execute("DEALLOCATE queue_count; RESET plan_cache_mode; RESET enable_seqscan")
    assert "lease_pending_queue" in plan, plan
