"""Queue explanations: a new lease's first one is written at once, changes at the head of the queue
too, changes further back at most once per interval; unchanged ones never."""

from __future__ import annotations

from typing import Any

import pytest

from allocation.engine import apply, run_pass
from allocation.models import Lease
from allocation.services.leases import lease_release

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _positions(leases: list[Lease]) -> list[int | None]:
    by_id = dict(Lease.objects.filter(pk__in=[lease.pk for lease in leases]).values_list("pk", "queue_position"))
    return [by_id[lease.pk] for lease in leases]


def test_positions_behind_the_head_are_refreshed_once_the_interval_has_passed(fleet, leases, monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(apply, "_clock", clock)
    monkeypatch.setattr(apply, "EXPLAIN_HEAD", 1)
    pool = fleet(hosts=1)
    [holder] = leases(pool, 1, gpus=8)
    run_pass([pool.pk])
    queue = leases(pool, 4, gpus=8)
    run_pass([pool.pk])  # new leases: every first explanation is written, wherever in the queue
    assert _positions(queue) == [1, 2, 3, 4]
    assert all(r.startswith("waiting for 8 GPUs") for r in Lease.objects.filter(pk__in=[q.pk for q in queue])
               .values_list("reason", flat=True))

    lease_release(lease=holder, actor="ann")
    clock.now += 10
    assert run_pass([pool.pk])[0].granted == [str(queue[0].pk)]
    assert _positions(queue[1:]) == [1, 2, 3]  # the tail was due: written

    lease_release(lease=Lease.objects.get(pk=queue[0].pk), actor="ann")
    late = leases(pool, 1, gpus=8)
    clock.now += 0.5  # within the interval
    assert run_pass([pool.pk])[0].granted == [str(queue[1].pk)]
    # The new head is written, and the newcomer's first explanation; the tail keeps its old place.
    assert _positions(queue[2:] + late) == [1, 3, 3]

    clock.now += apply.EXPLAIN_TAIL_INTERVAL_S
    assert run_pass([pool.pk])[0].granted == []
    assert _positions(queue[2:] + late) == [1, 2, 3]


def test_an_explanation_that_did_not_change_is_not_rewritten(fleet, leases, monkeypatch) -> None:
    pool = fleet(hosts=1)
    leases(pool, 1, gpus=8)
    leases(pool, 3, gpus=8, team="b")
    run_pass([pool.pk])
    written = []
    real = apply.bulk_update_columns

    def spy(*a: Any, **kw: Any) -> Any:
        written.append(a[1])
        return real(*a, **kw)

    monkeypatch.setattr(apply, "bulk_update_columns", spy)
    monkeypatch.setattr(apply, "_tail_written", {})  # the tail is due, and still nothing to write
    run_pass([pool.pk])
    assert written == []


def test_a_tail_position_that_moved_by_less_than_the_slack_is_not_rewritten(fleet, leases, monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(apply, "_clock", clock)
    monkeypatch.setattr(apply, "EXPLAIN_HEAD", 1)
    monkeypatch.setattr(apply, "TAIL_SLACK", 0.5)  # a position may lag by half of itself
    pool = fleet(hosts=1)
    [holder] = leases(pool, 1, gpus=8)
    run_pass([pool.pk])
    queue = leases(pool, 5, gpus=8)
    run_pass([pool.pk])
    assert _positions(queue) == [1, 2, 3, 4, 5]

    lease_release(lease=holder, actor="ann")
    clock.now += 10
    run_pass([pool.pk])
    # 3 -> 2 and 4 -> 3 moved by less than half their place: left; 2 -> 1 is the head; 5 -> 4 moved 1
    # where half of 5 is 2.5: left.
    assert _positions(queue[1:]) == [1, 3, 4, 5]

    lease_release(lease=Lease.objects.get(pk=queue[0].pk), actor="ann")
    clock.now += 10
    run_pass([pool.pk])
    # Now 3 -> 1 (the head), 4 -> 2 (moved 2 of 4: written), 5 -> 3 (moved 2 of 5 < 2.5: left).
    assert _positions(queue[2:]) == [1, 2, 5]


def _starts(leases: list[Lease]) -> list[bool]:
    """Whether each lease has an estimated start."""
    by_id = dict(Lease.objects.filter(pk__in=[lease.pk for lease in leases]).values_list("pk", "estimated_start"))
    return [by_id[lease.pk] is not None for lease in leases]


def test_starts_behind_twice_the_head_are_estimated_only_when_the_tail_is_written(fleet, leases, monkeypatch) -> None:
    """A pass that does not write the tail sweeps the head for estimates, not the whole queue
    (apply.estimate_head): a newcomer far back gets its place at once and its estimate with the tail."""
    clock = Clock()
    monkeypatch.setattr(apply, "_clock", clock)
    monkeypatch.setattr(apply, "EXPLAIN_HEAD", 1)  # estimates for the first 2 while the tail is not due
    pool = fleet(hosts=1)
    leases(pool, 1, gpus=8)
    run_pass([pool.pk])
    queue = leases(pool, 3, gpus=8)
    run_pass([pool.pk])  # first explanations, all estimated: no tail was ever written
    assert _starts(queue) == [True, True, True]
    clock.now += 0.5
    run_pass([pool.pk])  # the tail (positions 2 and 3) is compared: not due again for an interval

    clock.now += 0.5
    late = leases(pool, 1, gpus=8)
    run_pass([pool.pk])
    assert _positions(late) == [4]
    assert _starts(queue[:2] + late) == [True, True, False]

    clock.now += apply.EXPLAIN_TAIL_INTERVAL_S
    run_pass([pool.pk])
    assert _starts(late) == [True]


def test_a_tail_interval_that_ends_during_a_pass_leaves_the_tail_as_it_was(fleet, leases, monkeypatch) -> None:
    """Whether the tail is written is decided once, before the read: a pass that estimated the head
    only never writes the tail, whose estimates it did not work out, even if the interval ends
    while it runs."""
    import allocation.engine

    clock = Clock()
    monkeypatch.setattr(apply, "_clock", clock)
    monkeypatch.setattr(apply, "EXPLAIN_HEAD", 1)
    pool = fleet(hosts=1)
    leases(pool, 1, gpus=8)
    run_pass([pool.pk])
    queue = leases(pool, 4, gpus=8)
    run_pass([pool.pk])
    clock.now += 0.5
    run_pass([pool.pk])  # the tail compared: not due for an interval
    assert _starts(queue) == [True, True, True, True]

    real = allocation.engine.read_pool

    def slow_read(*a: Any, **kw: Any) -> Any:
        read = real(*a, **kw)
        clock.now += apply.EXPLAIN_TAIL_INTERVAL_S  # the interval ends while the pass runs
        return read

    monkeypatch.setattr(allocation.engine, "read_pool", slow_read)
    clock.now += 0.5
    run_pass([pool.pk])
    assert _starts(queue) == [True, True, True, True]
