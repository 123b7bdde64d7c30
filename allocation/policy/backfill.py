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
from allocation.policy.state import PoolState
from allocation.policy.types import RequestView

Order = tuple[int, int]  # (tier, -priority): a request is behind a head when its order is >=.


@dataclass(frozen=True)
class Reservation:
    lease_id: str
    gpus: int
    order: Order
    kinds: frozenset[int]
    hosts: frozenset[str] | None  # None: all GPUs of `kinds` (a pool-wide head)
    start: float | None  # estimated start of the head; None when unknown


def _start(have: int, need: int, releases: list[tuple[float, int]], now: float) -> float:
    """Earliest time `need` GPUs are free, given `have` free now and (time, count) releases."""
    if have >= need:
        return now
    for when, count in sorted(releases):
        have += count
        if have >= need:
            return max(when, now)
    return math.inf


def _release_time(expected_end: float | None) -> float:
    return math.inf if expected_end is None else expected_end


def reserve(pool: PoolState, req: RequestView, groups: Sequence[Group], order: Order,
            now: float) -> Reservation:
    """Where and when the blocked `req` will start soonest: the reservation that protects it."""
    best: tuple[float, float, str | None, Group] | None = None
    for group in groups:
        if req.same_host:
            per_host: dict[str, int] = {}
            for kid in group.kinds:
                for host, ids in pool.index.capacity[kid].items():
                    per_host[host] = per_host.get(host, 0) + len(ids)
            for host, capacity in per_host.items():
                if capacity < req.gpus:
                    continue
                have = pool.index.free_on(host, group) + pool.ending_on(host, group)
                releases = [(_release_time(lease.expected_end), lease.on(host, group))
                            for lease in pool.by_host.get(host, ()) if not lease.ending]
                when = _start(have, req.gpus, [r for r in releases if r[1]], now)
                key = (when, -have, host, group)
                if best is None or key[:2] < best[:2]:
                    best = key
        else:
            have = pool.index.free_in(group) + pool.ending_in(group)
            releases = [(_release_time(lease.expected_end), lease.in_group(group))
                        for lease in _all_leases(pool) if not lease.ending]
            when = _start(have, req.gpus, [r for r in releases if r[1]], now)
            key = (when, -have, None, group)
            if best is None or key[:2] < best[:2]:
                best = key
    assert best is not None, "reserve() needs at least one group that can hold the request"
    when, _, host, group = best
    return Reservation(req.lease_id, req.gpus, order, frozenset(group.kinds),
                       None if host is None else frozenset({host}),
                       None if math.isinf(when) else when)


def _all_leases(pool: PoolState) -> list:
    seen: dict[int, object] = {}
    for leases in pool.by_host.values():
        for lease in leases:
            seen.setdefault(id(lease), lease)
    return list(seen.values())


def constraints(reservations: Sequence[Reservation], req: RequestView, groups: Sequence[Group],
                order: Order, now: float) -> tuple[Exclusions | None, Reservation | None]:
    """What `req` must avoid so as not to delay any head ahead of it: (exclusions, the first
    head it defers to), or (None, None) when it is free to go anywhere."""
    kinds = {kid for group in groups for kid in group.kinds}
    ahead = [r for r in reservations if order >= r.order and r.kinds & kinds]
    if not ahead:
        return None, None
    if req.expected_duration_s is not None:
        ends = now + req.expected_duration_s
        ahead = [r for r in ahead if r.start is None or ends > r.start]
        if not ahead:
            return None, None
    exclude: dict[int, frozenset[str] | None] = {}
    for reservation in ahead:
        for kid in reservation.kinds:
            if reservation.hosts is None or (kid in exclude and exclude[kid] is None):
                exclude[kid] = None
            else:
                exclude[kid] = (exclude.get(kid) or frozenset()) | reservation.hosts
    return exclude, ahead[0]
