"""A pass's reads cost what runs and waits, not what ran: no read of the running leases scans the
lease table, whose size is the pool's whole history.

Before, four reads of every pass (the GPUs' "held by another pool" check, the pool's links, its
holding leases and the teams' running usage) joined the active links to the lease table; on a
table of thousands of ended leases PostgreSQL hashed all of it, 5-40 ms a read by the end of
bench/bench_kueue_baseline.py, growing with every lease ever made.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from allocation.engine import run_pass
from allocation.engine.snapshot import read_pool
from allocation.ledger import team_usage_views
from allocation.models import Lease
from core.db.statements import positional
from tests.support.statistics import STATISTICS, set_statistics

pytestmark = pytest.mark.django_db

HISTORY = 20_000


def _add_history(n: int) -> None:
    """`n` released leases (copies of a pending one, with new ids), then fresh statistics, as a
    production table would have them."""
    table = Lease._meta.db_table
    skip = ("id", "state", "ended_at", "idempotency_key")
    columns = [f.column for f in Lease._meta.local_concrete_fields if f.column and f.column not in skip]
    listed = ", ".join(columns)
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO {table} (id, state, ended_at, idempotency_key, {listed}) "
                    f"SELECT gen_random_uuid(), 'released', now(), '', {listed} "
                    f"FROM {table}, generate_series(1, %s) WHERE state = 'pending' "
                    f"AND id = (SELECT min(id::text)::uuid FROM {table} WHERE state = 'pending')", [n])
        cur.execute(f"ANALYZE {table}")
        cur.execute("ANALYZE allocation_leasegpu")


def _plans(queries: list[dict]) -> list[tuple[str, str]]:
    """(statement, plan) of each captured read of the lease table. A prepared one (its EXECUTE
    captured, core.db.statements.execute) is explained twice: with PostgreSQL's choice of plan now,
    and with its generic plan, which PostgreSQL may choose after five executions."""
    plans = []
    modes: tuple[str, ...]
    with connection.cursor() as cur:
        for q in queries:
            sql = q["sql"].strip()
            at = sql.rfind("EXECUTE gpupool_")
            if at >= 0:
                run = sql[at:]
                cur.execute("SELECT statement FROM pg_prepared_statements WHERE name = %s",
                            [run.split()[1].split("(")[0]])
                text, modes = cur.fetchone()[0].split(" AS ", 1)[1], ("auto", "force_generic_plan")
            else:
                run, text, modes = sql, sql, ("auto",)
            reads = text.lstrip().upper().startswith("SELECT") or (
                text.lstrip().upper().startswith("WITH") and not re.search(r"\b(INSERT|UPDATE|DELETE)\b", text.upper()))
            if not (reads and "allocation_lease" in text):
                continue
            for mode in modes:
                cur.execute(f"SET plan_cache_mode = {mode}")
                cur.execute("EXPLAIN " + run)
                plans.append((f"{text} [{mode}]", "\n".join(r[0] for r in cur.fetchall())))
        cur.execute("RESET plan_cache_mode")
    return plans


def test_no_read_of_a_pass_scans_the_lease_history(fleet, leases) -> None:
    pool = fleet(hosts=25)  # 200 GPUs, 150 held below
    leases(pool, 150, gpus=1)
    run_pass([pool.pk])
    assert Lease.objects.filter(pool=pool, state="granted").count() == 150
    leases(pool, 20, gpus=4)  # a queue that waits
    _add_history(HISTORY)

    with CaptureQueriesContext(connection) as queries:
        read = read_pool(pool, timezone.now())
        team_usage_views(timezone.now())
    assert len(read.snapshot.running) == 150 and len(read.snapshot.pending) == 20
    plans = _plans(queries.captured_queries)
    assert len(plans) >= 5  # GPUs, links, holding leases, pending versions and rows, usage
    scans = [sql for sql, plan in plans if "Seq Scan on allocation_lease " in plan + " "]
    assert not scans, "a pass read scans the lease history:\n" + "\n\n".join(scans)


def test_a_pass_runs_without_jit(fleet, leases, monkeypatch) -> None:
    """The pass's transaction has JIT off, set by its lock's own statement (no query more)."""
    import allocation.engine as engine

    pool = fleet(hosts=1)
    leases(pool, 1, gpus=1)
    seen: list[str] = []
    real = engine._pass

    def spy(*args, **kwargs):
        with connection.cursor() as cur:
            cur.execute("SHOW jit")
            seen.append(cur.fetchone()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "_pass", spy)
    with CaptureQueriesContext(connection) as queries:
        run_pass([pool.pk])
    assert seen == ["off"]
    locks = [q["sql"] for q in queries.captured_queries if "advisory_xact" in q["sql"]]
    assert len(locks) == 1 and "set_config('jit', 'off', true)" in locks[0]


def _lease_rows_read(sql: str) -> int:
    """Lease rows `sql` fetched, from this transaction's own table statistics."""
    count = ("SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0) FROM pg_stat_xact_user_tables "
             f"WHERE relname = '{Lease._meta.db_table}'")
    with connection.cursor() as cur:
        cur.execute(count)
        before = cur.fetchone()[0]
        cur.execute(sql)
        cur.fetchall()
        cur.execute(count)
        return int(cur.fetchone()[0]) - int(before)


