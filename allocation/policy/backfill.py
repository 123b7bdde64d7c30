"""Backfill (EASY style, one reservation per disjoint set of GPU kinds).

When a request cannot fit and no preemption can help it, it becomes a *head*: it reserves the
place where it will start soonest, and its estimated start ("shadow time") is computed from the
running leases' `expected_end`. A request behind the head (not ahead of it in the order) may
still start now only if it cannot delay the head: it uses none of the reserved GPUs (other hosts
for a same-host head, other kinds of GPU for a pool-wide head), or it is known to end
(`expected_duration_s`) before the head's estimated start. A request whose GPU kinds do not
overlap any reservation is not behind anyone and may become a head itself, so a pool of mixed
models keeps one reservation per model instead of one for the whole pool.

Without a known end for the leases in the way, the start is unknown (None): the head still
reserves the host with the most capacity free or soon free, and only requests that avoid it may
pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from allocation.policy.placement import Exclusions, Group
from allocation.policy.state import PoolState, RunningLease
from allocation.policy.types import RequestView

Order = tuple[int, int]  # (tier, -priority): a request is behind a head when its order is >=.


@dataclass(eq=False)
class Reservation:
    """A blocked head. Where and when it will start is worked out lazily (`realize`): only when
    a request behind it could start now, or when the pass reports estimated starts. Until then
    nothing that could change the answer has happened: any request that would have taken GPUs
    of its kinds realizes it first."""

    req: RequestView
    groups: tuple[Group, ...]
    order: Order
    kinds: frozenset[int]  # before realize: every eligible kind; after: the chosen group's
    pending_index: int  # where its Pending entry is, to fill in the estimated start
    hosts: frozenset[str] | None = None  # None: all GPUs of `kinds` (a pool-wide head)
    start: float | None = None  # estimated start of the head; None when unknown
    realized: bool = False
    block: bool = False  # a priority block (blocks.py), made before the pass reaches its request


def hold(req: RequestView, groups: Sequence[Group], order: Order,
         pending_index: int) -> Reservation:
    kinds = frozenset(kid for group in groups for kid in group.kinds)
    return Reservation(req, tuple(groups), order, kinds, pending_index)


def start_time(have: int, need: int, releases: list[tuple[float, int]], now: float) -> float:
    """Earliest time `need` GPUs are free, given `have` free now and (time, count) releases."""
    if have >= need:
        return now
    for when, count in sorted(releases):
        have += count
        if have >= need:
            return max(when, now)
    return math.inf


def release_time(expected_end: float | None) -> float:
    return math.inf if expected_end is None else expected_end


# Where a head could start: (estimated start, -GPUs free or being freed now, host or None for
# pool-wide, group). The smallest wins: soonest, then the most capacity at hand.
_Start = tuple[float, int, str | None, Group]


def realize(pool: PoolState, res: Reservation, now: float) -> None:
    """Pick where the head will start soonest and when; narrow the reservation to it."""
    if res.realized:
        return
    req = res.req
    best: _Start | None = None
    for group in res.groups:
        start = host_start(pool, req, group, now) if req.same_host else \
            _pool_start(pool, req, group, now)
        if start is not None and (best is None or start[:2] < best[:2]):
            best = start
    assert best is not None, "a head has at least one group that can hold it"
    when, _, host, group = best
    res.kinds = frozenset(group.kinds)
    res.hosts = None if host is None else frozenset({host})
    res.start = None if math.isinf(when) else when
    res.realized = True


def host_start(pool: PoolState, req: RequestView, group: Group, now: float) -> _Start | None:
    """The host where a same-host head could start soonest on the group's GPUs; None when no
    host is large enough."""
    per_host: dict[str, int] = {}
    for kid in group.kinds:
        for host, ids in pool.index.capacity[kid].items():
            per_host[host] = per_host.get(host, 0) + len(ids)
    best: _Start | None = None
    for host, capacity in per_host.items():
        if capacity < req.gpus:
            continue
        have = pool.index.free_on(host, group) + pool.ending_on(host, group)
        releases = [(release_time(lease.expected_end), lease.on(host, group))
                    for lease in pool.by_host.get(host, ())
                    if not lease.ending and lease.lease_id not in pool.stopped]
        when = start_time(have, req.gpus, [r for r in releases if r[1]], now)
        if best is None or (when, -have) < best[:2]:
            best = (when, -have, host, group)
    return best


def _pool_start(pool: PoolState, req: RequestView, group: Group, now: float) -> _Start:
    """When a pool-wide head could start on the group's GPUs."""
    have = pool.index.free_in(group) + pool.ending_in(group)
    seen: dict[int, RunningLease] = {}
    for leases in pool.by_host.values():
        for lease in leases:
            seen.setdefault(id(lease), lease)
    releases = [(release_time(lease.expected_end), lease.in_group(group))
                for lease in seen.values()
                if not lease.ending and lease.lease_id not in pool.stopped]
    return (start_time(have, req.gpus, [r for r in releases if r[1]], now), -have, None, group)


def heads_ahead(reservations: Sequence[Reservation], groups: Sequence[Group],
                order: Order, lease_id: str = "") -> list[Reservation]:
    """The heads a request of this order and these groups is behind (may over-approximate
    until realized), never its own (`lease_id`: a priority block is made before its request
    is reached, blocks.py). A request behind a head never becomes a head, nor preempts."""
    if not reservations:
        return []
    kinds = {kid for group in groups for kid in group.kinds}
    return [r for r in reservations if order >= r.order and r.kinds & kinds and r.req.lease_id != lease_id]


def blocks_above(reservations: Sequence[Reservation], groups: Sequence[Group], order: Order,
                 lease_id: str) -> list[Reservation]:
    """The priority blocks of a higher priority that a request of an earlier tier is not behind
    (blocks.py): it keeps off them where it fits elsewhere."""
    kinds = {kid for group in groups for kid in group.kinds}
    return [r for r in reservations if r.block and order < r.order and order[1] > r.order[1]
            and r.kinds & kinds and r.req.lease_id != lease_id]


def exclusions(pool: PoolState, ahead: Sequence[Reservation], req: RequestView,
               groups: Sequence[Group], now: float) -> Exclusions | None:
    """What `req` must avoid so as not to delay the heads ahead of it (None: nothing): their
    reserved GPUs, unless it is known to end before their estimated start."""
    kinds = {kid for group in groups for kid in group.kinds}
    exclude: dict[int, frozenset[str] | None] = {}
    ends = None if req.expected_duration_s is None else now + req.expected_duration_s
    for res in ahead:
        realize(pool, res, now)
        if not res.kinds & kinds or (ends is not None and res.start is not None
                                     and ends <= res.start):
            continue
        for kid in res.kinds:
            if res.hosts is None or (kid in exclude and exclude[kid] is None):
                exclude[kid] = None
            else:
                exclude[kid] = (exclude.get(kid) or frozenset()) | res.hosts
    return exclude or None
