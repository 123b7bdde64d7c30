"""Fair-share preemption above guarantees: a team below its fair share takes borrowed GPUs back
from teams above theirs (Kueue's fair sharing with `preemptionStrategies`; see
`allocation.policy.preemption` for reclaim and priority preemption, whose searches it reuses).

A team's share is the very key a pass orders teams by (`fairshare.team_share`): GPUs held in the
pool (less its ending leases, plus what this pass promised it) and its decayed recent use, per
unit of weight. Any other measure would let the victim team's re-queued work, ordered first by
that key, take the freed GPUs back on the next pass, and the requester preempt again (livelock).

Only a request in the borrowing phase (its grant takes its team above its guarantee; a request
within its guarantee reclaims instead), in a pool with `fair_share_preemption` on and at least
`fair_share_preemption_interval_s` after the pool's last such preemption, and only when no
priority preemption makes room. A victim is a lease of another team that is not ending, past its
`min_runtime_s`, not granted in this pass, of a priority no higher than the request's, and whose
team stays at or above its own guarantee. Its `preemptible` flag does not protect it: borrowed
capacity is reclaimable by definition, as for reclaim. Each victim must pass the strategy, tried
in order (the second only when the first finds no plan):
1. `LessThanOrEqualToFinalShare`: the requester's share once granted is at most the victim team's
   share once the victim (and those chosen before it) are gone;
2. `LessThanInitialShare`: the requester's share once granted is below the victim team's share
   before this victim is taken; and, unlike Kueue, its share now (before the grant) is below the
   victim team's once the victim is gone. Kueue orders teams by their share *after* admitting
   the next workload, gpupool (water-filling) by the share before: without the second
   condition the victim team's re-queued work would be ordered first for the very GPUs its
   lease freed, and the requester would preempt again on every pass (found by the property
   test of convergence).
Either way, on the next pass the requester's key is below the victim team's, so it gets the
freed GPUs, and the victim team's work cannot preempt back: its share would have to be below
the requester's, which is below its own (no ping-pong). Shares then move only as recent use
decays, at the half-life's pace, and no faster than the pool's interval. Candidates: the teams
with the highest share first, then the lowest priority, the newest lease first.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from allocation.policy import explain
from allocation.policy.fairshare import mean_life
from allocation.policy.placement import Group
from allocation.policy.preemption import Budget, BudgetFactory, Plan, Rule, search
from allocation.policy.quota import QuotaBook
from allocation.policy.state import PoolState, RunningLease
from allocation.policy.types import PoolView, RequestView, TeamView

LE_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LT_INITIAL_SHARE = "LessThanInitialShare"
STRATEGIES = (LE_FINAL_SHARE, LT_INITIAL_SHARE)


def enabled(view: PoolView | None, now: float) -> bool:
    """Whether the pool allows fair-share preemption at `now`: switched on, and its minimum
    interval since the last one has passed."""
    if view is None or not view.fair_share_preemption:
        return False
    last = view.last_fair_share_preemption
    return last is None or now - last >= view.fair_share_preemption_interval_s


class Shares:
    """The teams' fair-share keys in one pool (`fairshare.team_share`), from the quota book as it
    stands while one plan is sought: worked out once per team, then a division per question."""

    def __init__(self, quota: QuotaBook, pool: str, teams: Mapping[str, TeamView],
                 half_life_s: float) -> None:
        self.quota, self.pool, self.teams = quota, pool, teams
        self.mean_life = mean_life(half_life_s)
        self._terms: dict[str, tuple[float, float]] = {}  # team -> (use in GPUs + committed, weight)

    def of(self, team: str, extra: int = 0) -> float:
        """The team's key with `extra` more GPUs (negative: fewer)."""
        terms = self._terms.get(team)
        if terms is None:
            view = self.teams.get(team)
            weight = view.weight if view is not None else 1.0
            usage = view.decayed_usage if view is not None else 0.0
            terms = self._terms[team] = (usage / self.mean_life
                                         + self.quota.committed(team, self.pool), weight)
        base, weight = terms
        return math.inf if weight <= 0 else (base + extra) / weight


class _FairBudget(Budget):
    """The victims one search may take under one strategy: each team's own guarantee (Budget),
    then the share rule, counting the victims already taken from that team. Made once per host
    a same-host search looks at: it only keeps what it took."""

    def __init__(self, quota: QuotaBook, req: RequestView, rule: _ShareRule) -> None:
        super().__init__(quota, req)
        self.rule = rule

    def allows(self, lease: RunningLease) -> bool:
        return super().allows(lease) and self.rule.allows(lease, self.taken[lease.team])


