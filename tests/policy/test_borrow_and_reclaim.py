"""Borrowing idle capacity, and reclaiming it when its owner asks for its guaranteed share."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from allocation.policy.fair import schedule
from allocation.policy.types import RunningView
from tests.policy.factories import fleet, grants, pendings, quotas, req, run, snap, victims

GPUS = fleet(2)  # 16 GPUs on two hosts
QUOTA = quotas(("a", 8, None), ("b", 8, None))


def _a_holds_everything(**kw: Any) -> list[RunningView]:
    """Team a holding all 16 GPUs as 1-GPU leases: the first 8 in quota, the rest borrowed."""
    return [run(f"a{i}", "a", [g.id], granted_at=100.0 + i, borrowed=i >= 8, **kw)
            for i, g in enumerate(GPUS)]


def test_a_team_may_borrow_all_idle_capacity_beyond_its_guarantee() -> None:
    pending = [req(f"a{i}", "a", 1, created_at=i, same_host=False) for i in range(16)]
    d = schedule(snap(GPUS, pending, quota=QUOTA))
    got = grants(d)
    assert len(got) == 16
    assert sum(g.borrowed for g in got.values()) == 8
    assert not any(got[f"a{i}"].borrowed for i in range(8))


def test_the_owner_asking_for_its_guarantee_reclaims_borrowed_leases() -> None:
    running = _a_holds_everything()
    d = schedule(snap(GPUS, [req("b1", "b", 8, same_host=False)], running, quota=QUOTA))
    assert victims(d) == {f"a{i}" for i in range(8, 16)}
    assert all(p.kind == "reclaim" and p.by_lease_id == "b1" for p in d.preemptions)
    assert "being freed by preemption" in pendings(d)["b1"].reason
    assert not d.grants


def test_reclaim_never_takes_a_team_below_its_own_guarantee() -> None:
    running = _a_holds_everything()
    d = schedule(snap(GPUS, [req("b1", "b", 8, same_host=False), req("b2", "b", 4, same_host=False)],
                      running, quota=quotas(("a", 8, None), ("b", 16, None))))
    assert len(victims(d)) == 8  # b is owed 16 but a keeps its own 8
    assert victims(d) <= {f"a{i}" for i in range(16)}
    assert "b2" in pendings(d)


def test_a_single_lease_that_would_take_its_team_below_guarantee_is_not_reclaimed() -> None:
    running = [run("big", "a", [g.id for g in GPUS], borrowed=True)]
    d = schedule(snap(GPUS, [req("b1", "b", 8, same_host=False)], running, quota=QUOTA))
    assert not d.preemptions
    assert "b1" in pendings(d)


def test_reclaim_ignores_priority_and_the_preemptible_flag() -> None:
    running = _a_holds_everything(priority=100, preemptible=False)
    d = schedule(snap(GPUS, [req("b1", "b", 4, same_host=False)], running, quota=QUOTA))
    assert len(victims(d)) == 4


def test_reclaim_honours_min_runtime() -> None:
    running = _a_holds_everything(min_runtime_s=1_000_000)
    d = schedule(snap(GPUS, [req("b1", "b", 4, same_host=False)], running, quota=QUOTA))
    assert not d.preemptions


def test_the_next_pass_waits_for_the_ending_leases_instead_of_preempting_more() -> None:
    running = [replace(r, ending=True) if r.borrowed else r for r in _a_holds_everything()]
    d = schedule(snap(GPUS, [req("b1", "b", 8, same_host=False)], running, quota=QUOTA))
    assert not d.preemptions
    assert pendings(d)["b1"].reason == "waiting for 8 GPUs being freed by ending leases"


def test_once_the_borrowed_gpus_are_free_the_owner_gets_them_not_the_borrower() -> None:
    running = [r for r in _a_holds_everything() if not r.borrowed]
    pending = [req("a-more", "a", 8, same_host=False, created_at=0),
               req("b1", "b", 8, same_host=False, created_at=5)]
    d = schedule(snap(GPUS, pending, running, quota=QUOTA))
    assert set(grants(d)) == {"b1"}
    assert not grants(d)["b1"].borrowed


def test_preempted_leases_are_the_borrowed_ones_most_recently_granted_first() -> None:
    running = _a_holds_everything()
    d = schedule(snap(GPUS, [req("b1", "b", 2, same_host=False)], running, quota=QUOTA))
    assert victims(d) == {"a15", "a14"}


@pytest.mark.parametrize(("victim_gpus", "waits_for"), [((1, 5, 6), 1), ((5, 6, 1), 2)])
def test_two_hosts_the_same_victim_completes_tie_on_the_victims_gpu_order(
        victim_gpus: tuple[int, ...], waits_for: int) -> None:
    # node-0 has 3 free + 1 of v, node-1 has 2 free + 2 of v: either host fits c1 by stopping v.
    # The tie goes to the host of v's first GPU, whatever the process's string hashing.
    gpus = fleet([4, 4])
    d = schedule(snap(gpus, [req("c1", "c", 4)], [run("v", "b", victim_gpus)],
                      quota=quotas(("c", 8, None))))
    assert victims(d) == {"v"}
    assert pendings(d)["c1"].reason == (
        f"waiting for {waits_for} GPU{'s' if waits_for > 1 else ''} being freed by preemption of v")
