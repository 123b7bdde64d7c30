"""Freeing a lease's GPUs finds every row by key, whatever PostgreSQL's statistics say.

On tables never analysed (autovacuum off, or a fleet just loaded) PostgreSQL guesses that an
equality matches 0.5% of a table: 300 links a lease in bench/bench_kueue_baseline.py, where the
release statement then hashed the whole GPU table twice (1,900 pages a release instead of ~130).
The statement is prepared too, so its plan outlives the statistics it was made with. The fleet
has 1,600 GPUs: a GPU table of a few pages is cheaper to scan, and PostgreSQL rightly says so (the
benchmark's 600 GPUs, rewritten all run, took 79 pages).
"""

from __future__ import annotations

import pytest
from django.db import connection

from allocation.engine import run_pass
from allocation.lease_states import _free_gpus_ctes
from allocation.models import Lease
from tests.support.statistics import STATISTICS, set_statistics

pytestmark = pytest.mark.django_db

TABLES = ("inventory_gpu", "allocation_leasegpu")  # the host table is an eighth of it: a scan may be right


def _generic_plan(lease_id: str) -> str:
    """The plan of the statement as it is prepared, planned for any lease (a generic plan)."""
    ctes = _free_gpus_ctes([lease_id])
    sql = "WITH " + ", ".join(f"{name} AS ({text})" for name, (text, _) in ctes) + " SELECT 1"
    params = [p for _, (_, ps) in ctes for p in ps]
    with connection.cursor() as cur:
        cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cur.execute("PREPARE free_gpus AS " + sql % tuple(f"${i}" for i in range(1, len(params) + 1)))
        cur.execute("EXPLAIN EXECUTE free_gpus(" + ", ".join(["%s"] * len(params)) + ")", params)
        plan = "\n".join(row[0] for row in cur.fetchall())
        cur.execute("DEALLOCATE free_gpus")
        return plan


def _add_history(links: int) -> None:
    """`links` GPU links of released leases (40 a lease: few lease rows, which the test's rollback
    leaves behind as dead pages), as a pool's history leaves them: the link table outgrows the GPU
    table."""
    table, link_table = Lease._meta.db_table, "allocation_leasegpu"
    skip = ("id", "state", "ended_at", "idempotency_key")
    columns = [f.column for f in Lease._meta.local_concrete_fields if f.column and f.column not in skip]
    listed = ", ".join(columns)
    with connection.cursor() as cur:
        cur.execute("CREATE TEMP TABLE old_leases AS SELECT gen_random_uuid() AS id, n FROM generate_series(1, %s) n",
                    [links // 40])
        cur.execute(f"INSERT INTO {table} (id, state, ended_at, idempotency_key, {listed}) "
                    f"SELECT o.id, 'released', now(), '', {listed} FROM old_leases o, "
                    f"(SELECT * FROM {table} ORDER BY id LIMIT 1) AS l")
        cur.execute(f"INSERT INTO {link_table} (lease_id, gpu_id, active) SELECT o.id, g.id, false "
                    "FROM old_leases o CROSS JOIN LATERAL (SELECT id FROM inventory_gpu "
                    "ORDER BY (id + o.n) % 97 LIMIT 40) AS g")


@pytest.mark.parametrize("statistics", STATISTICS)
def test_freeing_gpus_scans_no_table_of_the_fleet(fleet, leases, statistics) -> None:
    pool = fleet(hosts=200)
    granted = leases(pool, 20, gpus=4, same_host=False)
    run_pass([pool.pk])
    assert Lease.objects.filter(pool=pool, state="granted").count() == 20
    _add_history(40_000)
    set_statistics(TABLES, statistics)
    plan = _generic_plan(str(granted[0].pk))
    scans = [line for line in plan.splitlines() if "Seq Scan" in line and any(t in line for t in TABLES)]
    assert not scans, plan