class _ShareRule:
    """One strategy's test of a victim, with the requester's keys worked out once per plan."""

    def __init__(self, shares: Shares, req: RequestView, strategy: str) -> None:
        self.shares, self.strategy = shares, strategy
        self.mine = shares.of(req.team, req.gpus)  # once granted
        self.mine_now = shares.of(req.team)  # its key in the next pass's order

    def allows(self, lease: RunningLease, taken: int) -> bool:
        after = self.shares.of(lease.team, -taken - lease.gpus)
        if self.strategy == LE_FINAL_SHARE:
            return self.mine <= after
        return self.mine < self.shares.of(lease.team, -taken) and self.mine_now < after


def plan_fair_share(pool: PoolState, quota: QuotaBook, req: RequestView, groups: Sequence[Group],
                    now: float, teams: Mapping[str, TeamView], half_life_s: float) -> Plan | None:
    """The cheapest fair-share preemption that makes `req` fit in one placement, with the
    reasons its victims read; None when the rules allow none (see the module docstring)."""
    shares = Shares(quota, pool.name, teams, half_life_s)
    mine = shares.of(req.team, req.gpus)
    above = {team: value for team in quota.teams_in(pool.name)
             if team != req.team and (value := shares.of(team)) > mine}
    if not above or not _possible(pool, quota, req, groups, above):
        return None
    candidates = sorted(
        (v for v in pool.leases if v.team in above and _admissible(v, req, now, pool.stopped)),
        key=lambda v: (-above[v.team], v.team, v.priority, -v.granted_at, v.lease_id))
    if req.same_host:
        candidates = _on_hosts_that_could_fit(pool, req, groups, candidates)
    for strategy in STRATEGIES:
        chosen = search(pool, quota, req, groups, Rule(
            lambda: candidates, _budgets(_ShareRule(shares, req, strategy)),
            lambda v: (v.team, v.priority)))
        if chosen is not None and chosen.victims:
            _explain(chosen, req, shares, mine, strategy)
            return chosen
    return None


def _budgets(rule: _ShareRule) -> BudgetFactory:
    def budget(quota: QuotaBook, req: RequestView) -> Budget:
        return _FairBudget(quota, req, rule)
    return budget


def _admissible(lease: RunningLease, req: RequestView, now: float, stopped: set[str]) -> bool:
    return not (lease.ending or lease.priority > req.priority or lease.lease_id in stopped
                or now - lease.granted_at < lease.min_runtime_s)


def _possible(pool: PoolState, quota: QuotaBook, req: RequestView, groups: Sequence[Group],
              above: Mapping[str, float]) -> bool:
    """Cheap necessary condition (kinds and priorities ignored): the free GPUs, the GPUs being
    freed and the borrowed, mature GPUs of the teams above the requester's share add up to the
    request, on one host for a same-host request."""
    extra = sum(min(quota.reclaimable(team, pool.name), pool.mature_gpus(team)) for team in above)
    if pool.any_ending_free():
        extra += pool.ending_gpus
    if extra <= 0 or extra + max(pool.index.free_in(g) for g in groups) < req.gpus:
        return False
    return not req.same_host or pool.victim_room(req.priority, frozenset(above), groups) >= req.gpus


def _on_hosts_that_could_fit(pool: PoolState, req: RequestView, groups: Sequence[Group],
                             candidates: list[RunningLease]) -> list[RunningLease]:
    """The candidates with GPUs on a host where they, its free GPUs and those being freed could
    hold the request (kinds ignored among the candidates: an upper bound). A same-host search
    looks at every candidate until a host fits; most hosts of a busy pool never can."""
    room: dict[str, int] = defaultdict(int)
    for lease in candidates:
        for (host, _), count in lease.blocks.items():
            room[host] += count
    # A bound on what any one host adds (its largest free blocks, its GPUs being freed) first:
    # in a full pool it rules out most hosts with one comparison each.
    ending: dict[str, int] = defaultdict(int)
    for (host, _), count in pool.ending_free.items():
        ending[host] += count
    slack = max(sum(_largest_free(pool, kid) for kid in g.kinds) for g in groups) \
        + max(ending.values(), default=0)
    fit = {host for host, count in room.items()
           if count + slack >= req.gpus and count + max(
               pool.index.free_on(host, g) + pool.ending_on(host, g) for g in groups) >= req.gpus}
    return [v for v in candidates if any(host in fit for host in v.hosts)]


def _largest_free(pool: PoolState, kid: int) -> int:
    """The most free GPUs of one kind on any one host."""
    buckets = pool.index.buckets[kid]
    return next((count for count in range(len(buckets) - 1, 0, -1) if buckets[count]), 0)


def _explain(chosen: Plan, req: RequestView, shares: Shares, mine: float, strategy: str) -> None:
    """Word each victim's reason with the shares that justify it (once the plan is done)."""
    lost: dict[str, int] = {}
    for victim in chosen.victims:
        lost[victim.team] = lost.get(victim.team, 0) + victim.gpus
    for victim in chosen.victims:
        chosen.reasons[victim.lease_id] = explain.preempted_for_fair_share(
            req, victim.team, mine, shares.of(victim.team), shares.of(victim.team, -lost[victim.team]),
            strategy)
