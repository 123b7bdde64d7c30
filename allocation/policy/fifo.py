"""The plain baseline: priority, then arrival order, per pool; the same matching and best-fit
placement as the fair policy; a team's hard limit is respected; no guarantees-first ordering, no
fair share, no preemption, no reservations. A request that does not fit is skipped and the
next one is tried (Kueue's BestEffortFIFO), so the baseline is not crippled by head-of-line
blocking. Used by `simulate --policy fifo` as the yardstick the fair policy is measured against."""

from __future__ import annotations

from collections import defaultdict

from allocation.policy import explain
from allocation.policy.placement import capacity_bound
from allocation.policy.state import build_pass, definitive, queue_order
from allocation.policy.types import Decisions, Grant, Pending, RequestView, Snapshot


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide one pass; every pending request ends up in `grants` or `pending`."""
    by_pool: dict[str, list[RequestView]] = defaultdict(list)
    for req in snapshot.pending:
        by_pool[req.pool].append(req)
    state = build_pass(snapshot, set(by_pool))
    quota = state.quota
    decisions = Decisions()
    for name in sorted(by_pool):
        pool = state.pool(name)
        position = 0
        no_fit: dict[tuple, int] = {}

        def pending(req: RequestView, reason: str, unsatisfiable: bool = False) -> None:
            nonlocal position
            position += 1
            decisions.pending.append(Pending(req.lease_id, reason, position, None, unsatisfiable))

        for req in sorted(by_pool[name], key=queue_order):
            groups = pool.index.groups_for(req) if pool is not None else ()
            if pool is None or not groups or req.gpus <= 0:
                pending(req, explain.no_match(req, pool.index if pool else None)
                        if req.gpus > 0 else "asks for no GPUs", definitive(pool))
                continue
            bound = capacity_bound(groups, req.same_host)
            limit = quota.limit(req.team, name)
            if req.gpus > bound or (limit is not None and req.gpus > limit):
                pending(req, explain.too_big(req, groups) if req.gpus > bound
                        else explain.over_limit(req, limit or 0),
                        req.gpus <= bound or definitive(pool))
                continue
            if not quota.fits_limit(req.team, name, req.gpus):
                pending(req, explain.at_limit(req, limit or 0, quota.held[(req.team, name)]))
                continue
            shape = (id(groups), req.same_host)  # groups are cached per constraints (and team)
            placement = None
            if req.gpus < no_fit.get(shape, 1 << 30):
                placement = pool.index.find(groups, req.gpus, req.same_host)
            if placement is None:
                no_fit[shape] = min(req.gpus, no_fit.get(shape, 1 << 30))
                pending(req, explain.no_room(req, pool.index, groups))
                continue
            gpu_ids = pool.index.take(placement)
            for host, kid, _ in placement.blocks:
                if pool.index.kinds[kid].time_sliced:
                    pool.index.restrict_to_team(host, kid, req.team)
            borrowed = quota.grant(req.team, name, req.gpus)
            decisions.grants.append(Grant(req.lease_id, tuple(sorted(gpu_ids)), placement.host,
                                          borrowed))
    return decisions
