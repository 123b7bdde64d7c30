"""How task messages come back after a worker dies (no kill -9 here: the options that decide it).

The scheduling pass is acknowledged on receipt: a killed worker's pass is not held for the
broker's visibility timeout (an hour) but replaced by beat's periodic pass within
PASS_INTERVAL_S. Every other task is acknowledged late, and the visibility timeout, one for all
queues in kombu's Redis transport, outlasts the longest countdown plus the longest run, so no
message still held by a live worker is handed out a second time."""

from __future__ import annotations

from django.conf import settings

from allocation.workloads.stopping import PERMANENT_RETRY_S, retry_delay_s
from pool.celery import app

GPUPOOL_TASKS = ("allocation.", "inventory.", "history.")


def _tasks() -> dict[str, object]:
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if name.startswith(GPUPOOL_TASKS)}


def test_the_scheduling_pass_is_acknowledged_on_receipt_and_every_other_task_late() -> None:
    tasks = _tasks()
    assert "allocation.schedule_pass" in tasks and "allocation.unbind_lease" in tasks
    late = {name for name, task in tasks.items() if task.acks_late}  # type: ignore[attr-defined]
    assert late == set(tasks) - {"allocation.schedule_pass"}, late


def test_a_lost_pass_is_replaced_by_the_periodic_pass_within_seconds() -> None:
    entry = app.conf.beat_schedule["schedule-pass"]
    assert entry["task"] == "allocation.schedule_pass" and "args" not in entry  # every pool
    assert float(entry["schedule"]) == settings.GPUPOOL["PASS_INTERVAL_S"] <= 60


def test_the_visibility_timeout_outlasts_the_longest_countdown_and_run() -> None:
    longest_run = max(int(task.time_limit or 0) for task in _tasks().values())  # type: ignore[attr-defined]
    longest_countdown = max(PERMANENT_RETRY_S, *(retry_delay_s(n, permanent=False) for n in range(1, 20)))
    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert isinstance(timeout, int) and timeout > longest_countdown + longest_run, (timeout, longest_countdown,
                                                                                    longest_run)
