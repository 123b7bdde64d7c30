"""The production policy: quotas with borrowing, fair share, priorities, reclaim and priority
preemption, best-fit gang placement, backfill, and a reason for everything left pending.

Order of a pass, per pool (pools are independent: quotas and capacity are per pool):
1. Each team's requests queue by priority, then age, then lease id.
2. Teams take turns by the key of their next request:
   (tier, -priority, fair share, created_at, lease_id), where tier 0 = the request keeps its
   team within its guarantee, 1 = it borrows. Guaranteed work goes first (Kueue admits
   within-nominal workloads before borrowing ones), then higher priority, then the team with the
   lowest share (`fairshare.team_share`, recomputed after each of its grants: water-filling).
3. Each request in turn: refused at once if nothing could ever satisfy it; kept pending at its
   team's limit; placed best-fit if it fits (and does not delay a backfill head ahead of it);
   else, if GPUs being freed by ending leases or a preemption can make it fit, that starts and
   the request waits (holding the free part of its placement, so nobody behind takes it);
   else it becomes a backfill head with an estimated start.

Shapes (constraints, size, same_host, team where it matters) that did not fit are remembered for
the rest of the pass: free capacity only shrinks within a pass, so they would not fit again.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence

from allocation.policy import backfill, explain, preemption
from allocation.policy.fairshare import team_share
from allocation.policy.placement import Exclusions, Group, Placement, constraint_of
from allocation.policy.state import (
    LeaseState,
    PassState,
    PoolState,
    build_pass,
    definitive,
    queue_order,
)
from allocation.policy.types import Decisions, Grant, Pending, RequestView, Snapshot


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide one pass. Every pending request ends up in exactly one of `grants` or `pending`;
    `preemptions` name running leases to stop (their requesters stay pending until a later pass
    finds the GPUs free). Deterministic for a given snapshot."""
    by_pool: dict[str, list[RequestView]] = defaultdict(list)
    for req in snapshot.pending:
        by_pool[req.pool].append(req)
    state = build_pass(snapshot, set(by_pool))
    decisions = Decisions()
    for pool_name in sorted(by_pool):
        _PoolPass(state, pool_name, decisions).run(by_pool[pool_name])
    return decisions


