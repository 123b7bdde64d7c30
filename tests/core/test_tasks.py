"""The one task decorator: retries what it is told to with backoff, says when an attempt is the last,
counts outcomes, and keeps Celery's argument check working."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError

from core.tasks import TASK_RUNS, backoff_s, final_attempt, gpupool_task


class Flaky(Exception):
    pass


calls: list[tuple[int, bool]] = []


@gpupool_task(name="tests.core.flaky", retry_on=(Flaky,), max_retries=3)
def flaky(fail_times: int) -> str:
    calls.append((len(calls), final_attempt()))
    if len(calls) <= fail_times:
        raise Flaky(f"failure {len(calls)}")
    return "done"


@gpupool_task(name="tests.core.database_down", max_retries=1)
def database_down() -> None:
    raise OperationalError("the database is not answering")


def _count(task: str, outcome: str) -> float:
    return TASK_RUNS.labels(task, outcome)._value.get()


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


def test_a_retried_error_runs_again_until_it_succeeds_and_each_outcome_is_counted() -> None:
    before = {o: _count("tests.core.flaky", o) for o in ("success", "retry", "failure")}
    assert flaky.apply(args=(2,)).get() == "done"
    assert [final for _, final in calls] == [False, False, False]
    assert _count("tests.core.flaky", "retry") - before["retry"] == 2
    assert _count("tests.core.flaky", "success") - before["success"] == 1
    assert _count("tests.core.flaky", "failure") == before["failure"]


def test_the_last_attempt_knows_it_is_the_last_and_its_failure_is_raised() -> None:
    result = flaky.apply(args=(10,))
    assert isinstance(result.result, Flaky)
    assert [final for _, final in calls] == [False, False, False, True]  # max_retries=3: four runs


def test_transient_database_errors_are_retried_for_every_task() -> None:
    before = _count("tests.core.database_down", "retry")
    result = database_down.apply()
    assert isinstance(result.result, OperationalError)
    assert _count("tests.core.database_down", "retry") - before == 1


def test_celery_still_checks_the_arguments_of_the_body_not_of_the_wrapper() -> None:
    with pytest.raises(TypeError):
        flaky.apply_async(args=(1, 2))  # the body takes one argument: refused before anything is sent
    with pytest.raises(TypeError):
        database_down.apply_async(args=(1,))


@pytest.mark.parametrize("retries", [0, 1, 3, 10])
def test_backoff_doubles_within_jitter_and_is_capped(retries: int) -> None:
    delays: list[Any] = [backoff_s(retries) for _ in range(50)]
    full = min(60.0, 2.0 ** retries)
    assert all(full / 2 <= d <= full for d in delays)
