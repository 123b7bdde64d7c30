"""Every pending request gets an estimated start, not only the backfill head: a sweep in queue
order over the GPUs the running leases give back at their expected end and the requests ahead take
for their expected run (allocation/policy/estimates.py)."""

from __future__ import annotations

from allocation.policy.fair import schedule
from allocation.policy.types import RunningView
from tests.policy.factories import A100, fleet, ids, pendings, req, run, snap

NOW = 10_000.0
GPUS = fleet(2)  # two hosts of 8


def _full(first_end: float = NOW + 1000, second_end: float | None = NOW + 5000) -> list[RunningView]:
    """Both hosts busy: node-0 until `first_end`, node-1 until `second_end` (None: unknown)."""
    return [run("l0", "z", ids(GPUS, "node-0"), expected_end=first_end),
            run("l1", "z", ids(GPUS, "node-1"), expected_end=second_end)]


def test_requests_behind_the_head_are_estimated_in_queue_order() -> None:
    pending = [req("head", "a", 8, created_at=0, expected_duration_s=2000),
               req("second", "a", 8, created_at=1, expected_duration_s=500),
               req("third", "a", 4, created_at=2, expected_duration_s=100)]
    d = schedule(snap(GPUS, pending, _full(), now=NOW))
    waiting = pendings(d)
    assert [waiting[x].queue_position for x in ("head", "second", "third")] == [1, 2, 3]
    assert waiting["head"].estimated_start == NOW + 1000  # node-0 frees first (backfill's answer)
    # node-0 again once the head has run its 2000 s: sooner than node-1's lease ends (NOW + 5000).
    assert waiting["second"].estimated_start == NOW + 3000
    assert waiting["third"].estimated_start == NOW + 3500  # after the second's own 500 s


def test_a_request_behind_is_never_estimated_before_one_ahead() -> None:
    pending = [req(f"r{i}", "a", 1 + i % 3, created_at=i, expected_duration_s=300 + 100 * i) for i in range(20)]
    d = schedule(snap(GPUS, pending, _full(), now=NOW))
    ordered = sorted(pendings(d).values(), key=lambda p: p.queue_position)
    starts = [p.estimated_start for p in ordered]
    assert all(s is not None for s in starts)
    assert starts == sorted(starts)  # type: ignore[type-var]


def test_behind_leases_of_unknown_end_there_is_no_estimate() -> None:
    pending = [req("head", "a", 8, created_at=0, expected_duration_s=2000),
               req("second", "a", 8, created_at=1), req("third", "a", 8, created_at=2)]
    d = schedule(snap(GPUS, pending, _full(second_end=None), now=NOW))
    waiting = pendings(d)
    assert waiting["head"].estimated_start == NOW + 1000
    assert waiting["second"].estimated_start == NOW + 3000  # node-0 again, once the head ran 2000 s
    assert waiting["third"].estimated_start is None  # the head of unknown length never gives it back


def test_each_model_is_swept_on_its_own_gpus() -> None:
    gpus = GPUS + fleet(1, model=A100, prefix="a100", start_id=101)
    running = [*_full(), run("la", "z", ids(gpus, "a100-0"), expected_end=NOW + 300)]
    pending = [req("h1", "a", 8, created_at=0, model="H100", expected_duration_s=100),
               req("h2", "a", 8, created_at=1, model="H100", expected_duration_s=100),
               req("a1", "a", 8, created_at=2, model="A100", expected_duration_s=100),
               req("a2", "a", 8, created_at=3, model="A100", expected_duration_s=100)]
    d = schedule(snap(gpus, pending, running, now=NOW))
    waiting = pendings(d)
    assert waiting["h2"].estimated_start == NOW + 1100  # after h1's 100 s on node-0, before node-1 frees
    assert waiting["a1"].estimated_start == NOW + 300 and waiting["a2"].estimated_start == NOW + 400


def test_a_request_no_capacity_of_its_kinds_could_hold_has_no_estimate() -> None:
    d = schedule(snap(GPUS, [req("huge", "a", 8, created_at=0), req("x", "a", 17, same_host=False)], _full(),
                      now=NOW))
    assert pendings(d)["x"].estimated_start is None


def test_with_an_estimate_head_only_the_first_entries_are_estimated_as_in_a_full_sweep() -> None:
    """The engine asks for the head only on passes that do not write the tail (Snapshot.estimate_head):
    those estimates are the full sweep's, the rest are left empty, and the decisions are the same."""
    from dataclasses import replace

    pending = [req(f"r{i}", "a", 1 + i % 3, created_at=i, expected_duration_s=300 + 100 * i) for i in range(20)]
    full = schedule(snap(GPUS, pending, _full(), now=NOW))
    head = schedule(replace(snap(GPUS, pending, _full(), now=NOW), estimate_head=5))
    assert head.grants == full.grants
    by_position = {p.queue_position: p for p in pendings(head).values()}
    full_by_position = {p.queue_position: p for p in pendings(full).values()}
    assert [by_position[q].estimated_start for q in range(1, 6)] == \
        [full_by_position[q].estimated_start for q in range(1, 6)]
    assert all(by_position[q].estimated_start is None for q in range(6, len(by_position) + 1))
    assert all(full_by_position[q].estimated_start is not None for q in range(6, len(by_position) + 1))
