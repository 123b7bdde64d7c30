"""Reasons in words for every pending lease and every preemption.

A user reading a reason should know what to change or how long to wait: which constraint no GPU
meets, how large the largest free block is and where, which limit is in the way, which leases are
being stopped for them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from allocation.policy.codes import PendingCode
from allocation.policy.matching import constraint_of, kind_eligible, model_alternatives, model_matches
from allocation.policy.placement import FreeIndex, Group
from allocation.policy.types import RequestView, ReservationView

_MAX_NAMES = 3

NO_GPUS = "asks for no GPUs"


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _names(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_MAX_NAMES])
    return shown if len(ids) <= _MAX_NAMES else f"{shown} and {len(ids) - _MAX_NAMES} more"


def no_match(req: RequestView, index: FreeIndex) -> tuple[PendingCode, str]:
    """Why no GPU of the pool could ever match: the first constraint that excludes them all, as
    its code (`selector` when it is the selector, else `no_match`) and in words."""
    where = f"in pool {req.pool}"
    if not index.capacity:
        return PendingCode.NO_MATCH, f"pool {req.pool} has no schedulable GPUs"
    kinds = [index.kinds[k] for k in index.capacity]
    alternatives = model_alternatives(req.model)
    kinds = [k for k in kinds if model_matches(k, alternatives)]
    if not kinds:
        return PendingCode.NO_MATCH, f"no GPU of model {req.model or 'any'} {where}"
    if not any(k.memory_mb >= req.min_memory_mb for k in kinds):
        return PendingCode.NO_MATCH, f"no GPU{_of(req)} with at least {req.min_memory_mb} MB of memory {where}"
    steps = (
        ((req.model, req.min_memory_mb, req.min_driver_version, "", "", ""), PendingCode.NO_MATCH,
         f"no GPU{_of(req)} with driver >= {req.min_driver_version} {where}"),
        ((req.model, req.min_memory_mb, req.min_driver_version, req.min_cuda_version, "", ""),
         PendingCode.NO_MATCH, f"no GPU{_of(req)} with CUDA >= {req.min_cuda_version} {where}"),
        ((*constraint_of(req)[:5], ""), PendingCode.NO_MATCH,
         f"no host {where} can start a {req.workload} (no source of the pool runs one)"
         f"{_with(req)}"),
        (constraint_of(req), PendingCode.SELECTOR,
         f"no host {where} matches the selector {req.selector}{_with(req)}"),
    )
    for constraint, code, reason in steps:
        if not any(kind_eligible(k, constraint, k.shared_team or req.team) for k in kinds):
            return code, reason
    return PendingCode.NO_MATCH, f"every matching GPU {where} is time-sliced and reserved for another team"


def _with(req: RequestView) -> str:
    """' with a GPU of model …' when the request names a model: the hosts it rules out may
    have other models."""
    return f" with a GPU{_of(req)}" if req.model else ""


def _selected(req: RequestView) -> str:
    """' matching selector …' for a request with a selector, so that a reason about free
    capacity says which hosts it counts."""
    return f" on hosts matching {req.selector}" if req.selector else ""


def _of(req: RequestView) -> str:
    return f" of model {req.model}" if req.model else ""


def too_big(req: RequestView, groups: Sequence[Group]) -> str:
    if req.same_host:
        block = max(g.capacity_block for g in groups)
        return (f"asks for {_gpus(req.gpus)} on one host, but no host in pool {req.pool}"
                f"{_selected(req)} has more than {block} matching GPUs")
    total = max(g.capacity_total for g in groups)
    within = " within one cluster or SSH domain" if len({g.key[3] for g in groups}) > 1 else ""
    return (f"asks for {_gpus(req.gpus)}, but pool {req.pool} has only {total} matching GPUs"
            f"{_selected(req)}{within}")


def over_limit(req: RequestView, limit: int) -> str:
    return f"asks for {_gpus(req.gpus)}, above team {req.team}'s limit {limit} in pool {req.pool}"


def over_limit_at_creation(req: RequestView, limit: int) -> str:
    """`over_limit` as the API answers a new lease (a 400 that names the team, not a reason)."""
    return (f"team {req.team} may hold at most {limit} GPUs in pool {req.pool}; "
            f"asked for {req.gpus}")


def never_fits(req: RequestView, bound: int) -> str:
    """A new lease larger than any capacity of its pool could give it (`capacity_bound`)."""
    where = "on one host" if req.same_host else "in total"
    memory = f" with ≥ {req.min_memory_mb} MB" if req.min_memory_mb else ""
    return (f"pool {req.pool} has at most {bound} GPUs{_of(req)}{memory} {where}; "
            f"{req.gpus} can never be granted")


def queue_full(req: RequestView, cap: str, limit: int, pending: int) -> str:
    """A new lease over its team's queue cap in the pool; `cap` is the key of
    `pools[].queue_caps`, `pending` what the team's queue holds of it now."""
    then = "; wait for some to be granted, or release some"
    if cap == "pending_leases_per_team":
        return (f"team {req.team} already has {pending} pending lease{'' if pending == 1 else 's'} in pool "
                f"{req.pool}, its cap (queue_caps.{cap}: {limit}){then}")
    return (f"team {req.team}'s pending leases in pool {req.pool} ask for {_gpus(pending)}; {req.gpus} more would "
            f"go over its cap (queue_caps.{cap}: {limit}){then}")


