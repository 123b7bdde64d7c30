"""Time-sliced GPUs: the replicas of one physical GPU carry leases of one team at a time.

Replicas share a physical GPU without memory or fault isolation, and no fair scheduler splits
its time between them, so a team must never share one with another team unless its pool says
`share_across_teams`. The unit of sharing is `(host, GpuView.physical)`: one physical GPU
(SSH hosts, where we pick the device and set CUDA_VISIBLE_DEVICES), or, where `physical` is
empty, the host's whole set of time-sliced GPUs (Kubernetes: the device plugin picks the
device for a pod, so any replica of the node may land on any of its GPUs).

During a pass, the first team to hold or be granted a replica of a unit claims it: the unit's
free replicas are re-keyed to a kind reserved for that team (`Kind.shared_team`), so the free
index, the gates and the reasons treat them like any other GPUs another team may not use.
Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from allocation.policy.matching import PoolLayout
from allocation.policy.placement import FreeIndex
from allocation.policy.types import PoolView

_DEFAULT = PoolView("")


def one_team_per_gpu(layout: PoolLayout, pools: Mapping[str, PoolView]) -> bool:
    """Whether the pool's time-sliced replicas serve one team per unit: it has some, and does
    not share them across teams (a pool absent from `pools` has the defaults)."""
    return bool(layout.units) and not pools.get(layout.name, _DEFAULT).share_across_teams


class ReplicaClaims:
    """Which team uses each sharing unit of one pool in one pass (first come, first served:
    running leases in snapshot order, then grants in pass order)."""

    __slots__ = ("_index", "_layout", "teams")

    def __init__(self, index: FreeIndex, layout: PoolLayout) -> None:
        self._index = index
        self._layout = layout
        self.teams: dict[tuple[str, str], str] = {}  # unit -> the team using it

    def claim(self, gpu_ids: Iterable[int], team: str) -> None:
        """`team` uses these GPUs: the units of those that are time-sliced replicas, not yet
        claimed in this pass, keep their free replicas for `team` from now on. Units already
        claimed stay with their first team (two teams only meet on one when the pool shared
        across teams before: the earlier lease wins, the other runs on)."""
        units = self._layout.units
        for gid in gpu_ids:
            unit = units.get(gid)
            if unit is not None and unit not in self.teams:
                self.teams[unit] = team
                self._reserve(unit, team)

    def _reserve(self, unit: tuple[str, str], team: str) -> None:
        index = self._index
        for (host, kid), ids in self._layout.replicas.get(unit, {}).items():
            kind = index.kinds[kid]
            if kind.shared_team is None:  # a snapshot may name the team itself
                index.move(host, kid, ids, index.kind_id(replace(kind, shared_team=team)))


def claims_for(index: FreeIndex, pools: Mapping[str, PoolView],
               running: Iterable[tuple[Iterable[int], str]]) -> ReplicaClaims | None:
    """The pool's claims at the start of a pass, from its running leases' (GPU ids, team);
    None when its replicas are not restricted (none, or shared across teams), so a pass over
    a pool without time-sliced GPUs pays nothing more."""
    layout = index.layout
    if not one_team_per_gpu(layout, pools):
        return None
    claims = ReplicaClaims(index, layout)
    for gpu_ids, team in running:
        claims.claim(gpu_ids, team)
    return claims
