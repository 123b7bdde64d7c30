"""A real Celery worker keeps its database connection from one task to the next.

Celery's Django fixup closes every connection around each task unless told otherwise; each task
then paid for a new PostgreSQL backend (a fork, cold catalog caches, its prepared statements
prepared again): 1,800 connections in one Kueue benchmark run, one a scheduling pass. Workers now
recycle connections by Django's rules (pool.celery._recycle_connections).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from tests.support.processes import celery_worker

TASK = "allocation.relay_lease_events"


def _worker_backends() -> set[tuple[int, Any]]:
    """(pid, start) of every other client session on this test's database: the worker's."""
    with connection.cursor() as cur:
        cur.execute("SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        return set(cur.fetchall())


def _run_tasks(app: Any, log: Path, count: int, done_before: int) -> int:
    """Send `count` tasks and wait until the worker's log says each succeeded; the new total."""
    for _ in range(count):
        app.send_task(TASK, queue=settings.SCHEDULE_QUEUE)
    want, deadline = done_before + count, time.monotonic() + 30
    done = done_before
    while time.monotonic() < deadline:
        done = len(re.findall(rf"Task {re.escape(TASK)}\[[^\]]+\] succeeded", log.read_text()))
        if done >= want:
            return done
        time.sleep(0.1)
    raise AssertionError(f"{done - done_before} of {count} tasks finished: {log.read_text()[-2000:]}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_keeps_its_database_session_across_tasks(tmp_path: Path) -> None:
    from pool.celery import app

    if settings.CELERY_BROKER_URL.startswith("redis"):
        app.control.purge()
    log = tmp_path / "worker.log"
    with celery_worker(log):
        done = _run_tasks(app, log, 1, 0)
        first = _worker_backends()
        assert first, "the worker closed its connection after its task"
        _run_tasks(app, log, 10, done)
        # The same session (pid and start), not one per task.
        assert _worker_backends() == first
