"""A flat team list decides exactly as before: the team-tree code path (tree.py, forced on a
one-level tree) gives identical Decisions to the flat one on random snapshots."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import PoolView, Snapshot
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
