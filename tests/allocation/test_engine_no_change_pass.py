"""A pass that changes nothing writes nothing, and reads in the same few queries whatever the size."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from allocation.engine import run_pass
from allocation.engine.snapshot import forget
from inventory.models import Pool

pytestmark = pytest.mark.django_db


def _writes(queries: list[dict]) -> list[str]:
    return [q["sql"][:120] for q in queries
            if q["sql"].lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "COPY")]


def test_a_pass_over_a_full_fleet_and_a_backlog_that_cannot_fit_writes_nothing(fleet, leases) -> None:
    pool = fleet(hosts=2)
    leases(pool, 2, gpus=8)
    assert len(run_pass([pool.pk])[0].granted) == 2
    leases(pool, 3, gpus=8, team="b")
    assert run_pass([pool.pk])[0].pending == 3  # the backlog got its first explanations
    for cold in (False, True):  # with the views of the last pass kept, and as a new process
        if cold:
            forget()
        with CaptureQueriesContext(connection) as queries:
            again = run_pass([pool.pk])[0]
        assert (again.granted, again.preempted, again.pending) == ([], [], 3)
        assert _writes(queries.captured_queries) == []


def test_a_no_change_pass_reads_the_same_number_of_queries_for_a_small_and_a_large_pool(fleet, leases) -> None:
    large = fleet(hosts=2)
    small = Pool.objects.get(name="spare")
    leases(large, 16, gpus=1)
    leases(small, 1, gpus=8)
    run_pass()  # both pools full; then a backlog (of one team: its queue order cannot change)
    leases(large, 12, gpus=2, team="b")
    leases(small, 1, gpus=8, team="b")
    run_pass()
    counts = {}
    for pool in (large, small):
        with CaptureQueriesContext(connection) as queries:
            report = run_pass([pool.pk])[0]
        assert not report.granted and report.pending
        counts[pool.name] = len(queries)
    assert counts["gpus"] == counts["spare"]
