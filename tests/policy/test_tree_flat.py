"""A flat team list decides exactly as before: the team-tree code path (tree.py, forced on a
one-level tree) gives identical Decisions to the flat one on random snapshots."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import GpuView, PoolView, Snapshot
from tests.policy.factories import H100, quotas, req, run, snap, victims
from tests.policy.test_properties import lending_snapshots, snapshots


def _same(snapshot: Snapshot) -> None:
    for policy in (fair, fifo):
        assert policy(snapshot, force_tree=True) == policy(snapshot)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.booleans())
def test_a_one_level_tree_decides_as_the_flat_policy(snapshot: Snapshot, fair_share: bool) -> None:
    if fair_share:  # fair-share preemption on in both pools
        pools = {p: PoolView(p, fair_share_preemption=True) for p in ("p", "q")}
        snapshot = replace(snapshot, pools=pools)
    _same(snapshot)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lending_snapshots())
def test_a_one_level_tree_lends_as_the_flat_policy(snapshot: Snapshot) -> None:
    _same(snapshot)



def _gpus(ids: range, pool: str, host: str, workload: str, domain: str) -> list[GpuView]:
    return [GpuView(i, pool, host, H100, 81559, "550.54", "12.4", workloads=frozenset({workload}), domain=domain,
                    tags=frozenset({f"source={domain}"}) if workload == "pod" else frozenset()) for i in ids]


def test_a_one_level_tree_takes_the_requesters_own_lower_priority_lease_first_as_the_flat_policy() -> None:
    """The example the property above found: a pod request of team a, under its guarantee, needs
    one GPU more than the free and ending ones; the flat order takes its own lower-priority
    preemptible lease (r0), the tree's reclaim ranked team b's lease first (by distance in the
    tree, 0 for the requester's own team)."""
    gpus = (*_gpus(range(1, 9), "q", "q-h0", "process", "ssh"), *_gpus(range(9, 12), "p", "p-h1", "process", "ssh"),
            *_gpus(range(12, 13), "p", "p-h2", "process", "ssh"), *_gpus(range(13, 20), "q", "q-h3", "pod", "ka"))
    lease = partial(run, pool="q", priority=-10, granted_at=99_990.0)
    running = [lease("r0", "a", [1, 2, 14, 4], preemptible=True, borrowed=True),
               lease("r1", "a", [5, 6, 7], ending=True), lease("r2", "a", [8], ending=True),
               lease("r3", "a", [11, 12], pool="p", ending=True), lease("r4", "a", [13]),
               lease("r5", "a", [3, 15, 16, 17], ending=True), lease("r6", "b", [18])]
    snapshot = snap(gpus, [req("q0", "a", 5, pool="q", workload="pod")], running, teams={"a": 0.5, "b": 0.5, "c": 0.5},
                    quota=quotas(("a", 10, None), pool="q"), now=100_000.0)
    for fair_share in (False, True):
        if fair_share:
            snapshot = replace(snapshot, pools={p: PoolView(p, fair_share_preemption=True) for p in ("p", "q")})
        assert victims(fair(snapshot)) == {"r0"}
        _same(snapshot)
