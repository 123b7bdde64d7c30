"""How both policies write down what they decide for a pool: grants (the GPUs taken from the
free index, the quota book updated) and pending entries, numbered by queue position, with the
"no room" reason that most of them share."""

from __future__ import annotations

from collections.abc import Sequence

from allocation.policy import explain
from allocation.policy.placement import Group, Placement
from allocation.policy.quota import QuotaBook
from allocation.policy.state import PoolState
from allocation.policy.types import Grant, Pending, RequestView


class PendingLog:
    """The pending entries of one pool, numbered in the order they are decided: the queue
    position the user sees (1 is next)."""

    __slots__ = ("items", "position")

    def __init__(self, items: list[Pending]) -> None:
        self.items = items  # Decisions.pending, shared by every pool of the pass
        self.position = 0  # entries of this pool so far

    def add(self, req: RequestView, reason: str, *, unsatisfiable: bool = False) -> None:
        self.position += 1
        self.items.append(Pending(req.lease_id, reason, self.position, None, unsatisfiable))


def grant(pool: PoolState, quota: QuotaBook, req: RequestView, placement: Placement) -> Grant:
    """Take the placement's GPUs for `req` and count them for its team. Time-sliced replicas
    share a physical GPU without isolation: the replicas left on those hosts go to its team
    only."""
    index = pool.index
    gpu_ids = index.take(placement)
    for host, kid, _ in placement.blocks:
        if index.kinds[kid].time_sliced:
            index.restrict_to_team(host, kid, req.team)
    borrowed = quota.grant(req.team, pool.name, req.gpus)
    return Grant(req.lease_id, tuple(sorted(gpu_ids)), placement.host, borrowed)


class NoRoomReasons:
    """`explain.no_room`, remembered per request shape and state of the free index: between two
    grants, the many requests of one shape waiting in a pool read the same reason."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[tuple[object, ...], str] = {}

    def reason(self, pool: PoolState, req: RequestView, groups: Sequence[Group]) -> str:
        # A groups tuple is cached per constraint while the index version stands (a new one
        # comes only with a change of the index): its identity is a key.
        key = (req.gpus, req.same_host, req.model, id(groups), pool.index.version)
        reason = self._reasons.get(key)
        if reason is None:
            if len(self._reasons) > 4096:
                self._reasons.clear()
            reason = self._reasons[key] = explain.no_room(req, pool.index, groups)
        return reason
