"""The FIFO baseline: priority then arrival, limits only, no preemption, same placement."""

from __future__ import annotations

from allocation.policy import get_policy
from allocation.policy.fifo import schedule
from tests.policy.factories import fleet, grants, held_by_team, ids, quotas, req, run, snap

GPUS = fleet(2)


def test_fifo_serves_priority_then_arrival_ignoring_weights_and_guarantees() -> None:
    pending = [req(f"a{i}", "a", 1, created_at=i) for i in range(16)] + \
        [req(f"b{i}", "b", 1, created_at=100 + i) for i in range(16)] + \
        [req("urgent", "b", 1, created_at=500, priority=10)]
    d = schedule(snap(GPUS, pending, teams={"a": 1, "b": 10}, quota=quotas(("b", 8, None))))
    assert held_by_team(d, pending) == {"a": 15, "b": 1}
    assert "urgent" in grants(d)


def test_fifo_never_preempts() -> None:
    running = [run("be", "b", ids(GPUS), preemptible=True, priority=-10, borrowed=True)]
    d = schedule(snap(GPUS, [req("hi", "a", 8, priority=100)], running,
                      quota=quotas(("a", 16, None))))
    assert not d.preemptions and not d.grants


def test_fifo_respects_limits() -> None:
    pending = [req(f"a{i}", "a", 1, created_at=i) for i in range(16)]
    d = schedule(snap(GPUS, pending, quota=quotas(("a", 0, 5))))
    assert len(d.grants) == 5


def test_fifo_skips_what_does_not_fit_and_uses_best_fit() -> None:
    running = [run("r", "z", ids(GPUS, "node-0")[:6]), run("q", "z", ids(GPUS, "node-1")[:2])]
    pending = [req("big", "a", 8, created_at=0), req("two", "a", 2, created_at=1),
               req("six", "a", 6, created_at=2)]
    d = schedule(snap(GPUS, pending, running))
    assert set(grants(d)) == {"two", "six"}
    assert grants(d)["two"].host == "node-0" and grants(d)["six"].host == "node-1"


def test_policies_are_found_by_name() -> None:
    assert get_policy("fifo") is schedule
    assert get_policy("fair").__module__ == "allocation.policy.fair"