def no_model_to_reserve(view: ReservationView) -> str:
    return f"no GPU of model {view.model!r} in pool {view.pool}"


def reservations_hold(view: ReservationView, capacity: int, taken: int) -> str:
    """A new reservation the pool's matching GPUs cannot take beside the overlapping ones."""
    what = f" of model {view.model}" if view.model else ""
    return (f"pool {view.pool} has {capacity} GPUs{what}; other reservations hold up to {taken} "
            f"of them in that window, so {view.gpus} more cannot be reserved "
            f"(at most {max(0, capacity - taken)})")


def reservation_over_limit(view: ReservationView, limit: int, own: int) -> str:
    return (f"team {view.team} may hold at most {limit} GPUs in pool {view.pool}; its reservations "
            f"already hold up to {own} in that window, so {view.gpus} more cannot be reserved")


def at_limit(req: RequestView, limit: int, holds: int) -> str:
    return (f"team {req.team} at its limit {limit} in pool {req.pool} "
            f"(holds or awaits {holds}, asks for {req.gpus})")


def lending_limit(req: RequestView, borrows: int, guaranteed: int, may_lend: int,
                  kept: Sequence[tuple[str, int, int, int]]) -> str:
    """A borrowing request beyond what the other teams of the pool may lend now. `kept`:
    (team, idle guaranteed GPUs it keeps unlent, guaranteed, lending limit) per such team."""
    kept = sorted(kept, key=lambda k: (-k[1], k[0]))
    teams = "; ".join(f"team {team} keeps {_gpus(n)} of its idle guarantee unlent "
                      f"(guaranteed {g}, lending limit {limit})"
                      for team, n, g, limit in kept[:_MAX_NAMES])
    if len(kept) > _MAX_NAMES:
        teams += f"; and {len(kept) - _MAX_NAMES} more teams"
    return (f"would borrow {_gpus(borrows)} above team {req.team}'s guarantee {guaranteed} in "
            f"pool {req.pool}, but only {may_lend} may be lent now: {teams}")


def at_limit_until_ending(at_limit_reason: str, leaving: int) -> str:
    return f"{at_limit_reason}; waiting for its own ending leases to free {_gpus(leaving)}"


def no_room(req: RequestView, index: FreeIndex, groups: Sequence[Group]) -> str:
    """Capacity exists but is busy: say how far the free capacity is from the request."""
    model = f" of model {req.model}" if req.model else ""
    others = _kept_for_others(req, index, groups)
    if req.same_host:
        size, host = max(index.largest_block(g) for g in groups)
        if size == 0:
            return (f"waiting for {_gpus(req.gpus)}{model} on one host{_selected(req)}; none is "
                    f"free in pool {req.pool}{others}")
        return (f"waiting for {_gpus(req.gpus)}{model} on one host{_selected(req)}; largest free "
                f"block is {size} on {host}{others}")
    free = max(index.free_in(g) for g in groups)
    return (f"waiting for {_gpus(req.gpus)}{model}{_selected(req)}; {free} free in pool "
            f"{req.pool}{others}")


def _kept_for_others(req: RequestView, index: FreeIndex, groups: Sequence[Group]) -> str:
    """'; N free time-sliced replicas are on GPUs in use by team T (…)' when replicas that
    would match are free but kept for other teams (timeslice.py); '' otherwise."""
    if not any(g.time_sliced for g in groups):
        return ""
    constraint = constraint_of(req)
    free: dict[str, int] = {}
    for kid in index.capacity:
        kind, count = index.kinds[kid], index.free_total.get(kid, 0)
        team = kind.shared_team
        if count and team is not None and team != req.team and kind_eligible(kind, constraint, team):
            free[team] = free.get(team, 0) + count
    if not free:
        return ""
    total, teams = sum(free.values()), sorted(free)
    replicas = "replica is" if total == 1 else "replicas are"
    return (f"; {total} free time-sliced {replicas} on GPUs in use by team"
            f"{'s' if len(teams) > 1 else ''} {_names(teams)} (a time-sliced GPU serves one team "
            f"at a time in pool {req.pool})")