def _rows_read(sql: str, params: dict, table: str) -> tuple[list[tuple], int]:
    """The rows of `sql` and how many rows of `table` it fetched (this transaction's statistics)."""
    count = ("SELECT COALESCE(sum(idx_tup_fetch), 0) + COALESCE(sum(seq_tup_read), 0) FROM pg_stat_xact_user_tables "
             "WHERE relname = %s")
    with connection.cursor() as cur:
        cur.execute(count, [table])
        before = cur.fetchone()[0]
        cur.execute(sql, params)
        rows = cur.fetchall()
        cur.execute(count, [table])
        return rows, int(cur.fetchone()[0]) - int(before)


@pytest.mark.parametrize("statistics", STATISTICS)
def test_a_pass_reads_the_links_of_its_pool_not_of_the_fleet(fleet, leases, statistics) -> None:
    """The links a pass reads (allocation.running_links): its pool's leases', an ended lease's it
    still holds, and a GPU moved in while another pool's lease holds it, and no other, whatever
    the statistics: a pool among 50 read every active link of the fleet (27 ms a pass,
    bench_scale.py scale-out), and a plan that scans the link table reads its history too."""
    from allocation.lease_states import lease_end
    from allocation.running_links import LINKS_SQL
    from inventory.models import Gpu, Pool

    big = fleet(hosts=40)  # 320 GPUs, all held below
    spare = Pool.objects.get(name="spare")
    leases(big, 320, gpus=1)
    run_pass([big.pk])
    own = leases(spare, 2, gpus=1)
    run_pass([spare.pk])
    assert Lease.objects.filter(state="granted").count() == 322
    ending = Lease.objects.get(pk=own[0].pk)
    lease_end(ending, "released", actor="test", reason="stopping", keep_gpus=True)  # still holds its GPU
    moved = Gpu.objects.filter(pool=big, leased=True).order_by("pk").first()
    assert moved is not None
    Gpu.objects.filter(pk=moved.pk).update(pool=spare)  # held by a lease of the big pool
    leases(big, 1)  # waits: the model of the history's leases
    _add_history(HISTORY // 10)
    with connection.cursor() as cur:  # and the links those leases held: 40 each, all inactive now
        cur.execute("INSERT INTO allocation_leasegpu (lease_id, gpu_id, active) SELECT l.id, g.id, false "
                    f"FROM {Lease._meta.db_table} l CROSS JOIN LATERAL (SELECT id FROM inventory_gpu "
                    "WHERE pool_id = %s ORDER BY id LIMIT 40) AS g "
                    "WHERE l.state = 'released' AND l.ending_since IS NULL", [big.pk])
    set_statistics([Lease._meta.db_table, "allocation_leasegpu", "inventory_gpu"], statistics)

    rows, fetched = _rows_read(LINKS_SQL, {"pool": spare.pk}, "allocation_leasegpu")
    mine = {(str(lease.pk), gpu) for lease in own for gpu in lease.gpu_links.values_list("gpu_id", flat=True)}
    holder = str(moved.lease_links.get(active=True).lease_id)
    assert sorted(rows) == sorted([(lid, gpu, spare.pk) for lid, gpu in mine] + [(holder, moved.pk, big.pk)])
    assert fetched <= 10, f"{fetched} links read for a pool with 3"


@pytest.mark.parametrize("statistics", STATISTICS)
def test_the_running_usage_reads_the_running_leases_not_the_queue(fleet, leases, statistics) -> None:
    """Each pass sums the running leases' GPUs per team (team_usage_views). A pending lease has
    neither a grant time nor an active link: reading the queue too cost a heap page per pending
    lease, every pass (on tables never analysed the plan went through the state index, the
    queue with it: 2,008 rows here)."""
    from allocation.ledger import RUNNING_SQL

    pool = fleet(hosts=2)  # 16 GPUs
    leases(pool, 8, gpus=2)
    run_pass([pool.pk])
    leases(pool, 2_000, gpus=1)  # a long queue that waits
    assert Lease.objects.filter(pool=pool, state="granted").count() == 8
    set_statistics([Lease._meta.db_table, "allocation_leasegpu"], statistics)
    assert _lease_rows_read(RUNNING_SQL) <= 16  # the running leases, or one per active link


def _pages(sql: str, params: dict, *, generic: bool = False) -> tuple[int, int]:
    """(rows, shared buffer pages) of one execution of `sql`: planned for its values, or with the
    generic plan of the prepared statement the pass runs it as (core.db.statements.execute_named)."""
    with connection.cursor() as cur:
        if generic:
            text, names = positional(sql)
            numbers = iter(range(1, len(names) + 1))
            cur.execute("PREPARE pages_q AS " + re.sub(r"%s", lambda _: f"${next(numbers)}", text))
            cur.execute("SET plan_cache_mode = force_generic_plan")
            args = ", ".join(["%s"] * len(names))
            cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE pages_q{f'({args})' if names else ''}",
                        [params[name] for name in names])
        else:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        plan = cur.fetchone()[0][0]["Plan"]
        if generic:
            cur.execute("RESET plan_cache_mode; DEALLOCATE pages_q")
    return plan["Actual Rows"], plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


