"""A higher-priority request preempts preemptible, lower-priority leases, and only those."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from allocation.policy.fair import schedule
from allocation.policy.types import RunningView
from tests.policy.factories import fleet, grants, ids, pendings, quotas, req, run, snap, victims

GPUS = fleet(2)


def _best_effort(i: int, gpu_ids: Iterable[int], **kw: Any) -> RunningView:
    kw.setdefault("preemptible", True)
    kw.setdefault("priority", -10)
    return run(f"be{i}", "b", gpu_ids, granted_at=float(i), **kw)


def _full(**kw: Any) -> list[RunningView]:
    """Team b's best-effort leases of 4 GPUs filling the fleet."""
    return [_best_effort(i, [g.id for g in GPUS[4 * i:4 * i + 4]], **kw) for i in range(4)]


def test_high_priority_preempts_preemptible_best_effort() -> None:
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], _full()))
    assert victims(d) == {"be3"}  # one lease frees 4 on one host; the most recent one
    assert d.preemptions[0].kind == "priority"
    assert "preemption of be3" in pendings(d)["hi"].reason


def test_non_preemptible_leases_are_never_preempted_for_priority() -> None:
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], _full(preemptible=False)))
    assert not d.preemptions


def test_leases_younger_than_min_runtime_are_spared() -> None:
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], _full(min_runtime_s=100_000)))
    assert not d.preemptions


def test_equal_priority_does_not_preempt() -> None:
    d = schedule(snap(GPUS, [req("x", "a", 4, priority=-10)], _full()))
    assert not d.preemptions


def test_an_ending_lease_is_never_preempted_again_and_its_gpus_are_awaited() -> None:
    running = _full()
    running[3] = _best_effort(3, list(ids(GPUS)[12:16]), ending=True)
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], running))
    assert not d.preemptions
    assert pendings(d)["hi"].reason == "waiting for 4 GPUs being freed by ending leases"


def test_same_host_requests_preempt_victims_on_one_host_only() -> None:
    # Two GPUs held on each host by 1-GPU leases; host 0 also 6 by a non-preemptible lease.
    running = [run("keep", "c", ids(GPUS)[0:6]),
               _best_effort(1, [7]), _best_effort(2, [8]),
               _best_effort(3, [9]), _best_effort(4, [10])]
    d = schedule(snap(GPUS, [req("hi", "a", 8, priority=100)], running))
    # Host 1 has 4 free + 4 held by be3/be4-like leases: victims there, none on host 0.
    assert victims(d) and all(v.startswith("be") for v in victims(d))
    chosen = {g for r in running if r.lease_id in victims(d) for g in r.gpu_ids}
    assert chosen <= set(ids(GPUS, "node-1"))


def test_the_smallest_victim_set_wins() -> None:
    running = [_best_effort(1, list(ids(GPUS)[0:1])), _best_effort(2, list(ids(GPUS)[1:8])),
               run("keep", "c", ids(GPUS, "node-1"))]
    d = schedule(snap(GPUS, [req("hi", "a", 7, priority=100)], running))
    assert victims(d) == {"be2"}


def test_borrowed_leases_are_preempted_before_in_quota_ones() -> None:
    running = [_best_effort(1, ids(GPUS, "node-0"), borrowed=False),
               _best_effort(0, ids(GPUS, "node-1"), borrowed=True)]
    d = schedule(snap(GPUS, [req("hi", "a", 8, priority=100)], running,
                      quota=quotas(("b", 8, None))))
    assert victims(d) == {"be0"}


def test_priority_never_eats_into_another_teams_guarantee() -> None:
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], _full(),
                      quota=quotas(("b", 16, None))))
    assert not d.preemptions


def test_a_team_may_preempt_its_own_lower_priority_work_within_its_guarantee() -> None:
    running = [run(f"mine{i}", "a", [g.id], preemptible=True, priority=-10)
               for i, g in enumerate(GPUS)]
    d = schedule(snap(GPUS, [req("hi", "a", 2, priority=100, same_host=False)], running,
                      quota=quotas(("a", 16, None))))
    assert len(victims(d)) == 2


def test_the_requester_is_granted_once_the_victims_are_gone() -> None:
    running = _full()[:3]
    d = schedule(snap(GPUS, [req("hi", "a", 4, priority=100)], running))
    assert "hi" in grants(d)
    assert not d.preemptions
