"""What did not fit during a pass, remembered (`FitMemo`): the free index (placement.py) only
shrinks within a pass, so a shape that did not fit once is answered "no" at once for the rest
of it, without searching the index again. topo_place.py's `TopologyFits` extends it."""

from __future__ import annotations

from collections.abc import Sequence

from allocation.policy.placement import Exclusions, FreeIndex, Group, Placement
from allocation.policy.types import RequestView

_NEVER = 1 << 30  # larger than any request


class FitMemo:
    """The smallest size known not to fit, per shape, for the rest of a pass: the free index
    only shrinks within a pass, so what did not fit once never fits later in it. A shape starts
    with the identity of the request's eligible groups (a cached tuple: it stands for the
    constraints and, where kinds depend on the team, the team) and same_host; callers add what
    else decides the answer."""

    __slots__ = ("_keep", "_smallest")

    def __init__(self) -> None:
        self._smallest: dict[tuple[object, ...], int] = {}
        # The groups whose identity is in a key, kept alive so that no other tuple takes it.
        self._keep: dict[int, Sequence[Group]] = {}

    def hopeless(self, shape: tuple[object, ...], gpus: int) -> bool:
        return gpus >= self._smallest.get(shape, _NEVER)

    def failed(self, shape: tuple[object, ...], groups: Sequence[Group], gpus: int) -> None:
        self._keep[id(groups)] = groups
        if gpus < self._smallest.get(shape, _NEVER):
            self._smallest[shape] = gpus

    def find(self, index: FreeIndex, req: RequestView, groups: Sequence[Group],
             exclude: Exclusions | None = None) -> Placement | None:
        """`index.find` for the request, None at once for a shape known not to fit."""
        shape = (id(groups), req.same_host, None if exclude is None else exclusion_key(exclude))
        if self.hopeless(shape, req.gpus):
            return None
        placement = index.find(groups, req.gpus, req.same_host, exclude)
        if placement is None:
            self.failed(shape, groups, req.gpus)
        return placement


def exclusion_key(exclude: Exclusions) -> tuple[tuple[int, tuple[str, ...] | None], ...]:
    """The exclusions as part of a shape's key (hashable, in a fixed order)."""
    return tuple(sorted((kid, None if hosts is None else tuple(sorted(hosts)))
                        for kid, hosts in exclude.items()))
