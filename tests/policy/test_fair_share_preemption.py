"""Fair-share preemption above guarantees: a team below its fair share takes borrowed GPUs back
from a team above it, by Kueue's two strategies, and shares converge without ping-pong."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy import fifo
from allocation.policy.fair import schedule
from allocation.policy.types import PoolView, RequestView, RunningView, Snapshot
from tests.policy.factories import fleet, grants, pendings, quotas, req, run, snap, victims

GPUS = fleet(2)  # 16 GPUs on two hosts
NOW = 10_000.0
ON = {"p": PoolView("p", fair_share_preemption=True)}


def _holds_all(team: str = "a", **kw: Any) -> list[RunningView]:
    """`team` holding all 16 GPUs as 1-GPU leases, the newest last."""
    return [run(f"{team}{i}", team, [g.id], granted_at=100.0 + i, borrowed=True, **kw)
            for i, g in enumerate(GPUS)]


def _asks(team: str, count: int, gpus: int = 1, **kw: Any) -> list[RequestView]:
    return [req(f"{team}-req{i}", team, gpus, created_at=1000.0 + i, same_host=False, **kw)
            for i in range(count)]


def test_it_is_off_unless_the_pool_turns_it_on() -> None:
    d = schedule(snap(GPUS, _asks("b", 4), _holds_all(), now=NOW))
    assert not d.preemptions
    assert set(pendings(d)) == {f"b-req{i}" for i in range(4)}


def test_a_team_below_its_share_preempts_borrowed_leases_of_the_team_above() -> None:
    d = schedule(snap(GPUS, _asks("b", 1, gpus=4), _holds_all(), now=NOW, pools=ON))
    assert len(victims(d)) == 4
    assert {p.kind for p in d.preemptions} == {"fair_share"}
    # The newest leases of the team above go first.
    assert victims(d) == {"a15", "a14", "a13", "a12"}
    reason = d.preemptions[0].reason
    assert reason == ("preempted for fair share in pool p: team b's share would be 4 with lease b-req0, "
                      "at most team a's 12 (GPUs held and recent use per unit of weight; team a was at 16, "
                      "now 12)")
    assert "being freed by fair-share preemption of" in pendings(d)["b-req0"].reason


class _Run:
    """What `_replay` saw: GPUs held per team at the end, leases preempted per team, the
    (requester team, victim team) pairs of fair-share preemptions, and whether it settled."""

    def __init__(self) -> None:
        self.held: Counter[str] = Counter()
        self.preempted: Counter[str] = Counter()
        self.directions: set[tuple[str, str]] = set()
        self.settled = False


def _replay(running: list[RunningView], pending: list[RequestView], *, weights: dict[str, float],
            quota: Any = None, passes: int = 12, **kw: Any) -> tuple[Counter[str], Counter[str]]:
    seen = _run(running, pending, weights=weights, quota=quota, passes=passes, **kw)
    assert seen.settled
    return seen.held, seen.preempted


def _run(running: list[RunningView], pending: list[RequestView], *, weights: dict[str, float],
         quota: Any = None, passes: int = 12, gpus: Any = GPUS, **kw: Any) -> _Run:
    """Run passes as the engine would (preempted leases leave at once and re-queue, grants
    join the running leases) until nothing changes."""
    seen = _Run()
    now = NOW
    for _ in range(passes):
        d = schedule(snap(gpus, pending, running, teams=weights, quota=quota, now=now, pools=ON, **kw))
        if not d.grants and not d.preemptions:
            seen.settled = True
            break
        team_of = {r.lease_id: r.team for r in running} | {r.lease_id: r.team for r in pending}
        seen.directions |= {(team_of[p.by_lease_id], team_of[p.lease_id])
                            for p in d.preemptions if p.kind == "fair_share"}
        stopped = victims(d)
        for lease in running:
            if lease.lease_id in stopped:
                seen.preempted[lease.team] += 1
                pending.append(req(lease.lease_id, lease.team, len(lease.gpu_ids), created_at=lease.granted_at,
                                   same_host=False))
        given = grants(d)
        running = [r for r in running if r.lease_id not in stopped] + [
            run(r.lease_id, r.team, given[r.lease_id].gpu_ids, granted_at=now, borrowed=given[r.lease_id].borrowed)
            for r in pending if r.lease_id in given]
        pending = [r for r in pending if r.lease_id not in given]
        now += 1000.0
    for lease in running:
        seen.held[lease.team] += len(lease.gpu_ids)
    return seen


def test_equal_weights_converge_to_equal_shares_and_stay_there() -> None:
    held, preempted = _replay(_holds_all(), _asks("b", 16), weights={"a": 1, "b": 1})
    assert held == {"a": 8, "b": 8}
    assert preempted == {"a": 8}  # b never loses a lease back to a: no ping-pong


def test_weights_three_to_one_converge_to_twelve_and_four() -> None:
    held, preempted = _replay(_holds_all("b"), _asks("a", 16), weights={"a": 3, "b": 1})
    assert held == {"a": 12, "b": 4}
    assert preempted == {"b": 12}


def test_a_guarantee_is_never_taken() -> None:
    quota = quotas(("a", 10, None), ("b", 0, None))
    held, _ = _replay(_holds_all(), _asks("b", 16), weights={"a": 1, "b": 1}, quota=quota)
    assert held == {"a": 10, "b": 6}  # equal shares would be 8:8, but a keeps its 10


def test_recent_use_counts_as_in_the_order_of_teams() -> None:
    # b used 4 GPUs on average lately (the ledger in GPU-seconds over the mean life): its share
    # is 4 higher than its holdings, so the shares meet at a 10, b 6.
    usage = {"b": 4 * 168 * 3600 / 0.6931471805599453}
    held, _ = _replay(_holds_all(), _asks("b", 16), weights={"a": 1, "b": 1}, usage=usage)
    assert held == {"a": 10, "b": 6}


def test_higher_priority_leases_are_never_preempted_for_fair_share() -> None:
    running = _holds_all(priority=100)
    d = schedule(snap(GPUS, _asks("b", 4), running, now=NOW, pools=ON))
    assert not d.preemptions


def test_non_preemptible_borrowed_leases_of_equal_priority_are_victims() -> None:
    d = schedule(snap(GPUS, _asks("b", 2), _holds_all(preemptible=False), now=NOW, pools=ON))
    assert victims(d) == {"a15", "a14"}


def test_minimum_runtime_and_ending_leases_are_respected() -> None:
    running = _holds_all(min_runtime_s=NOW)  # none has run long enough
    assert not schedule(snap(GPUS, _asks("b", 2), running, now=NOW, pools=ON)).preemptions
    running = [run(f"a{i}", "a", [g.id], granted_at=100.0 + i, ending=i >= 14) for i, g in enumerate(GPUS)]
    d = schedule(snap(GPUS, _asks("b", 4), running, now=NOW, pools=ON))
    # Two GPUs are already being freed: only two more leases are stopped, never an ending one.
    assert victims(d) == {"a13", "a12"}


def _with_last(last: float, interval: float) -> dict[str, PoolView]:
    return {"p": PoolView("p", fair_share_preemption=True, fair_share_preemption_interval_s=interval,
                          last_fair_share_preemption=last)}


def test_the_minimum_interval_between_fair_share_preemptions_is_kept() -> None:
    too_soon = snap(GPUS, _asks("b", 2), _holds_all(), now=NOW, pools=_with_last(NOW - 30, 60))
    assert not schedule(too_soon).preemptions
    later = snap(GPUS, _asks("b", 2), _holds_all(), now=NOW, pools=_with_last(NOW - 60, 60))
    assert len(schedule(later).preemptions) == 2


def test_a_same_host_request_takes_its_victims_on_one_host() -> None:
    d = schedule(snap(GPUS, [req("b1", "b", 8, same_host=True)], _holds_all(), now=NOW, pools=ON))
    hosts = {GPUS[int(v[1:])].host for v in victims(d)}
    assert len(victims(d)) == 8 and len(hosts) == 1


def test_requests_within_the_guarantee_still_reclaim() -> None:
    quota = quotas(("a", 0, None), ("b", 4, None))
    d = schedule(snap(GPUS, _asks("b", 4), _holds_all(), quota=quota, now=NOW, pools=ON))
    assert {p.kind for p in d.preemptions} == {"reclaim"}


def test_fifo_never_preempts_for_fair_share() -> None:
    assert not fifo.schedule(snap(GPUS, _asks("b", 4), _holds_all(), now=NOW, pools=ON)).preemptions


def _shares_after(d_snapshot: Snapshot, stops: Sequence[str]) -> Counter[str]:
    held: Counter[str] = Counter()
    for lease in d_snapshot.running:
        if lease.lease_id not in stops:
            held[lease.team] += len(lease.gpu_ids)
    return held


def test_several_requests_in_one_pass_stop_at_equal_shares() -> None:
    s = snap(GPUS, _asks("b", 16), _holds_all(), now=NOW, pools=ON)
    d = schedule(s)
    assert len(victims(d)) == 8
    assert _shares_after(s, list(victims(d))) == {"a": 8}


TEAM = st.tuples(st.integers(1, 3), st.integers(0, 6), st.integers(0, 16), st.integers(0, 12))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TEAM, min_size=2, max_size=3))
def test_shares_settle_and_no_two_teams_take_from_each_other(specs: list[tuple[int, int, int, int]]) -> None:
    """Teams of random weight and guarantee, holding part of a full pool, all with 1-GPU work
    waiting: fair-share preemption settles within a few passes, and never both ways."""
    names = [f"t{i}" for i in range(len(specs))]
    running: list[RunningView] = []
    gpu_ids = iter(g.id for g in GPUS)
    rows = []
    room = len(GPUS)
    for name, (_, guaranteed, holds, _) in zip(names, specs, strict=True):
        rows.append((name, min(guaranteed, room), None))
        room -= rows[-1][1]
        for i in range(holds):
            gid = next(gpu_ids, None)
            if gid is not None:
                running.append(run(f"{name}-run{i}", name, [gid], granted_at=100.0 + len(running)))
    pending = [req(f"{name}-req{i}", name, 1, created_at=1000.0 + i, same_host=False)
               for name, (_, _, _, waiting) in zip(names, specs, strict=True) for i in range(waiting)]
    seen = _run(running, pending, weights={n: float(s[0]) for n, s in zip(names, specs, strict=True)},
                quota=quotas(*rows), passes=40)
    assert seen.settled
    assert not any((b, a) in seen.directions for a, b in seen.directions)


def test_the_second_strategy_takes_a_lease_too_large_for_the_first() -> None:
    gpus = fleet([8, 10])
    running = [run("a-big", "a", [g.id for g in gpus[:8]], granted_at=100.0),
               run("a-small", "a", [g.id for g in gpus[8:12]], granted_at=200.0),
               run("b-own", "b", [g.id for g in gpus[12:]], granted_at=150.0)]
    d = schedule(snap(gpus, [req("b1", "b", 3, same_host=False)], running, now=NOW, pools=ON))
    # Once granted b's share (9) would exceed a's after losing a-small (8): the first strategy
    # refuses; the second allows it (9 < 12, and b's 6 now stays below a's 8), never a-big.
    assert victims(d) == {"a-small"}
    assert "would be 9 with lease b1, below team a's 12" in d.preemptions[0].reason
    held, _ = _replay(running, [req("b1", "b", 3, same_host=False)], weights={"a": 1, "b": 1}, gpus=gpus)
    assert held == {"a": 8, "b": 9}
