"""The production policy: quotas with borrowing, fair share, priorities, reclaim and priority
preemption, best-fit gang placement, backfill, and a reason for everything left pending.

Order of a pass, per pool (pools are independent: quotas and capacity are per pool):
1. Each team's requests queue by priority, then age, then lease id.
2. Two phases: first the requests that keep their team within its guarantee (Kueue admits
   within-nominal workloads before borrowing ones), then the borrowing ones. In each phase teams
   take turns by the key of their next request: (-priority, fair share, created_at, lease_id),
   the share (`fairshare.team_share`) recomputed after each grant (water-filling). A team's own
   order holds within each phase; its request that would borrow waits for the second phase.
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
from dataclasses import replace

from allocation.policy import backfill, explain, preemption
from allocation.policy.fairshare import team_share
from allocation.policy.placement import Exclusions, Group, Placement, capacity_bound
from allocation.policy.state import (
    PassState,
    PoolState,
    RunningLease,
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
        pool_pass = _PoolPass(state, pool_name, decisions)
        pool_pass.run(by_pool[pool_name])
        pool_pass.finish()
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
        self.shares: dict[str, float] = {}  # per team; dropped when its allocation changes
        self.reasons: dict[tuple, str] = {}  # "no room" reasons for one state of the index

    # --- ordering ---------------------------------------------------------------------------------

    def _share(self, team: str) -> float:
        share = self.shares.get(team)
        if share is None:
            view = self.snapshot.teams.get(team)
            weight = view.weight if view is not None else 1.0
            usage = view.decayed_usage if view is not None else 0.0
            share = self.shares[team] = team_share(usage, self.quota.committed(team, self.name),
                                                   weight, self.snapshot.half_life_s)
        return share

    def _tier(self, req: RequestView) -> int:
        return 0 if self.quota.within_guarantee(req.team, self.name, req.gpus) else 1

    def run(self, requests: Sequence[RequestView]) -> None:
        queues: dict[str, list[RequestView]] = defaultdict(list)
        for req in requests:
            queues[req.team].append(req)
        for queue in queues.values():
            queue.sort(key=queue_order, reverse=True)  # pop() from the end is the head
        deferred: dict[str, list[RequestView]] = defaultdict(list)
        self._drain(queues, deferred)  # tier 0: requests within their team's guarantee
        for queue in deferred.values():
            queue.reverse()
        self._drain(deferred, None)  # tier 1: borrowing requests, by priority and fair share

    def _drain(self, queues: dict[str, list[RequestView]],
               deferred: dict[str, list[RequestView]] | None) -> None:
        """Serve the queues, team by team in fair-share order. In the guaranteed phase
        (`deferred` given), a request that would borrow is set aside for the borrowing phase;
        a team's own order (priority, age) holds within each phase."""
        tier = 0 if deferred is not None else 1
        heap = [self._key(queue[-1]) for queue in queues.values() if queue]
        heapq.heapify(heap)
        while heap:
            *_, team = heapq.heappop(heap)
            queue = queues[team]
            req = queue.pop()
            if deferred is not None and self._tier(req) == 1:
                deferred[team].append(req)
            else:
                self._consider(req, tier)
            if queue:
                heapq.heappush(heap, self._key(queue[-1]))

    def _key(self, req: RequestView) -> tuple:
        return (-req.priority, self._share(req.team), req.created_at, req.lease_id, req.team)

    # --- one request ----------------------------------------------------------------------------

    def _pending(self, req: RequestView, reason: str, *, start: float | None = None,
                 unsatisfiable: bool = False) -> None:
        self.position += 1
        self.decisions.pending.append(Pending(req.lease_id, reason, self.position, start,
                                              unsatisfiable))

    def _consider(self, req: RequestView, tier: int) -> None:
        pool = self.pool
        if req.gpus <= 0:
            self._pending(req, "asks for no GPUs", unsatisfiable=True)
            return
        groups = pool.index.groups_for(req) if pool is not None else ()
        if pool is None or not groups:
            self._pending(req, explain.no_match(req, pool.index if pool else None),
                          unsatisfiable=definitive(pool))
            return
        if req.gpus > capacity_bound(groups, req.same_host):
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
        order = (tier, -req.priority)
        ahead = backfill.heads_ahead(self.reservations, groups, order)
        placement = self._find(req, groups, None)
        if placement is not None and ahead:
            exclude = backfill.exclusions(pool, ahead, req, groups, self.now)
            if exclude is not None:
                placement = self._find(req, groups, exclude)
                if placement is None:
                    head = next(r.req for r in ahead if r.kinds & set(exclude))
                    self._pending(req, explain.behind(req, self.position, head.lease_id,
                                                      head.gpus))
                    return
        if placement is not None:
            self._grant(req, placement)
            return
        if ahead and self._plan_possible(req, groups, order):
            # Until realized, a head claims every kind it could use: narrow it down before
            # deciding that this request is behind it and may not preempt.
            for res in ahead:
                backfill.realize(pool, res, self.now)
            ahead = backfill.heads_ahead(ahead, groups, order)
        if ahead or self._try_plan(req, groups, order):
            if ahead:
                self._pending(req, self._no_room(req, groups))
            return
        self.reservations.append(backfill.hold(req, groups, order, len(self.decisions.pending)))
        self._pending(req, self._no_room(req, groups))

    def finish(self) -> None:
        """Fill in the heads' estimated starts (when the snapshot asks for them)."""
        if not self.snapshot.estimate_starts or self.pool is None:
            return
        for res in self.reservations:
            backfill.realize(self.pool, res, self.now)
            item = self.decisions.pending[res.pending_index]
            self.decisions.pending[res.pending_index] = replace(item, estimated_start=res.start)

    def _no_room(self, req: RequestView, groups: Sequence[Group]) -> str:
        assert self.pool is not None
        # Group tuples are cached per constraint for the whole pass: their identity is a key.
        key = (req.gpus, req.same_host, req.model, id(groups), self.pool.index.version)
        reason = self.reasons.get(key)
        if reason is None:
            if len(self.reasons) > 4096:
                self.reasons.clear()
            reason = self.reasons[key] = explain.no_room(req, self.pool.index, groups)
        return reason

    def _shape(self, req: RequestView, groups: Sequence[Group], extra: object = None) -> tuple:
        """What decides whether a request fits: its eligible groups (cached per constraints and,
        where kinds depend on the team, per team, so their identity stands for both) and
        same_host."""
        return (id(groups), req.same_host, extra)

    def _find(self, req: RequestView, groups: Sequence[Group],
              exclude: Exclusions | None) -> Placement | None:
        ekey = None if exclude is None else tuple(sorted(
            (k, None if v is None else tuple(sorted(v))) for k, v in exclude.items()))
        shape = self._shape(req, groups, ekey)
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
        self.shares.pop(req.team, None)
        blocks: dict[tuple[str, int], int] = {}
        for host, kid, count in placement.blocks:
            blocks[(host, kid)] = blocks.get((host, kid), 0) + count
            if index.kinds[kid].time_sliced:
                index.restrict_to_team(host, kid, req.team)
        end = None if req.expected_duration_s is None else self.now + req.expected_duration_s
        # Known to backfill (it will free its GPUs at `end`), never a victim in this pass.
        fresh = RunningLease(req.lease_id, req.team, self.name, req.gpus, req.priority,
                           granted_at=self.now, borrowed=borrowed, expected_end=end, blocks=blocks)
        self.pool.add_fresh(fresh)
        self.decisions.grants.append(Grant(req.lease_id, tuple(sorted(gpu_ids)), placement.host,
                                           borrowed))

    def _plan_possible(self, req: RequestView, groups: Sequence[Group],
                       order: tuple[int, int]) -> bool:
        assert self.pool is not None
        reclaim = order[0] == 0
        shape = self._shape(req, groups, (req.team, req.priority, reclaim))
        return req.gpus < self.no_plan.get(shape, 1 << 30) and preemption.possible(
            self.pool, self.quota, req, groups, reclaim)

    def _try_plan(self, req: RequestView, groups: Sequence[Group], order: tuple[int, int]) -> bool:
        """Wait for ending leases, reclaim borrowed capacity, or preempt lower priority."""
        assert self.pool is not None
        reclaim = order[0] == 0
        if not self._plan_possible(req, groups, order):
            return False
        shape = self._shape(req, groups, (req.team, req.priority, reclaim))
        chosen = preemption.plan(self.pool, self.quota, req, groups, self.now, reclaim)
        if chosen is None:
            self.no_plan[shape] = min(req.gpus, self.no_plan.get(shape, 1 << 30))
            return False
        stops, _, reason = preemption.commit(self.pool, self.quota, req, chosen, reclaim)
        self.shares.clear()  # the requester's and the victims' allocations changed
        self.decisions.preemptions.extend(stops)
        self._pending(req, reason)
        return True
