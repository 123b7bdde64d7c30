"""Set-based writes (core/db/bulk.py) store exactly what they are given, in one statement:
awkward text, NULLs, JSON, times, UUIDs; and update only the rows that still match."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.models import AuditEvent, Lease
from core.db.bulk import Insert, bulk_insert_columns, bulk_insert_together, bulk_set, bulk_update_columns

pytestmark = pytest.mark.django_db

AWKWARD = ['plain', 'with "quotes"', "back\\slash", "comma, {braces}", "NULL", "", "ünïcødé ✓", "new\nline",
           "trailing space ", "'single'"]


def test_rows_inserted_column_by_column_read_back_as_given(demo_fleet) -> None:
    now = timezone.now()
    n = len(AWKWARD)
    data = [{"text": text, "n": i, "nested": [i, None, {"q": '"'}]} for i, text in enumerate(AWKWARD)]
    with CaptureQueriesContext(connection) as queries:
        assert bulk_insert_columns(AuditEvent, ["at", "actor", "action", "object_type", "object_id", "lease",
                                                "message", "data"],
                                   [[now + timedelta(microseconds=i) for i in range(n)], AWKWARD, ["x"] * n,
                                    ["lease"] * n, [str(i) for i in range(n)], [None] * n, AWKWARD, data]) == n
    assert len(queries) == 1
    rows = list(AuditEvent.objects.filter(action="x").order_by("object_id").values_list(
        "at", "actor", "message", "data", "lease_id"))
    assert sorted(rows, key=lambda r: r[0]) == [
        (now + timedelta(microseconds=i), AWKWARD[i], AWKWARD[i], data[i], None) for i in range(n)]
    assert bulk_insert_columns(AuditEvent, ["actor"], [[]]) == 0


def test_inserts_of_several_tables_run_as_one_statement_and_empty_ones_are_left_out(demo_fleet) -> None:
    from allocation.models import LeaseOutbox

    now = timezone.now()
    audit: Insert = (AuditEvent, ["at", "actor", "action", "object_type", "object_id", "message", "data"],
             [[now, now], AWKWARD[:2], ["together", "together"], ["lease"] * 2, ["1", "2"], AWKWARD[1:3], [{}, {}]])
    outbox: Insert = (LeaseOutbox, ["lease_id", "pool_id", "team_id", "state", "created_at"],
              [["7c9e6679-7425-40de-944b-e07fc1f90ae7"], [1], [2], ["granted"], [now]])
    empty: Insert = (AuditEvent, ["actor"], [[]])
    with CaptureQueriesContext(connection) as queries:
        assert bulk_insert_together([audit, empty, outbox]) == 3
    assert len(queries) == 1
    assert sorted(AuditEvent.objects.filter(action="together").values_list("actor", "message")) == sorted(
        [(AWKWARD[0], AWKWARD[1]), (AWKWARD[1], AWKWARD[2])])
    assert list(LeaseOutbox.objects.values_list("team_id", "state")) == [(2, "granted")]
    with CaptureQueriesContext(connection) as queries:
        assert bulk_insert_together([empty]) == 0 and bulk_insert_together([]) == 0
    assert len(queries) == 0


def test_an_update_by_columns_writes_only_rows_still_matching_and_says_which(demo_fleet, make_user) -> None:
    from allocation.models import PriorityClass, Team
    from inventory.models import Pool

    user = make_user("alice", teams=("vision",))
    made = Lease.objects.bulk_create([Lease(team=Team.objects.get(name="vision"), user=user,
                                            pool=Pool.objects.get(name="training"),
                                            priority_class=PriorityClass.objects.get(name="default"),
                                            gpu_count=1, ttl_seconds=60) for _ in AWKWARD])
    Lease.objects.filter(pk=made[0].pk).update(state="released")
    keys = [str(lease.pk) for lease in made]
    written = bulk_update_columns(Lease, keys, ["reason", "queue_position"], [AWKWARD, list(range(len(AWKWARD)))],
                                  same={"estimated_start": None, "borrowed": True}, only_if={"state": "pending"})
    assert written == set(keys[1:])
    got = {str(pk): rest for pk, *rest in Lease.objects.values_list("pk", "reason", "queue_position", "borrowed")}
    assert got[keys[0]] == ["", None, False]
    assert all(got[k] == [AWKWARD[i], i, True] for i, k in enumerate(keys) if i)
    assert bulk_update_columns(Lease, [], ["reason"], [[]]) == set()
    assert bulk_set(Lease, keys[:2], gpu_count=3) == 2
    assert sorted(Lease.objects.values_list("gpu_count", flat=True)) == [1] * (len(keys) - 2) + [3, 3]
