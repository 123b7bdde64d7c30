"""The hot statements, prepared once a session, are planned once a session too.

PostgreSQL plans a prepared statement anew at each execution while a plan made for the values
looks cheaper than the generic one: the release's statement (ten parts) was planned at every
release, 2.3 ms a call, 17 % of PostgreSQL's CPU in bench/bench_kueue_baseline.py. The sessions
of the backend (core/db/postgresql/base.py) use generic plans, whose shape the plan tests check
(tests/allocation/test_release_plan.py)."""

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


def test_a_session_plans_its_prepared_statements_once(fleet, leases) -> None:
    with connection.cursor() as cur:
        cur.execute("SHOW plan_cache_mode")
        assert cur.fetchone()[0] == "force_generic_plan"  # (the release below would be planned each time)
    pool = fleet(hosts=2)
    granted = leases(pool, 8, gpus=1)
    run_pass([pool.pk])
    before = _plans()  # the session (and its statements) may have served earlier tests
    for lease in granted:  # past the five executions after which PostgreSQL may choose
        lease_release(lease=lease.pk, actor="test")
    after = _plans()
    grown = {name: (row[1] - before.get(name, (0, 0, 0))[1], row[2] - before.get(name, (0, 0, 0))[2])
             for name, row in after.items()}
    releases = [grown[name] for name, row in after.items() if "ended_lease" in row[0] and grown[name] != (0, 0)]
    assert releases == [(len(granted), 0)]
    assert all(custom == 0 for _, custom in grown.values()), grown


def test_without_prepared_statements_the_session_keeps_postgresql_s_choice(settings) -> None:
    from django.db import connections

    settings.GPUPOOL = {**settings.GPUPOOL, "PREPARED_STATEMENTS": False}
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SHOW plan_cache_mode")
            assert cur.fetchone()[0] == "auto"
    finally:
        other.close()
