"""Preemption within a team at its limit: which of the team's own leases make room for its
higher-priority request (see `allocation.policy.preemption` for the other rules; `commit` there
starts the plan).

The team's own preemptible leases of lower priority only (past their minimum runtime, not ending,
not granted in this pass), freeing at least what takes the team back to its limit once the
request is granted, and making the request fit in one placement: the lowest priority that
suffices, then the fewest leases, then the fewest GPUs, the newest first among equals. Unlike
the cross-team rules (first sufficient prefix in victim order), the fewest leases win here: both
sides are the same team, so stopping one large lease beats stopping two small ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from allocation.policy.placement import Group
from allocation.policy.preemption import Plan, admissible, plan_cost, prune, victim_order
from allocation.policy.state import PoolState, RunningLease
from allocation.policy.types import RequestView


def plan_within_team(pool: PoolState, req: RequestView, groups: Sequence[Group], now: float,
                     need_team: int) -> Plan | None:
    """For a request of a team at its limit: the cheapest set of the team's own preemptible,
    lower-priority leases (past their minimum runtime, not ending, not granted in this pass)
    that frees at least `need_team` of the team's GPUs (so granting the request keeps the team
    within its limit) and makes the request fit in one placement once they are gone. None when
    there is none."""
    if pool.preemptible_below(req.team, req.priority) < need_team:
        return None
    if pool.victim_order is None:
        pool.victim_order = sorted(pool.leases, key=victim_order)
    own = [v for v in pool.victim_order
           if v.team == req.team and admissible(v, req, False, now, pool.stopped)]
    best: Plan | None = None
    for group in groups:
        for found in _own_team_plans(pool, req, group, own, need_team):
            if best is None or found.cost < best.cost:
                best = found
    return best


def _own_team_plans(pool: PoolState, req: RequestView, group: Group, own: list[RunningLease],
                    need_team: int) -> Iterator[Plan]:
    """Pool-wide: one plan. Same host: one per host that could hold the request (a host of a
    victim, of ending GPUs, or where it fits now), in a stable order."""
    if not req.same_host:
        have = pool.index.free_in(group) + pool.ending_in(group)
        chosen = _choose_both(own, req.gpus - have, need_team, lambda v: v.in_group(group))
        if chosen is not None:
            yield Plan(group, None, chosen, plan_cost(chosen, have, req.gpus, ""))
        return
    for host in _candidate_hosts(pool, req, group, own):
        have = pool.index.free_on(host, group) + pool.ending_on(host, group)
        chosen = _choose_both(own, req.gpus - have, need_team, _on_host(host, group))
        if chosen is not None:
            yield Plan(group, host, chosen, plan_cost(chosen, have, req.gpus, host))


def _on_host(host: str, group: Group) -> Callable[[RunningLease], int]:
    return lambda lease: lease.on(host, group)


def _candidate_hosts(pool: PoolState, req: RequestView, group: Group,
                     own: list[RunningLease]) -> list[str]:
    hosts = dict.fromkeys(h for v in own for h in v.hosts if v.on(h, group))
    for (host, kid), count in pool.ending_free.items():
        if count > 0 and kid in group.kinds:
            hosts.setdefault(host, None)
    fits = pool.index.find([group], req.gpus, True)
    if fits is not None:
        hosts.setdefault(fits.host, None)
    return list(hosts)


def _choose_both(victims: list[RunningLease], need_place: int, need_team: int,
                 contrib: Callable[[RunningLease], int]) -> list[RunningLease] | None:
    """The victims that free `need_place` GPUs of the placement (`contrib`) and `need_team`
    GPUs of the team: the lowest priority that suffices, then the fewest leases (largest
    first, pruned), then the fewest GPUs, the newest first among equals."""
    candidates = _lowest_sufficient(victims, need_place, need_team, contrib)
    if candidates is None:
        return None
    by_size = sorted(candidates, key=lambda v: (-contrib(v), -v.gpus, _newest(v)))
    chosen = _greedy_both(by_size, need_place, need_team, contrib)
    return _swap_smaller(chosen, candidates, need_place, need_team, contrib)


def _newest(lease: RunningLease) -> tuple[float, str]:
    return (-lease.granted_at, lease.lease_id)


def _lowest_sufficient(victims: list[RunningLease], need_place: int, need_team: int,
                       contrib: Callable[[RunningLease], int]) -> list[RunningLease] | None:
    """The victims of every priority up to the lowest one at which they free enough; None when
    all of them together do not."""
    ordered = sorted(victims, key=lambda v: (v.priority, _newest(v)))
    place = team = 0
    for lease in ordered:
        place += contrib(lease)
        team += lease.gpus
        if place >= need_place and team >= need_team:
            return [v for v in ordered if v.priority <= lease.priority]
    return None


def _greedy_both(ordered: list[RunningLease], need_place: int, need_team: int,
                 contrib: Callable[[RunningLease], int]) -> list[RunningLease]:
    """In order, each lease that helps a need not yet met; then those not needed dropped,
    latest chosen first (`prune`). `ordered` is known to suffice."""
    chosen: list[RunningLease] = []
    place = team = 0
    for lease in ordered:
        if place >= need_place and team >= need_team:
            break
        gain = contrib(lease)
        if (gain > 0 and place < need_place) or team < need_team:
            chosen.append(lease)
            place += gain
            team += lease.gpus
    return prune(chosen, need_place, contrib, need_team)


def _swap_smaller(chosen: list[RunningLease], candidates: list[RunningLease], need_place: int,
                  need_team: int, contrib: Callable[[RunningLease], int]) -> list[RunningLease]:
    """Replace each chosen lease by a smaller (or as small and newer) one left out, where the
    needs stay met: as many victims, fewer GPUs stopped."""
    def size(v: RunningLease) -> tuple[int, float, str]:
        return (v.gpus, *_newest(v))

    taken = {v.lease_id for v in chosen}
    spare = sorted((v for v in candidates if v.lease_id not in taken), key=size)
    place, team = sum(contrib(v) for v in chosen), sum(v.gpus for v in chosen)
    result = list(chosen)
    for i, lease in enumerate(result):
        for alt in spare:
            if size(alt) >= size(lease):
                break
            p, t = place - contrib(lease) + contrib(alt), team - lease.gpus + alt.gpus
            if p >= need_place and t >= need_team:
                result[i], place, team = alt, p, t
                spare.remove(alt)
                break
    return result
