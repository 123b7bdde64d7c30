"""Priority blocks: Slurm's backfill reservation for a waiting large request, across phases.

A backfill head (backfill.py) is made only when the pass reaches the request, and holds only
against requests behind it in the order (tier, -priority). A large request that would borrow is
reached in the borrowing phase, after every request of the guaranteed phase: while small
requests within their teams' guarantees churn (its own team's among them: its team's smaller
requests do not borrow, so they go first), each GPU freed is taken again before it is reached,
and it waits for a moment when nothing else asks.

So, before the phases, the pass picks the highest-priority request that does not fit now (the
oldest among equals; it must pass the admission gates) and, when some pending request has a
lower priority, reserves a *block* for it: the host(s) where it will start soonest, the hosts
with the most GPUs free or being freed first (a same-host request: its one host, as backfill
picks it). Requests behind it in the usual order (its tier or later, and not of a higher
priority) may not take GPUs of the block unless they are known to end before its estimated
start (`expected_duration_s`), as behind any backfill head. A request of lower priority in an
earlier tier (within its team's guarantee, which comes first: tests/policy/test_properties.py)
is not behind it, but is placed off the block whenever it fits elsewhere. Freed GPUs of the
block stay free, so the block grows until the request fits, and the next pass picks the same
hosts (they have the most free). The block goes once its request is granted or a preemption
plan makes room for it; if the request stays blocked, the block is its backfill head.

Cost: one partial pass over the pending requests (those above the lowest priority; a bounded
heap of `CANDIDATES`), one fit test per candidate, and one pass over the pool's hosts to pick
the block.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from allocation.policy.backfill import Order, Reservation, host_start, release_time, start_time
from allocation.policy.fit_memo import FitMemo
from allocation.policy.placement import Group
from allocation.policy.state import PoolState
from allocation.policy.types import RequestView

#: Off: no blocks (the simulator's benchmark compares both in one run).
ENABLED = True
#: Candidates tried, highest priority first; past them no block this pass.
CANDIDATES = 8


def reserve(pool: PoolState, requests: Iterable[RequestView], fits: FitMemo,
            admitted: Callable[[RequestView], tuple[Group, ...] | None],
            order_of: Callable[[RequestView], Order], now: float) -> Reservation | None:
    """The block for the highest-priority request that does not fit now, if one has a lower
    priority behind it; None otherwise. `admitted`: its groups when it passes the gates (no
    side effect), `order_of`: its (tier, -priority)."""
    if not ENABLED:
        return None
    requests = list(requests)
    if not requests:
        return None
    lowest = min(r.priority for r in requests)
    above = (r for r in requests if r.priority > lowest)
    for req in heapq.nsmallest(CANDIDATES, above, key=lambda r: (-r.priority, r.created_at, r.lease_id)):
        groups = admitted(req)
        if not groups or fits.find(pool.index, req, groups) is not None:
            continue
        res = Reservation(req, tuple(groups), order_of(req), frozenset(), -1, block=True)
        realize_block(pool, res, now)
        return res
    return None


def realize_block(pool: PoolState, res: Reservation, now: float) -> None:
    """Where the block is: the group and host(s) where the request starts soonest."""
    req = res.req
    best: tuple[float, int, frozenset[str], Group] | None = None
    for group in res.groups:
        if req.same_host:
            found = host_start(pool, req, group, now)
            option = None if found is None or found[2] is None else \
                (found[0], found[1], frozenset({found[2]}), group)
        else:
            option = _hosts_start(pool, req, group, now)
        if option is not None and (best is None or option[:2] < best[:2]):
            best = option
    assert best is not None, "a request that passed the gates fits some group"
    when, _, hosts, group = best
    res.kinds = frozenset(group.kinds)
    res.hosts = hosts
    res.start = None if when == float("inf") else when
    res.realized = True


def _hosts_start(pool: PoolState, req: RequestView, group: Group,
                 now: float) -> tuple[float, int, frozenset[str], Group] | None:
    """The fewest hosts that can hold a pool-wide request, those with the most GPUs free or being
    freed first: (estimated start, -GPUs at hand, hosts, group). None: the group is too small."""
    per_host: dict[str, int] = {}
    for kid in group.kinds:
        for host, ids in pool.index.capacity[kid].items():
            per_host[host] = per_host.get(host, 0) + len(ids)
    ranked = sorted(((pool.index.free_on(host, group) + pool.ending_on(host, group), capacity, host)
                     for host, capacity in per_host.items()), key=lambda x: (-x[0], -x[1], x[2]))
    chosen: list[str] = []
    have = room = 0
    for at_hand, capacity, host in ranked:
        chosen.append(host)
        have += at_hand
        room += capacity
        if room >= req.gpus:
            break
    if room < req.gpus:
        return None
    releases = [(release_time(lease.expected_end), lease.on(host, group))
                for host in chosen for lease in pool.by_host.get(host, ())
                if not lease.ending and lease.lease_id not in pool.stopped]
    return (start_time(have, req.gpus, [r for r in releases if r[1]], now), -have, frozenset(chosen), group)


def settle(reservations: list[Reservation], blocks: dict[str, Reservation], lease_id: str) -> None:
    """The request of a block was decided (granted, or waiting for a plan): its block goes,
    unless it became its backfill head (`pending_index` set)."""
    res = blocks.get(lease_id)
    if res is not None and res.pending_index < 0:
        del blocks[lease_id]
        reservations.remove(res)

