"""A team at its limit preempts its own lower-priority, preemptible leases for a higher-priority
request (Kueue's withinClusterQueue: LowerPriority): only those, the smallest set, the newest
first among equals, and never above its limit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from allocation.policy import fair, fifo
from allocation.policy.types import Decisions, RunningView, Snapshot
from tests.policy.factories import fleet, grants, ids, pendings, quotas, req, run, snap, victims

GPUS = fleet(1)  # one host of 8
LIMIT = quotas(("a", 8, 8))


def _lease(name: str, gpu_ids: Iterable[int], *, granted_at: float, best_effort: bool,
           **kw: Any) -> RunningView:
    if best_effort:
        kw.setdefault("preemptible", True)
        kw.setdefault("priority", -10)
    return run(name, "a", gpu_ids, granted_at=granted_at, **kw)


def _scenario(**be: Any) -> list[RunningView]:
    """Team a holds 4 `default` GPUs (one lease each) and 4 `best-effort` ones."""
    gpu = ids(GPUS)
    default = [_lease(f"d{i}", [gpu[i]], granted_at=float(i), best_effort=False)
               for i in range(4)]
    best_effort = [_lease(f"be{i}", [gpu[4 + i]], granted_at=float(10 + i), best_effort=True,
                          **be) for i in range(4)]
    return default + best_effort


def _high(gpus: int = 2, **kw: Any) -> list[Any]:
    return [req("hi", "a", gpus, priority=100, created_at=50.0, **kw)]


def _holds_after(s: Snapshot, d: Decisions) -> int:
    """GPUs team a holds once the preempted leases are gone and the pending request granted."""
    stopped = victims(d)
    held = sum(len(r.gpu_ids) for r in s.running if r.team == "a" and r.lease_id not in stopped)
    return held + sum(r.gpus for r in s.pending if r.team == "a")


def test_team_at_its_limit_preempts_its_own_best_effort_for_high_priority() -> None:
    s = snap(GPUS, _high(), _scenario(), quota=LIMIT)
    d = fair.schedule(s)
    assert victims(d) == {"be3", "be2"}  # the two newest best-effort leases
    assert all(p.kind == "priority" for p in d.preemptions)
    assert d.preemptions[0].reason == ("preempted for higher-priority lease hi of the same team a "
                                       "(priority 100 > -10)")
    assert pendings(d)["hi"].reason == (
        "preempting 2 leases of its own team of lower priority (be3, be2) to stay within team "
        "a's limit 8 in pool p; waiting for 2 GPUs being freed")
    assert _holds_after(s, d) <= 8


def test_next_passes_wait_for_the_victims_then_grant_within_the_limit() -> None:
    first = fair.schedule(snap(GPUS, _high(), _scenario(), quota=LIMIT))
    stopped = victims(first)
    ending = [r if r.lease_id not in stopped else RunningView(**{**r.__dict__, "ending": True})
              for r in _scenario()]
    second = fair.schedule(snap(GPUS, _high(), ending, quota=LIMIT))
    assert not second.preemptions  # the victims are ending: nothing more is stopped
    assert pendings(second)["hi"].reason == (
        "team a at its limit 8 in pool p (holds or awaits 8, asks for 2); waiting for its own "
        "ending leases to free 2 GPUs")
    gone = [r for r in _scenario() if r.lease_id not in stopped]
    third = fair.schedule(snap(GPUS, _high(), gone, quota=LIMIT))
    assert len(grants(third)["hi"].gpu_ids) == 2
    assert set(grants(third)["hi"].gpu_ids) == {ids(GPUS)[6], ids(GPUS)[7]}


def test_non_preemptible_leases_are_never_victims() -> None:
    d = fair.schedule(snap(GPUS, _high(), _scenario(preemptible=False), quota=LIMIT))
    assert not d.preemptions
    assert pendings(d)["hi"].reason.startswith("team a at its limit 8")


def test_asking_for_more_than_the_preemptible_leases_free_preempts_nothing() -> None:
    d = fair.schedule(snap(GPUS, _high(5), _scenario(), quota=LIMIT))
    assert not d.preemptions  # only 4 best-effort GPUs: 8 + 5 - 8 = 5 cannot be freed


def test_minimum_runtime_is_respected() -> None:
    d = fair.schedule(snap(GPUS, _high(), _scenario(min_runtime_s=100_000), quota=LIMIT))
    assert not d.preemptions
    young = _scenario()
    young[7] = _lease("be3", [ids(GPUS)[7]], granted_at=9_999.0, best_effort=True,
                      min_runtime_s=600)
    d = fair.schedule(snap(GPUS, _high(), young, quota=LIMIT))
    assert victims(d) == {"be2", "be1"}  # be3 is too young


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    d = fair.schedule(snap(GPUS, [req("x", "a", 2, priority=-10)], _scenario(), quota=LIMIT))
    assert not d.preemptions


def test_smallest_set_newest_first_among_equals() -> None:
    gpu = ids(GPUS)
    running = [_lease("d", gpu[:4], granted_at=0.0, best_effort=False),
               _lease("one_new", [gpu[4]], granted_at=30.0, best_effort=True),
               _lease("two_old", gpu[5:7], granted_at=10.0, best_effort=True),
               _lease("one_old", [gpu[7]], granted_at=20.0, best_effort=True)]
    d = fair.schedule(snap(GPUS, _high(), running, quota=LIMIT))
    assert victims(d) == {"two_old"}  # one lease beats two
    d = fair.schedule(snap(GPUS, _high(1), running, quota=LIMIT))
    assert victims(d) == {"one_new"}  # newest first among equals


def test_lowest_priority_goes_first() -> None:
    gpu = ids(GPUS)
    running = [_lease("d", gpu[:6], granted_at=0.0, best_effort=False),
               _lease("low", [gpu[6]], granted_at=1.0, best_effort=True, priority=-20),
               _lease("mid", [gpu[7]], granted_at=2.0, best_effort=True, priority=-10)]
    d = fair.schedule(snap(GPUS, _high(1), running, quota=LIMIT))
    assert victims(d) == {"low"}


def test_a_team_below_its_limit_on_a_full_pool_preempts_its_own() -> None:
    d = fair.schedule(snap(GPUS, _high(), _scenario(), quota=quotas(("a", 8, 16))))
    assert victims(d) == {"be3", "be2"}
    assert all("same team a" in p.reason for p in d.preemptions)


def test_limit_below_holdings_frees_enough_to_end_within_it() -> None:
    # Limit 6 while the team holds 8 (lowered after grants): a request of 1 frees 3 GPUs.
    s = snap(GPUS, _high(1), _scenario(), quota=quotas(("a", 6, 6)))
    d = fair.schedule(s)
    assert victims(d) == {"be3", "be2", "be1"}
    assert _holds_after(s, d) <= 6


def test_two_requests_of_the_team_do_not_share_victims() -> None:
    pending = [req("h1", "a", 2, priority=100, created_at=1.0),
               req("h2", "a", 2, priority=100, created_at=2.0)]
    s = snap(GPUS, pending, _scenario(), quota=LIMIT)
    d = fair.schedule(s)
    assert victims(d) == {"be0", "be1", "be2", "be3"}
    assert _holds_after(s, d) <= 8
    assert "preempting 2 leases" in pendings(d)["h2"].reason


def test_pool_wide_request_counts_victims_anywhere() -> None:
    gpus = fleet(2)
    gpu = ids(gpus)
    running = [_lease("d", gpu[:8], granted_at=0.0, best_effort=False),
               _lease("be_a", gpu[8:10], granted_at=1.0, best_effort=True),
               _lease("be_b", gpu[10:12], granted_at=2.0, best_effort=True)]
    s = snap(gpus, _high(2, same_host=False), running, quota=quotas(("a", 12, 12)))
    d = fair.schedule(s)
    assert victims(d) == {"be_b"}
    assert _holds_after(s, d) <= 12


def test_other_teams_leases_are_not_victims_of_a_team_at_its_limit() -> None:
    gpu = ids(GPUS)
    running = [_lease("d", gpu[:6], granted_at=0.0, best_effort=False),
               run("other", "b", gpu[6:8], preemptible=True, priority=-10)]
    d = fair.schedule(snap(GPUS, _high(2), running, quota=quotas(("a", 6, 6), ("b", 0, None))))
    assert not d.preemptions
    assert pendings(d)["hi"].reason.startswith("team a at its limit 6")


def test_fifo_never_preempts() -> None:
    d = fifo.schedule(snap(GPUS, _high(), _scenario(), quota=LIMIT))
    assert not d.preemptions
    assert pendings(d)["hi"].reason.startswith("team a at its limit 8")
