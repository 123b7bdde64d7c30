"""The release's prepared statement is planned once a session, whatever PostgreSQL would choose.

PostgreSQL plans a prepared statement anew at each execution while a plan made for the values
looks cheaper than the generic one: the release's statement (ten parts) was planned at every
release, 2.3 ms a call, 17 % of PostgreSQL's CPU in bench/bench_kueue_baseline.py. It now runs
with `plan_cache_mode = force_generic_plan` for its transaction (core.db.statements.execute,
`generic`), the plan whose shape tests/allocation/test_release_plan.py checks; the session
otherwise keeps PostgreSQL's choice."""

from __future__ import annotations

import pytest
from django.db import connection

from allocation.engine import run_pass
from allocation.services.leases import lease_release

pytestmark = pytest.mark.django_db


def _plans() -> dict[str, tuple[str, int, int]]:
    """This session's prepared statements: name → (statement, generic plans, custom plans)."""
    with connection.cursor() as cur:
        cur.execute("SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE name LIKE 'gpupool_%%'")
        return {name: (statement, generic, custom) for name, statement, generic, custom in cur.fetchall()}


def test_the_release_is_planned_once_a_session(fleet, leases) -> None:
    pool = fleet(hosts=2)
    granted = leases(pool, 8, gpus=1)
    run_pass([pool.pk])
    before = _plans()  # the session (and its statements) may have served earlier tests
    for lease in granted:  # past the five executions after which PostgreSQL may choose
        lease_release(lease=lease.pk, actor="test")
    after = _plans()
    grown = {name: (row[1] - before.get(name, ("", 0, 0))[1], row[2] - before.get(name, ("", 0, 0))[2])
             for name, row in after.items()}
    releases = [grown[name] for name, row in after.items() if "ended_lease" in row[0] and grown[name] != (0, 0)]
    assert releases == [(len(granted), 0)]
