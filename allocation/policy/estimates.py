"""Estimated starts for the whole queue of a pool, not only its backfill heads.

Backfill (backfill.py) works out where and when each blocked head starts, host by host. Every
other pending request is estimated here, after the pass, by a sweep over time in queue order: the
pool's GPUs of the request's kinds that are free now (or being freed by ending leases), plus those
each running lease gives back at its expected end (its TTL expiry), less what the requests ahead
of it take when they start, for their expected run (their TTL). A request starts, in the
estimate, once enough are free and every request ahead of it of the same kinds has started (first
come, first served: a request behind is never estimated to start before one ahead).

What it leaves out, so an estimate is a lower bound more than a promise: hosts (a same-host
request is counted against the pool's GPUs of its kinds, not one host's), requests of other but
overlapping kinds (each set of kinds is swept on its own), gates (a team at its limit waits for
its own leases too), preemption, and leases that end before their TTL. A request that the GPUs of
its kinds can never hold, or that waits behind leases of unknown end, has none (None).

Cost: one sort of the running leases' ends per set of kinds, then O(log n) per request.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from allocation.policy.state import PoolState, RunningLease
from allocation.policy.types import Pending, RequestView


class Sweep:
    """The GPUs of one set of kinds over time, handed out in queue order."""

    def __init__(self, pool: PoolState, kinds: frozenset[int], now: float) -> None:
        index = pool.index
        self.capacity = sum(len(ids) for kid in kinds for ids in index.capacity.get(kid, {}).values())
        self.free = sum(index.free_total.get(kid, 0) for kid in kinds)
        self.free += sum(n for (_, kid), n in pool.ending_free.items() if kid in kinds and n > 0)
        self.time = now
        # (time, GPUs) the running leases give back; a lease of unknown end gives nothing back.
        self.returns: list[tuple[float, int]] = sorted(
            (lease.expected_end, held) for lease in _running(pool)
            if lease.expected_end is not None and not lease.ending and lease.lease_id not in pool.stopped
            and (held := sum(n for (_, kid), n in lease.blocks.items() if kid in kinds)))
        self.next_return = 0
        self.started: list[tuple[float, int]] = []  # (expected end, GPUs) of requests estimated
        self.stuck = False  # waiting on GPUs that never come back: every later request too

    def start(self, req: RequestView) -> float | None:
        """When `req` starts (epoch seconds), after those already swept; None when unknown."""
        if self.stuck or req.gpus > self.capacity:
            return None
        while self.free < req.gpus:
            if not self._advance():
                self.stuck = True
                return None
        self.free -= req.gpus
        if req.expected_duration_s is not None:
            heapq.heappush(self.started, (self.time + req.expected_duration_s, req.gpus))
        return self.time

    def _advance(self) -> bool:
        """Move to the next time GPUs come back (a running lease's end or an estimated one's);
        False when none ever do."""
        returning = self.returns[self.next_return] if self.next_return < len(self.returns) else (math.inf, 0)
        ending = self.started[0] if self.started else (math.inf, 0)
        if math.isinf(returning[0]) and math.isinf(ending[0]):
            return False
        if returning[0] <= ending[0]:
            self.next_return += 1
            when, count = returning
        else:
            when, count = heapq.heappop(self.started)
        self.time, self.free = max(self.time, when), self.free + count
        return True


def fill(pool: PoolState, pending: list[Pending], first: int, requests: Mapping[str, RequestView],
         now: float, *, head: int | None = None) -> None:
    """Give `pending[first:]` (one pool's entries, in queue order) an estimated start where they
    have none; with `head`, only the first `head` of them (a start depends on the entries before
    it alone, so theirs are the same as in a full sweep). Entries that have one (backfill heads)
    keep it and still take their GPUs in the sweep, so those behind them start after them;
    unsatisfiable ones are skipped."""
    sweeps: dict[frozenset[int], Sweep] = {}
    # Per groups tuple (cached per constraint by the index, so its identity is a key): tens of
    # thousands of pending requests share a handful.
    kinds_of: dict[int, frozenset[int]] = {}
    for i in range(first, len(pending) if head is None else min(len(pending), first + head)):
        item = pending[i]
        req = requests.get(item.lease_id)
        if req is None or item.unsatisfiable:
            continue
        groups = pool.index.groups_for(req)
        kinds = kinds_of.get(id(groups))
        if kinds is None:
            kinds = kinds_of[id(groups)] = frozenset(kid for group in groups for kid in group.kinds)
        if not kinds:
            continue
        sweep = sweeps.get(kinds)
        if sweep is None:
            sweep = sweeps[kinds] = Sweep(pool, kinds, now)
        start = sweep.start(req)
        if item.estimated_start is None and start is not None:
            # The constructor, not dataclasses.replace (several times slower, 40,000 times a pass).
            pending[i] = Pending(item.lease_id, item.code, item.reason, item.queue_position, start,
                                 item.unsatisfiable)


def _running(pool: PoolState) -> list[RunningLease]:
    """Each running lease of the pool once (a lease on several hosts is listed under each)."""
    seen: dict[int, RunningLease] = {}
    for leases in pool.by_host.values():
        for lease in leases:
            seen.setdefault(id(lease), lease)
    return list(seen.values())