def topology(req: RequestView) -> str:
    """A lease whose required topology keeps it waiting though its GPUs are free elsewhere."""
    where = "one NVLink island" if req.within == "nvlink" else f"one {req.within}"
    return (f"{_gpus(req.gpus)}{_of(req)} are free in pool {req.pool}, but not within {where} "
            f"(topology within {req.within}, required); it waits rather than be placed across")


def behind(req: RequestView, ahead: int, head: str, head_gpus: int) -> str:
    noun = "request" if ahead == 1 else "requests"
    return (f"waiting behind {ahead} higher-priority {noun}; starting now would delay "
            f"lease {head} ({_gpus(head_gpus)}) that holds the next free capacity")


def waiting_for_ending(gpus: int) -> str:
    return f"waiting for {_gpus(gpus)} being freed by ending leases"


def waiting_for_preemption(gpus: int, victims: Sequence[str], *, fair_share: bool = False) -> str:
    cause = "fair-share preemption" if fair_share else "preemption"
    return f"waiting for {_gpus(gpus)} being freed by {cause} of {_names(list(victims))}"


def preempting_own_team(req: RequestView, limit: int, victims: Sequence[str],
                        waiting: int) -> str:
    """A request of a team at its limit, making room by stopping its own team's lower-priority
    preemptible leases."""
    noun = "lease" if len(victims) == 1 else "leases"
    freed = (f"waiting for {_gpus(waiting)} being freed" if waiting
             else "its GPUs are held for it until they end")
    return (f"preempting {len(victims)} {noun} of its own team of lower priority "
            f"({_names(list(victims))}) to stay within team {req.team}'s limit {limit} in pool "
            f"{req.pool}; {freed}")


def preempted(kind: str, by: RequestView, victim_priority: int, *, same_team: bool = False) -> str:
    if kind == "reclaim":
        return (f"reclaimed: team {by.team} needs its guaranteed share in pool {by.pool} "
                f"(lease {by.lease_id})")
    if same_team:
        return (f"preempted for higher-priority lease {by.lease_id} of the same team {by.team} "
                f"(priority {by.priority} > {victim_priority})")
    return (f"preempted by higher-priority lease {by.lease_id} of team {by.team} "
            f"(priority {by.priority} > {victim_priority})")


def preempted_for_fair_share(by: RequestView, victim_team: str, by_share: float, before: float,
                             after: float, strategy: str) -> str:
    """A lease stopped so that a team below its fair share gets GPUs back; a share is the key
    teams are ordered by (GPUs held and recent use, per unit of weight)."""
    rule = "at most" if strategy == "LessThanOrEqualToFinalShare" else "below"
    return (f"preempted for fair share in pool {by.pool}: team {by.team}'s share would be "
            f"{_per_weight(by_share)} with lease {by.lease_id}, {rule} team {victim_team}'s "
            f"{_per_weight(after if rule == 'at most' else before)} (GPUs held and recent use "
            f"per unit of weight; team {victim_team} was at {_per_weight(before)}, now "
            f"{_per_weight(after)})")


def _per_weight(value: float) -> str:
    return "∞" if value == float("inf") else f"{value:.3g}"


def _at(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(moment))


def reserved(req: RequestView, view: ReservationView, label: str, held: int, active: bool) -> str:
    """A request kept off GPUs an advance reservation of another team holds: during its window,
    or before it when the lease would still run at its start."""
    what = (f"{_gpus(held)} of {label} in pool {req.pool} are reserved for team {view.team} "
            f"(reservation {view.reservation_id}, {_gpus(view.gpus)}")
    if active:
        return f"{what} until {_at(view.end)})"
    return (f"{what} from {_at(view.start)} to {_at(view.end)}); a lease that would still run "
            "at its start may not take them (one with a shorter ttl_seconds may)")


def over_parent_limit(req: RequestView, node: str, limit: int) -> str:
    """A request larger than the limit of a department above its team (tree.py)."""
    return (f"asks for {_gpus(req.gpus)}, above the limit {limit} of team {req.team}'s "
            f"department {node} in pool {req.pool}")


def at_parent_limit(req: RequestView, node: str, limit: int, holds: int) -> str:
    """A department above the request's team holds (or awaits) its whole limit."""
    return (f"department {node} (of team {req.team}) at its limit {limit} in pool {req.pool} "
            f"(its teams hold or await {holds}, asks for {req.gpus})")
