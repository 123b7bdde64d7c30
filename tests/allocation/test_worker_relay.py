"""A scheduler process (a prefork Celery child, as scripts/run.sh starts it) publishes its passes'
lease events from a relay thread of its own (pool.celery._relay_in_background), not inline after
each pass's commit; `GPUPOOL_OUTBOX_RELAY_THREAD=0` keeps the inline publish. Either way every
event of a pass reaches the stream without the periodic relay (no beat runs here)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from allocation.models import Lease, LeaseOutbox
from allocation.triggers import request_pass
from inventory.models import Pool
from pool.celery import app
from stacktools.processes import WORKER_READY, Proc, log_says, worker_command
from stacktools.processes import running as stack_running
from stacktools.ready import wait_until
from tests.support import processes

FLEET = ("pools: [{name: p}]\nteams: [{name: a}]\npriority_classes: [{name: default, value: 0}]\n"
         "sources: [{name: s, kind: simulated, pool: p, hosts: 1, gpus_per_host: 8}]\n")


def _sessions() -> int:
    """Client sessions on this test's database other than this test's own: the scheduler's."""
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        return int(cur.fetchone()[0])


def _granted(ids: list[Any]) -> bool:
    return Lease.objects.filter(pk__in=ids, state="granted").count() == len(ids)


def _published(ids: list[Any]) -> bool:
    return not LeaseOutbox.objects.filter(lease_id__in=ids, stream_id=None).exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("thread", "sessions"), [("1", 2), ("0", 1)])
def test_a_scheduler_process_publishes_its_passes_events_from_its_relay_thread(
        apply_yaml: Any, leases: Any, settings: Any, tmp_path: Path, thread: str, sessions: int) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "AUTOSCHEDULE": True}
    apply_yaml(FLEET)
    pool = Pool.objects.get(name="p")
    app.control.purge()
    proc = Proc("scheduler", worker_command(f"relay-{os.getpid()}", "gpupool.schedule", 1, "INFO",
                                            "--without-heartbeat"),
                processes.process_env(GPUPOOL_AUTOSCHEDULE="1", GPUPOOL_OUTBOX_RELAY_THREAD=thread),
                tmp_path / "scheduler.log", log_says(WORKER_READY))
    with stack_running([proc], timeout=60):
        for round_ in range(3):
            made = leases(pool, 2)
            request_pass(pool.pk)
            ids = [lease.pk for lease in made]
            assert wait_until(partial(_granted, ids), timeout=30, interval=0.1), proc.tail()
            # Published by the scheduler process itself: nothing else relays here.
            assert wait_until(partial(_published, ids), timeout=10, interval=0.1), (round_, proc.tail())
        # The child's own session, and the relay thread's beside it when it has one.
        assert _sessions() == sessions