class _PoolPass:
    def __init__(self, state: PassState, pool_name: str, decisions: Decisions) -> None:
        self.state = state
        self.snapshot = state.snapshot
        self.now = state.snapshot.now
        self.name = pool_name
        self.pool: PoolState | None = state.pool(pool_name)
        self.quota = state.quota
        self.decisions = decisions
        self.position = 0
        self.reservations: list[backfill.Reservation] = []
        # Smallest size known not to fit, per shape, for the rest of the pass.
        self.no_fit: dict[tuple, int] = {}
        self.no_plan: dict[tuple, int] = {}

    # --- ordering ---------------------------------------------------------------------------------

    def _share(self, team: str) -> float:
        view = self.snapshot.teams.get(team)
        weight = view.weight if view is not None else 1.0
        usage = view.decayed_usage if view is not None else 0.0
        return team_share(usage, self.quota.committed(team, self.name), weight,
                          self.snapshot.half_life_s)

    def _tier(self, req: RequestView) -> int:
        return 0 if self.quota.within_guarantee(req.team, self.name, req.gpus) else 1

    def run(self, requests: Sequence[RequestView]) -> None:
        queues: dict[str, list[RequestView]] = defaultdict(list)
        for req in requests:
            queues[req.team].append(req)
        heap = []
        for queue in queues.values():
            queue.sort(key=queue_order, reverse=True)  # pop() from the end is the head
            heap.append(self._key(queue[-1]))
        heapq.heapify(heap)
        while heap:
            *_, team = heapq.heappop(heap)
            queue = queues[team]
            self._consider(queue.pop())
            if queue:
                heapq.heappush(heap, self._key(queue[-1]))

    def _key(self, req: RequestView) -> tuple:
        return (self._tier(req), -req.priority, self._share(req.team), req.created_at,
                req.lease_id, req.team)

    # --- one request ----------------------------------------------------------------------------

    def _pending(self, req: RequestView, reason: str, *, start: float | None = None,
                 unsatisfiable: bool = False) -> None:
        self.position += 1
        self.decisions.pending.append(Pending(req.lease_id, reason, self.position, start,
                                              unsatisfiable))

    def _consider(self, req: RequestView) -> None:
        pool = self.pool
        if req.gpus <= 0:
            self._pending(req, "asks for no GPUs", unsatisfiable=True)
            return
        groups = pool.index.groups_for(req) if pool is not None else ()
        if pool is None or not groups:
            self._pending(req, explain.no_match(req, pool.index if pool else None),
                          unsatisfiable=definitive(pool))
            return
        bound = (lambda g: g.capacity_block) if req.same_host else (lambda g: g.capacity_total)
        if req.gpus > max(bound(g) for g in groups):
            self._pending(req, explain.too_big(req, groups), unsatisfiable=definitive(pool))
            return
        limit = self.quota.limit(req.team, self.name)
        if limit is not None and req.gpus > limit:
            self._pending(req, explain.over_limit(req, limit), unsatisfiable=True)
            return
        if not self.quota.fits_limit(req.team, self.name, req.gpus):
            key = (req.team, self.name)
            held = self.quota.held[key] + self.quota.promised[key]
            self._pending(req, explain.at_limit(req, limit or 0, held))
            return
        order = (self._tier(req), -req.priority)
        exclude, head = backfill.constraints(self.reservations, req, groups, order, self.now)
        placement = self._find(req, groups, exclude)
        if placement is not None:
            self._grant(req, placement)
            return
        if head is not None:
            if self._find(req, groups, None) is not None:
                reason = explain.behind(req, self.position, head.lease_id, head.gpus)
            else:
                reason = explain.no_room(req, pool.index, groups)
            self._pending(req, reason)
            return
        if self._try_plan(req, groups, order):
            return
        reservation = backfill.reserve(pool, req, groups, order, self.now)
        self.reservations.append(reservation)
        self._pending(req, explain.no_room(req, pool.index, groups), start=reservation.start)

    def _shape(self, req: RequestView, extra: object = None) -> tuple:
        team = req.team if self.pool is not None and self.pool.index.has_shared else ""
        return (constraint_of(req), req.same_host, team, extra)

    def _find(self, req: RequestView, groups: Sequence[Group],
              exclude: Exclusions | None) -> Placement | None:
        ekey = None if exclude is None else tuple(sorted(
            (k, None if v is None else tuple(sorted(v))) for k, v in exclude.items()))
        shape = self._shape(req, ekey)
        if req.gpus >= self.no_fit.get(shape, 1 << 30):
            return None
        assert self.pool is not None
        placement = self.pool.index.find(groups, req.gpus, req.same_host, exclude)
        if placement is None:
            self.no_fit[shape] = min(req.gpus, self.no_fit.get(shape, 1 << 30))
        return placement

    def _grant(self, req: RequestView, placement: Placement) -> None:
        assert self.pool is not None
        index = self.pool.index
        gpu_ids = index.take(placement)
        borrowed = self.quota.grant(req.team, self.name, req.gpus)
        blocks: dict[tuple[str, int], int] = {}
        for host, kid, count in placement.blocks:
            blocks[(host, kid)] = blocks.get((host, kid), 0) + count
            if index.kinds[kid].time_sliced:
                index.restrict_to_team(host, kid, req.team)
        end = None if req.expected_duration_s is None else self.now + req.expected_duration_s
        # Known to backfill (it will free its GPUs at `end`), never a victim in this pass.
        fresh = LeaseState(req.lease_id, req.team, self.name, req.gpus, req.priority,
                           granted_at=self.now, borrowed=borrowed, expected_end=end, blocks=blocks)
        for host in {h for h, _ in blocks}:
            self.pool.by_host[host].append(fresh)
        self.decisions.grants.append(Grant(req.lease_id, tuple(sorted(gpu_ids)), placement.host,
                                           borrowed))

    def _try_plan(self, req: RequestView, groups: Sequence[Group], order: tuple[int, int]) -> bool:
        """Wait for ending leases, reclaim borrowed capacity, or preempt lower priority."""
        assert self.pool is not None
        reclaim = order[0] == 0
        if not preemption.possible(self.pool, self.quota, req, reclaim):
            return False
        shape = self._shape(req, (req.team, req.priority, reclaim))
        if req.gpus >= self.no_plan.get(shape, 1 << 30):
            return False
        chosen = preemption.plan(self.pool, self.quota, req, groups, self.now, reclaim)
        if chosen is None:
            self.no_plan[shape] = min(req.gpus, self.no_plan.get(shape, 1 << 30))
            return False
        stops, _, reason = preemption.commit(self.pool, self.quota, req, chosen, reclaim)
        self.decisions.preemptions.extend(stops)
        self._pending(req, reason)
        return True