@pytest.mark.parametrize("statistics", STATISTICS)
def test_a_pass_reads_its_leases_without_a_lookup_a_row(fleet, leases, statistics) -> None:
    """The pass's reads of its pending and running leases, and the teams' running usage, cost
    about a page per few leases, whatever the statistics: no join whose plan can turn into a
    nested loop of index look-ups a lease (on tables never analysed, the whole read of the queue
    looked up each lease's team and class, 4 pages a lease; the usage, each lease's links, 3)."""
    from allocation.engine.lease_reads import BY_IDS, BY_POOL, HOLDING_SQL, PENDING_SQL
    from allocation.ledger import RUNNING_SQL

    pool = fleet(hosts=40)  # 320 GPUs
    leases(pool, 320, gpus=1)
    run_pass([pool.pk])
    leases(pool, 1_000, gpus=1)  # a queue that waits
    running = [str(pk) for pk in Lease.objects.filter(pool=pool, state="granted").values_list("pk", flat=True)]
    assert len(running) == 320
    set_statistics([Lease._meta.db_table, "allocation_leasegpu", "allocation_team", "allocation_priorityclass"],
                   statistics)
    whole = PENDING_SQL.replace("{where}", BY_POOL)
    for generic in (False, True):  # the pass prepares it: PostgreSQL may settle on either plan
        rows, pages = _pages(whole, {"pool": pool.pk, "pending": "pending"}, generic=generic)
        assert rows == 1_000 and pages <= rows // 2
    # Planned for its ids every time (lease_reads.read): each found by key (~3 pages of index and heap), nothing more
    rows, pages = _pages(HOLDING_SQL.format(where=BY_IDS), {"ids": running})
    assert rows == 320 and pages <= rows * 4
    rows, pages = _pages(RUNNING_SQL, {})  # never prepared: its one plan would be the first's for ever
    assert rows >= 1 and pages <= 320 // 2


def test_a_read_prepared_on_a_young_table_still_avoids_the_history(fleet, leases) -> None:
    """A prepared read's generic plan, once PostgreSQL settles on it (after five executions; at
    once for a statement without parameters), is kept by the session until the table's statistics
    change; on a server that never analyses (autovacuum off) that is for ever. Passes that began
    on a young table, then ran on a table grown a long history, must still not scan it. (The
    running usage, prepared, failed this: its one plan, made on the young table, scanned it.)"""
    pool = fleet(hosts=4)
    leases(pool, 8, gpus=1)
    run_pass([pool.pk])
    leases(pool, 4, gpus=4)  # a queue that waits
    for _ in range(8):  # past the five executions
        read_pool(pool, timezone.now())
    table = Lease._meta.db_table
    skip = ("id", "state", "ended_at", "idempotency_key")
    columns = ", ".join(f.column for f in Lease._meta.local_concrete_fields if f.column and f.column not in skip)
    with connection.cursor() as cur:  # history, and no ANALYZE to make the session plan again
        cur.execute(f"INSERT INTO {table} (id, state, ended_at, idempotency_key, {columns}) "
                    f"SELECT gen_random_uuid(), 'released', now(), '', {columns} "
                    f"FROM {table}, generate_series(1, %s) WHERE state = 'pending' "
                    f"AND id = (SELECT min(id::text)::uuid FROM {table} WHERE state = 'pending')", [HISTORY])
    with CaptureQueriesContext(connection) as queries:
        read_pool(pool, timezone.now())
        team_usage_views(timezone.now())
    executed = [q for q in queries.captured_queries if "EXECUTE gpupool_" in q["sql"]]
    assert executed
    scans = []
    with connection.cursor() as cur:
        for q in executed:
            run = q["sql"][q["sql"].rfind("EXECUTE gpupool_"):]
            cur.execute("EXPLAIN " + run)  # the plan the session would use now
            plan = "\n".join(r[0] for r in cur.fetchall())
            if f"Seq Scan on {table} " in plan + " ":
                scans.append(run + "\n" + plan)
    assert not scans, "a prepared pass read scans the lease history:\n" + "\n\n".join(scans)
