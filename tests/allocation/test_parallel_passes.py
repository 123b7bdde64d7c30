"""Passes that scale out, with real processes: two Celery workers on the schedule queue (two
scheduler processes) pass different pools at once on PostgreSQL + Redis. A pool whose lock is held
does not hold up a worker (it is handed over: allocation.engine.handoff), and triggers sent while
passes run are never lost: every lease is granted, each GPU to one lease."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from allocation.models import Lease, LeaseGpu
from allocation.selectors.invariants import ledger_check
from allocation.triggers import request_every_pass, request_pass
from inventory.models import Pool
from pool.celery import app
from stacktools.processes import WORKER_READY, Proc, log_says, worker_command
from stacktools.processes import running as stack_running
from stacktools.ready import wait_until
from tests.support import processes

POOLS = 6
_POOLS = ", ".join(f"{{name: p{i}}}" for i in range(POOLS))
_SOURCES = ", ".join(f"{{name: s{i}, kind: simulated, pool: p{i}, hosts: 1, gpus_per_host: 8}}" for i in range(POOLS))
FLEET = (f"pools: [{_POOLS}]\nteams: [{{name: a}}, {{name: b}}]\npriority_classes: [{{name: default, value: 0}}]\n"
         f"sources: [{_SOURCES}]\n")


@contextmanager
def _schedulers(tmp_path: Path, n: int) -> Iterator[list[Proc]]:
    """`n` scheduler processes: Celery workers (solo pool) on the schedule queue only."""
    procs = [Proc(f"scheduler {i}", worker_command(f"sched{i}-{os.getpid()}", "gpupool.schedule", 1, "INFO",
                                                   "-P", "solo", "--without-heartbeat"),
                  processes.process_env(GPUPOOL_AUTOSCHEDULE="1"), tmp_path / f"sched{i}.log", log_says(WORKER_READY))
             for i in range(n)]
    with stack_running(procs, timeout=60) as running:
        yield list(running)


def _granted(pools: list[Pool]) -> int:
    return Lease.objects.filter(pool__in=pools, state="granted").count()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_schedulers_pass_other_pools_while_two_are_busy_and_lose_no_trigger(
        apply_yaml: Any, leases: Any, settings: Any, tmp_path: Path) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "AUTOSCHEDULE": True}
    apply_yaml(FLEET)
    pools = list(Pool.objects.order_by("name"))
    busy, free = pools[:2], pools[2:]
    for pool in pools:
        leases(pool, 2)
    app.control.purge()
    holders = []
    for pool in busy:  # two pools in the middle of a long write, one per scheduler process
        other = psycopg2.connect(processes.test_database_url())
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [0x6770 << 48 | pool.pk])
        holders.append(other)
    with _schedulers(tmp_path, 2) as schedulers:
        try:
            request_every_pass()  # beat's periodic pass, fanned out: one task per pool
            # Waiting on a held lock, both processes would be stuck on the busy pools for good.
            assert wait_until(lambda: _granted(free) == 2 * len(free), timeout=60, interval=0.2), \
                [s.tail() for s in schedulers]
            assert _granted(busy) == 0
        finally:
            for other in holders:
                other.rollback()
                other.close()
        # The holders were no passes: their pools' wishes wait in PostgreSQL for the catch-up,
        # which beat sends every second.
        app.send_task("allocation.relay_lease_events")
        assert wait_until(lambda: _granted(busy) == 2 * len(busy), timeout=60, interval=0.2), \
            [s.tail() for s in schedulers]

        # Triggers while passes run: leases arrive one by one in every pool, each asking for its
        # pool's pass at once, the two processes passing as they come. None may be lost.
        for _ in range(6):
            for pool in pools:
                leases(pool, 1)
                request_pass(pool.pk)
        assert wait_until(lambda: _granted(pools) == 8 * POOLS, timeout=90, interval=0.2), \
            (_granted(pools), [s.tail() for s in schedulers])
        logs = [s.log_path.read_text() for s in schedulers]
    assert LeaseGpu.objects.filter(active=True).count() == 8 * POOLS
    assert LeaseGpu.objects.filter(active=True).values("gpu_id").distinct().count() == 8 * POOLS
    assert ledger_check().ok
    assert all("Traceback" not in log for log in logs), logs
