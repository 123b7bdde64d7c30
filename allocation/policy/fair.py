"""The production policy: quotas with borrowing, fair share, priorities, reclaim and priority
preemption, best-fit gang placement, backfill, and a reason for everything left pending.

Order of a pass, per pool (pools are independent: quotas and capacity are per pool):
1. Each team's requests queue by priority, then age, then lease id.
2. Two phases: first the requests that keep their team within its guarantee (Kueue admits
   within-nominal workloads before borrowing ones), then the borrowing ones. In each phase teams
   take turns by the key of their next request: (-priority, fair share, created_at, lease_id),
   the share (`fairshare.team_share`) recomputed after each grant (water-filling; the turns are
   fair_order.py's). A team's own order holds within each phase; its request that would borrow
   waits for the second phase.
3. Each request in turn: refused at once if nothing could ever satisfy it; at its team's limit,
   kept pending unless preempting the team's own lower-priority preemptible leases makes room
   under the limit (then they are stopped and it waits for their GPUs); placed best-fit if it
   fits (and does not delay a backfill head ahead of it); else, if GPUs being freed by ending
   leases or a preemption can make it fit, that starts and the request waits (holding the free
   part of its placement, so nobody behind takes it); else it becomes a backfill head with an
   estimated start.

Shapes (constraints, size, same_host, team where it matters) that did not fit are remembered for
the rest of the pass: free capacity only shrinks within a pass, so they would not fit again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from allocation.policy import (
    backfill,
    blocks,
    estimates,
    explain,
    preemption,
    preemption_fair,
    preemption_team,
    reservations,
)
from allocation.policy.codes import PendingCode
from allocation.policy.fair_order import TeamOrder
from allocation.policy.fit_memo import FitMemo
from allocation.policy.gates import Refusal, admit
from allocation.policy.placement import Group, Placement
from allocation.policy.poolpass import PoolPass
from allocation.policy.state import PassState, RunningLease, build_pass, pending_by_pool, queue_order
from allocation.policy.types import Decisions, RequestView, Snapshot

Order = backfill.Order  # (tier, -priority)


def schedule(snapshot: Snapshot, *, force_tree: bool = False) -> Decisions:
    """Decide one pass. Every pending request ends up in exactly one of `grants` or `pending`;
    `preemptions` name running leases to stop (their requesters stay pending until a later pass
    finds the GPUs free). Deterministic for a given snapshot. `force_tree`: take the team-tree
    code path on a flat snapshot too (tests: it must decide the same)."""
    by_pool = pending_by_pool(snapshot)
    state = build_pass(snapshot, set(by_pool), force_tree=force_tree)
    decisions = Decisions()
    for pool_name in sorted(by_pool):
        pool_pass = _FairPass(state, pool_name, decisions)
        pool_pass.run(by_pool[pool_name])
        pool_pass.finish()
    return decisions


class _FairPass(PoolPass):
    def __init__(self, state: PassState, name: str, decisions: Decisions) -> None:
        super().__init__(state, name, decisions)
        self.snapshot = state.snapshot
        self.now = state.snapshot.now
        self.first = len(decisions.pending)  # where this pool's pending entries begin
        self.requests: dict[str, RequestView] = {}
        self.reservations: list[backfill.Reservation] = []
        self.blocks: dict[str, backfill.Reservation] = {}  # priority blocks (blocks.py), by lease id
        self.plans = FitMemo()  # shapes no preemption plan could make fit
        # preemption.possible per plan shape and size, until the next grant or preemption: the
        # many requests of one shape behind a head ask it again and again (50 % of a pass over
        # 40,000 pending requests, bench/bench_scale.py engine).
        self.possible: dict[tuple[object, ...], bool] = {}
        self.order = TeamOrder(self.snapshot, self.quota, name)  # fair-share turns of the teams
        self.tree = state.quota.tree
        # Phases: 0 within guarantees; flat, 1 borrowing; with a tree, 1 .. top-1 borrowing
        # within a department's guarantee (the most local first), top beyond every guarantee.
        self.top = 1 if self.tree is None else self.tree.top
        self.tier = 0  # the phase being drained
        # Within-team plans that failed, per (team, priority, shape, constraints): the (GPUs to
        # free for the limit, GPUs asked) pairs. Free GPUs and victims only shrink in a pass, so
        # a plan needing as much or more fails too.
        self.own_failed: dict[tuple[object, ...], list[tuple[int, int]]] = defaultdict(list)
        # Borrowing requests may preempt for fair share (the pool's setting and interval).
        self.fair_share = preemption_fair.enabled(self.snapshot.pools.get(name), self.now)

    # --- ordering ---------------------------------------------------------------------------------

    def _tier(self, req: RequestView) -> int:
        return self.quota.tier(req.team, self.name, req.gpus)

    def run(self, requests: Sequence[RequestView]) -> None:
        queues: dict[str, list[RequestView]] = defaultdict(list)
        for req in requests:
            queues[req.team].append(req)
            self.requests[req.lease_id] = req
        for queue in queues.values():
            queue.sort(key=queue_order, reverse=True)  # pop() from the end is the head
        self._block(requests)
        if self.holds is not None:
            self._reserved_first(queues)
        # Tier 0: requests within their team's guarantee; then borrowing ones, by priority and
        # fair share (with a tree: within a department's guarantee first, the most local first).
        for tier in range(self.top + 1):
            deferred: dict[str, list[RequestView]] | None = (
                defaultdict(list) if tier < self.top else None)
            self._drain(queues, deferred, tier)
            if deferred is None:
                break
            for queue in deferred.values():
                queue.reverse()
            queues = deferred

    def _drain(self, queues: dict[str, list[RequestView]],
               deferred: dict[str, list[RequestView]] | None, tier: int) -> None:
        """Serve the queues, team by team in fair-share order (fair_order.py). In a phase before
        the last (`deferred` given), a request that would borrow beyond this phase is set aside
        for a later one; a team's own order (priority, age) holds within each phase."""
        self.tier = tier
        for req in self.order.turns(queues):
            if deferred is not None and self._tier(req) > tier:
                deferred[req.team].append(req)
            else:
                groups = self.admitted(req)
                if groups is not None:
                    self._place(req, groups, (tier, -req.priority))
                if self.blocks:
                    blocks.settle(self.reservations, self.blocks, req.lease_id)

    def _block(self, requests: Sequence[RequestView]) -> None:
        """A priority block for the highest-priority request that cannot start now (blocks.py)."""
        res = blocks.reserve(self.pool, requests, self.fits, self._passes_gates,
                             lambda r: (self._tier(r), -r.priority), self.now)
        if res is not None:
            self.blocks[res.req.lease_id] = res
            self.reservations.append(res)

    def _passes_gates(self, req: RequestView) -> tuple[Group, ...] | None:
        groups = self.pool.index.groups_for(req)
        return groups if admit(req, groups, self.gates) is None else None

    def _reserved_first(self, queues: dict[str, list[RequestView]]) -> None:
        """During a reservation's window, its team's requests (in the team's order) are served
        first from the GPUs it holds: granted there when they fit, or left to the phases."""
        assert self.holds is not None
        for hold in self.holds.serving():
            queue = queues.get(hold.view.team)
            if not queue:
                continue
            kept: list[RequestView] = []
            for req in reversed(queue):  # the head first
                if hold.held <= 0 or req.gpus > hold.held or not self._reserved_grant(req, hold):
                    kept.append(req)
            queue[:] = kept[::-1]

    def _reserved_grant(self, req: RequestView, hold: reservations.Hold) -> bool:
        """Grant `req` on `hold`'s kinds if it passes the gates and fits there. True when it
        was decided (granted, or pending with a gate's reason)."""
        if not any(kid in hold.kinds for group in self.pool.index.groups_for(req)
                   for kid in group.kinds):
            return False
        groups = self.admitted(req)
        if groups is None:
            return True
        assert self.holds is not None
        placement = self.fits.find(self.pool.index, req, groups, self.holds.only(hold, groups))
        if placement is None:
            return False
        self._grant(req, placement)
        return True

    # --- a team at its limit ---------------------------------------------------------------------

    def refused(self, req: RequestView, groups: tuple[Group, ...], refusal: Refusal) -> None:
        if refusal.code != PendingCode.AT_LIMIT or not self._preempt_own_team(req, groups):
            super().refused(req, groups, self._own_ending(req, refusal))

    def _own_ending(self, req: RequestView, refusal: Refusal) -> Refusal:
        """At its limit only until its own ending leases (preempted for it in an earlier pass,
        say) are gone: say so, or a user reads a limit that looks final."""
        if refusal.code != PendingCode.AT_LIMIT:
            return refusal
        limit = self.gates.limits.get(req.team)
        leaving = self.quota.leaving[(req.team, self.name)]
        if limit is None or leaving <= 0 or self.quota.committed(req.team, self.name) + req.gpus > limit:
            return refusal
        return replace(refusal, message=explain.at_limit_until_ending(refusal.message, leaving))

    def _preempt_own_team(self, req: RequestView, groups: tuple[Group, ...]) -> bool:
        """A request of a team at its limit may preempt its own team's preemptible leases of
        lower priority: enough of them that the team, once they are gone and the request is
        granted, is within its limit, and that the request fits. False (the gate's reason
        stands) when its own ending leases already make room under the limit, a backfill head
        ahead waits for these GPUs, or no such set exists."""
        limit = self.gates.limits.get(req.team)
        if limit is None:  # at a department's limit (tree): its other teams' leases are not its own
            return False
        need = self.quota.committed(req.team, self.name) + req.gpus - limit
        if need <= 0 or backfill.heads_ahead(self.reservations, groups, (self.tier, -req.priority), req.lease_id):
            return False
        shape = (req.team, req.priority, req.same_host, req.model, req.min_memory_mb,
                 req.min_driver_version, req.min_cuda_version)
        failed = self.own_failed[shape]
        if any(need >= n and req.gpus >= g for n, g in failed):
            return False
        chosen = preemption_team.plan_within_team(self.pool, req, groups, self.now, need)
        if chosen is None:
            failed.append((need, req.gpus))
            return False
        stops, waiting, _ = preemption.commit(self.pool, self.quota, req, chosen, "priority")
        self.order.all_changed()
        self.possible.clear()
        self.decisions.preemptions.extend(stops)
        self.pending.add(req, PendingCode.WAITING_PREEMPTION, explain.preempting_own_team(
            req, limit, [v.lease_id for v in chosen.victims], waiting))
        return True

    # --- one request that passed the gates --------------------------------------------------------

    def _place(self, req: RequestView, groups: Sequence[Group], order: Order) -> None:
        """Grant best-fit if it fits and does not delay a backfill head ahead of it; else wait."""
        ahead = backfill.heads_ahead(self.reservations, groups, order, req.lease_id)
        placement = self.fits.find(self.pool.index, req, groups)
        if placement is not None and self.blocks:
            placement = self._off_blocks(req, groups, order, placement)
        if placement is not None and ahead:
            placement = self._clear_of_heads(req, groups, ahead, placement)
            if placement is None:
                return
        if placement is not None and self.holds is not None:
            exclude = backfill.exclusions(self.pool, ahead, req, groups, self.now) if ahead else None
            placement = self.clear_of_holds(req, groups, placement, exclude)
            if placement is None:
                return
        if placement is not None:
            self._grant(req, placement)
        else:
            self._wait(req, groups, order, ahead)

    def _off_blocks(self, req: RequestView, groups: Sequence[Group], order: Order,
                    placement: Placement) -> Placement:
        """A request of an earlier tier than a priority block of a higher priority, within its
        team's guarantee, is not behind it (its guarantee comes first) but keeps off it when it
        fits elsewhere, so the block still grows (blocks.py)."""
        above = backfill.blocks_above(self.reservations, groups, order, req.lease_id)
        exclude = backfill.exclusions(self.pool, above, req, groups, self.now) if above else None
        moved = self.fits.find(self.pool.index, req, groups, exclude) if exclude else None
        return placement if moved is None else moved

    def _clear_of_heads(self, req: RequestView, groups: Sequence[Group],
                        ahead: list[backfill.Reservation],
                        placement: Placement) -> Placement | None:
        """`placement`, or one clear of the GPUs the heads ahead wait for; None (and `req`
        pending behind them) when there is none."""
        exclude = backfill.exclusions(self.pool, ahead, req, groups, self.now)
        if exclude is None:
            return placement
        moved = self.fits.find(self.pool.index, req, groups, exclude)
        if moved is None:
            head = next(r.req for r in ahead if r.kinds & set(exclude))
            self.pending.add(req, PendingCode.BEHIND_HIGHER_PRIORITY,
                             explain.behind(req, self.pending.position, head.lease_id, head.gpus))
        return moved

    def _wait(self, req: RequestView, groups: Sequence[Group], order: Order,
              ahead: list[backfill.Reservation]) -> None:
        """No room now: behind a backfill head, or waiting for GPUs that ending leases or a
        preemption free for it, or a backfill head itself."""
        if ahead and (self._plan_possible(req, groups, order) or self._fair_share_phase(order)):
            # Until realized, a head claims every kind it could use: narrow it down before
            # deciding that this request is behind it and may not preempt.
            for res in ahead:
                backfill.realize(self.pool, res, self.now)
            ahead = backfill.heads_ahead(ahead, groups, order)
        if ahead:
            self.pending.add(req, *self.no_room_of(req, groups))
            return
        if self._try_plan(req, groups, order):
            return
        block = self.blocks.get(req.lease_id)
        if block is not None:  # its priority block is its backfill head
            block.pending_index = len(self.decisions.pending)
        else:
            self.reservations.append(backfill.hold(req, groups, order, len(self.decisions.pending)))
        self.pending.add(req, *self.no_room_of(req, groups))

    def finish(self) -> None:
        """Fill in the estimated starts (when the snapshot asks for them): the heads' from
        backfill, host by host; every other pending request's from the queue sweep
        (estimates.py), after the heads."""
        if not self.snapshot.estimate_starts:
            return
        for res in self.reservations:
            backfill.realize(self.pool, res, self.now)
            item = self.decisions.pending[res.pending_index]
            self.decisions.pending[res.pending_index] = replace(item, estimated_start=res.start)
        estimates.fill(self.pool, self.decisions.pending, self.first, self.requests, self.now,
                       head=self.snapshot.estimate_head)

    def _grant(self, req: RequestView, placement: Placement) -> None:
        decision = self.grant(req, placement)
        self.order.changed(req.team)
        self.possible.clear()
        if self.blocks:
            blocks.settle(self.reservations, self.blocks, req.lease_id)
        held: dict[tuple[str, int], int] = {}
        for host, kid, count in placement.blocks:
            held[(host, kid)] = held.get((host, kid), 0) + count
        end = None if req.expected_duration_s is None else self.now + req.expected_duration_s
        # Known to backfill (it will free its GPUs at `end`), never a victim in this pass.
        self.pool.add_fresh(RunningLease(req.lease_id, req.team, self.name, req.gpus,
                                         req.priority, granted_at=self.now,
                                         borrowed=decision.borrowed, expected_end=end,
                                         blocks=held))

    def _plan_shape(self, req: RequestView, groups: Sequence[Group],
                    reclaim: bool) -> tuple[object, ...]:
        """What decides whether a plan exists: the fit shape, the requester's team and priority
        (whose leases it may take) and the phase (reclaim or not)."""
        return (id(groups), req.same_host, (req.team, req.priority, reclaim))

    def _plan_possible(self, req: RequestView, groups: Sequence[Group], order: Order) -> bool:
        reclaim = order[0] < self.top
        shape = self._plan_shape(req, groups, reclaim)
        if self.plans.hopeless(shape, req.gpus):
            return False
        key = (shape, req.gpus)
        known = self.possible.get(key)
        if known is None:
            known = self.possible[key] = preemption.possible(self.pool, self.quota, req, groups, reclaim)
        return known

    def _try_plan(self, req: RequestView, groups: Sequence[Group], order: Order) -> bool:
        """Wait for ending leases, reclaim borrowed capacity, or preempt lower priority; failing
        that, in the borrowing phase, preempt for fair share where the pool allows it."""
        reclaim = order[0] < self.top
        kind = "reclaim" if reclaim else "priority"
        chosen = None
        if self._plan_possible(req, groups, order):
            chosen = preemption.plan(self.pool, self.quota, req, groups, self.now, reclaim)
            if chosen is None:
                self.plans.failed(self._plan_shape(req, groups, reclaim), groups, req.gpus)
        if chosen is None and self._fair_share_phase(order):
            chosen, kind = self._fair_share_plan(req, groups), "fair_share"
        if chosen is None:
            return False
        stops, _, reason = preemption.commit(self.pool, self.quota, req, chosen, kind)
        self.order.all_changed()  # the requester's and the victims' allocations changed
        self.possible.clear()
        self.decisions.preemptions.extend(stops)
        self.pending.add(req, _waiting_code(kind, chosen), reason)
        return True

    def _fair_share_phase(self, order: Order) -> bool:
        return self.fair_share and order[0] == self.top

    def _fair_share_plan(self, req: RequestView, groups: Sequence[Group]) -> preemption.Plan | None:
        """A fair-share preemption for a borrowing request; shapes that found none are
        remembered for the rest of the pass (shares only move against them within a pass)."""
        shape = (id(groups), req.same_host, (req.team, req.priority, "fair_share"))
        if self.plans.hopeless(shape, req.gpus):
            return None
        chosen = preemption_fair.plan_fair_share(self.pool, self.quota, req, groups, self.now,
                                                 self.snapshot.teams, self.snapshot.half_life_s)
        if chosen is None:
            self.plans.failed(shape, groups, req.gpus)
        return chosen


def _waiting_code(kind: str, chosen: preemption.Plan) -> PendingCode:
    """The code of a request a plan makes room for (its reason: `preemption.commit`'s): waiting
    for leases ending anyway, or for the preemptions the plan started, by their cause."""
    if not chosen.victims:
        return PendingCode.WAITING_ENDING
    return PendingCode.FAIR_SHARE if kind == "fair_share" else PendingCode.WAITING_PREEMPTION
