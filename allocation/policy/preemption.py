"""Choosing preemption victims, and waiting for GPUs that ending leases are about to free.

Rules (Kueue's reclaimWithinCohort / withinClusterQueue, adapted to teams):
- Reclaim: a request that keeps its team within its guarantee may take back *borrowed* capacity:
  any lease of another team, whatever its priority or preemptible flag, as long as that team
  stays at or above its own guarantee. Borrowed capacity is reclaimable by definition; the
  victim's `min_runtime_s` is still honoured (a job gets the start it was promised).
- Priority: a request may preempt `preemptible` leases of strictly lower priority that have run
  at least `min_runtime_s`: any of its own team's, and other teams' only from their borrowed
  capacity. A higher priority never eats into another team's guarantee: if it did, the victim
  team's re-queued work would reclaim it straight back (ping-pong).
- Never a lease that is already ending (preempted earlier, grace running), and never one granted
  in this very pass. GPUs of ending leases are counted first: a request they already make fit
  waits for them and preempts nothing.
- Victim order: borrowed before in-quota, lowest priority, most recently granted. The set is the
  smallest that frees enough GPUs *in one placement*: per host for same-host requests (a lease
  whose GPUs would not make the request fit is never touched), pool-wide otherwise; greedy in
  victim order, then pruned of victims not needed. Among hosts, the plan that hurts least wins:
  lowest top victim priority, fewest in-quota victims, fewest victims, fewest GPUs.
- Within a team at its limit (`preemption_team.plan_within_team`): the team's own preemptible leases of lower
  priority only, freeing at least what takes the team back to its limit once the request is
  granted, and making the request fit in one placement: the lowest priority that suffices,
  then the fewest leases, then the fewest GPUs, the newest first among equals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from allocation.policy import explain
from allocation.policy.placement import Group, Placement, trim
from allocation.policy.quota import QuotaBook
from allocation.policy.state import PoolState, RunningLease
from allocation.policy.types import Preemption, RequestView


@dataclass
class Plan:
    group: Group
    host: str | None  # the host of a same-host plan; None for pool-wide plans
    victims: list[RunningLease] = field(default_factory=list)
    cost: tuple[float, ...] = ()
    # The reason a victim reads, by lease id, where its rule words it itself (fair share).
    reasons: dict[str, str] = field(default_factory=dict)


class Budget:
    """What one search may take from each other team: never below the team's own guarantee
    (`QuotaBook.reclaimable`). The requester's own leases are not limited here. A fresh budget
    per search (per host for same-host searches).

    With a team tree, never below the guarantee of any of the victim team's ancestors that is
    not also the requester's (a department keeps its guarantee against outsiders; within the
    common ancestor it is the same pot), and a request that reclaims a department's guarantee
    rather than its team's own (`QuotaBook.tier` above 0) takes only from outside that
    department: inside it, its siblings share that guarantee with it."""

    def __init__(self, quota: QuotaBook, req: RequestView) -> None:
        self.quota, self.req = quota, req
        self.taken: dict[str, int] = defaultdict(int)  # team (or node) -> GPUs taken by this search
        self.scope: str | None = None  # with a tree: victims only outside this node's subtree
        self.mine: frozenset[str] = frozenset()
        if quota.tree is not None:
            self.mine = frozenset((req.team, *quota.tree.ancestors(req.team)))
            if not quota.within_guarantee(req.team, req.pool, req.gpus):
                self.scope = next((n for n in quota.tree.ancestors(req.team)
                                   if quota.within_guarantee(n, req.pool, req.gpus)), None)

    def _nodes(self, team: str) -> tuple[str, ...]:
        """The victim team and its ancestors below the common ancestor with the requester."""
        tree = self.quota.tree
        if tree is None:
            return (team,)
        nodes = [team]
        for node in tree.ancestors(team):
            if node in self.mine:
                break
            nodes.append(node)
        return tuple(nodes)

    def allows(self, lease: RunningLease) -> bool:
        tree, pool = self.quota.tree, self.req.pool
        if tree is None:  # flat: the victim's team only (the hot path: no tree work)
            return self.quota.reclaimable(lease.team, pool) - self.taken[lease.team] >= lease.gpus
        if self.scope is not None and not tree.outside(lease.team, self.scope):
            return False
        return all(self.quota.reclaimable(node, pool) - self.taken[node] >= lease.gpus
                   for node in self._nodes(lease.team))

    def take(self, lease: RunningLease) -> bool:
        """Count `lease` as a victim if the rules allow it; whether they did."""
        if lease.team == self.req.team:
            return True
        if not self.allows(lease):
            return False
        if self.quota.tree is None:
            self.taken[lease.team] += lease.gpus
            return True
        for node in self._nodes(lease.team):
            self.taken[node] += lease.gpus
        return True


BudgetFactory = Callable[[QuotaBook, RequestView], Budget]


def victim_order(lease: RunningLease) -> tuple[int, int, float, str]:
    return (0 if lease.borrowed else 1, lease.priority, -lease.granted_at, lease.lease_id)


def possible(pool: PoolState, quota: QuotaBook, req: RequestView, groups: Sequence[Group],
             reclaim: bool) -> bool:
    """Cheap necessary condition for a plan: free GPUs, GPUs being freed, and GPUs of every
    lease that might be a victim add up to the request (kinds and hosts ignored), and there is
    at least one of the latter two (free GPUs alone did not fit it)."""
    extra = pool.preemptible_below(req.team, req.priority)
    ending = pool.any_ending_free()
    if ending:
        extra += pool.ending_gpus
    lenders = []
    for team in quota.teams_in(pool.name):
        if team != req.team:
            victims = pool.mature_gpus(team) if reclaim else pool.preemptible_below(team, req.priority)
            extra += min(quota.reclaimable(team, pool.name), victims)
            if reclaim and quota.reclaimable(team, pool.name) > 0:
                lenders.append(team)
    if extra <= 0 or extra + max(pool.index.free_in(g) for g in groups) < req.gpus:
        return False
    if not req.same_host or ending:
        return True
    # Same host: some host must hold enough free GPUs and GPUs of possible victims.
    return pool.victim_room(req.priority, frozenset(lenders), groups) >= req.gpus


def admissible(lease: RunningLease, req: RequestView, reclaim: bool, now: float,
                stopped: set[str]) -> bool:
    if lease.ending or now - lease.granted_at < lease.min_runtime_s or lease.lease_id in stopped:
        return False
    if lease.preemptible and lease.priority < req.priority:
        return True
    return reclaim and lease.team != req.team


def plan(pool: PoolState, quota: QuotaBook, req: RequestView, groups: Sequence[Group],
         now: float, reclaim: bool) -> Plan | None:
    """The cheapest way to make `req` fit, or None. A plan without victims means: wait for
    ending leases."""
    if pool.victim_order is None:
        pool.victim_order = sorted(pool.leases, key=victim_order)
    order = pool.victim_order
    tree = quota.tree
    klass = _victim_class
    if tree is not None and reclaim:
        # Reclaim takes from the borrowers farthest in the tree first (another department's
        # before a sibling's); victim order within each distance. The requester's own
        # lower-priority preemptible leases rank with the farthest, as the flat order ranks them
        # with every other team's: on a one-level tree the two orders are the same.
        distance = {team: tree.distance(req.team, team) for team in {v.team for v in order}}
        if req.team in distance:
            distance[req.team] = max(distance.values())
        order = sorted(order, key=lambda v: -distance[v.team])

        def klass(lease: RunningLease) -> tuple[object, ...]:
            return (-distance[lease.team], lease.borrowed, lease.priority)
    return search(pool, quota, req, groups, Rule(
        lambda: (v for v in order if admissible(v, req, reclaim, now, pool.stopped)),
        Budget, klass))


def _victim_class(lease: RunningLease) -> tuple[object, ...]:
    return (lease.borrowed, lease.priority)


@dataclass(frozen=True)
class Rule:
    """Who may be a victim of one search: `candidates()` yields the admissible leases in order
    of preference, `budget` limits what may be taken from each team, and victims of one `klass`
    are equally preferable (a same-host search stops at the first class that completes a plan)."""

    candidates: Callable[[], Iterable[RunningLease]]
    budget: BudgetFactory
    klass: Callable[[RunningLease], tuple[object, ...]]


def search(pool: PoolState, quota: QuotaBook, req: RequestView, groups: Sequence[Group],
           rule: Rule) -> Plan | None:
    """The cheapest plan over the request's groups under `rule`, or None."""
    best: Plan | None = None
    for group in groups:
        find = _same_host if req.same_host else _pool_wide
        found = find(pool, quota, req, group, rule)
        if found is not None and (best is None or found.cost < best.cost):
            best = found
    return best


def _same_host(pool: PoolState, quota: QuotaBook, req: RequestView, group: Group,
               rule: Rule) -> Plan | None:
    """Waiting for ending leases if they make it fit on a host; else victims are taken
    strictly in victim order, each counted on the hosts where it holds GPUs of the group; the
    hosts that first reach the request's size within one victim class (borrowed, priority)
    compete on fewest victims, then fewest GPUs; a one-victim plan ends the search. Cost: the
    victims scanned, not the hosts of the pool."""
    waiting = _wait_on_host(pool, req, group)
    if waiting is not None:
        return waiting
    tally = _HostTally(pool, quota, req, group, rule.budget)
    best: Plan | None = None
    best_class: tuple[object, ...] | None = None
    for lease in rule.candidates():
        if best_class is not None and rule.klass(lease) != best_class:
            break
        found = tally.add(lease)
        if found is not None:
            best_class = rule.klass(lease)
            if best is None or found.cost < best.cost:
                best = found
        if best is not None and len(best.victims) <= 1:
            break  # nothing beats one victim of the cheapest class
    return best


def _wait_on_host(pool: PoolState, req: RequestView, group: Group) -> Plan | None:
    """A plan without victims: a host where the free GPUs and the unclaimed ones of ending
    leases make the request fit."""
    ending: dict[str, int] = defaultdict(int)
    for (host, kid), count in pool.ending_free.items():
        if count > 0 and kid in group.kinds:
            ending[host] += count
    for host, count in ending.items():
        if count + pool.index.free_on(host, group) >= req.gpus:
            return Plan(group, host, [], plan_cost([], count, req.gpus, host))
    return None


class _HostTally:
    """One same-host search, per host: the GPUs free, being freed, or held by the victims
    chosen there so far; those victims; and what they take from each other team's borrowed
    GPUs (never below its own guarantee)."""

    def __init__(self, pool: PoolState, quota: QuotaBook, req: RequestView, group: Group,
                 budget: BudgetFactory) -> None:
        self.pool, self.quota, self.req, self.group = pool, quota, req, group
        self.have: dict[str, int] = {}
        self.chosen: dict[str, list[RunningLease]] = defaultdict(list)
        self.budgets: dict[str, Budget] = {}
        self.budget = budget

    def add(self, lease: RunningLease) -> Plan | None:
        """Count `lease` on each host where it holds GPUs of the group (in the order of its
        GPUs, so ties break the same way in every process); the cheapest plan it completes."""
        best: Plan | None = None
        for host in lease.hosts:
            if not lease.on(host, self.group):
                continue  # none of the group's GPUs there
            found = self._add_on(host, lease)
            if found is not None and (best is None or found.cost < best.cost):
                best = found
        return best

    def _add_on(self, host: str, lease: RunningLease) -> Plan | None:
        req, group = self.req, self.group
        have = self.have.get(host)
        if have is None:
            have = self.have[host] = (self.pool.index.free_on(host, group)
                                      + self.pool.ending_on(host, group))
        if have >= req.gpus:
            return None  # already complete
        budget = self.budgets.get(host)
        if budget is None:
            budget = self.budgets[host] = self.budget(self.quota, req)
        if not budget.take(lease):
            return None
        chosen = self.chosen[host]
        chosen.append(lease)
        have = self.have[host] = have + lease.on(host, group)
        if have < req.gpus:
            return None
        free = have - sum(v.on(host, group) for v in chosen)
        victims = prune(chosen, req.gpus - free, lambda v: v.on(host, group))
        return Plan(group, host, victims, plan_cost(victims, free, req.gpus, host))


def _pool_wide(pool: PoolState, quota: QuotaBook, req: RequestView, group: Group,
               rule: Rule) -> Plan | None:
    have = pool.index.free_in(group) + pool.ending_in(group)
    chosen = _choose(rule.budget(quota, req), rule.candidates(), req.gpus - have,
                     lambda v: v.in_group(group))
    if chosen is None:
        return None
    return Plan(group, None, chosen, plan_cost(chosen, have, req.gpus, ""))


def _choose(budget: Budget, victims: Iterable[RunningLease], need: int,
            contrib: Callable[[RunningLease], int]) -> list[RunningLease] | None:
    """Greedy in victim order until `need` GPUs, then drop the victims that are not needed
    (latest chosen first, so the preferred victims stay). [] when nothing is needed."""
    if need <= 0:
        return []
    chosen: list[RunningLease] = []
    got = 0
    for lease in victims:
        gain = contrib(lease)
        if gain <= 0 or not budget.take(lease):
            continue
        chosen.append(lease)
        got += gain
        if got >= need:
            break
    if got < need:
        return None
    return prune(chosen, need, contrib)


def prune(chosen: list[RunningLease], need: int, contrib: Callable[[RunningLease], int],
          need_team: int = 0) -> list[RunningLease]:
    """Drop victims not needed to free `need` GPUs of the placement (and `need_team` of their
    team's GPUs), latest chosen first (preferred ones stay)."""
    got, team = sum(contrib(v) for v in chosen), sum(v.gpus for v in chosen)
    kept = list(chosen)
    for lease in reversed(chosen):
        if got - contrib(lease) >= need and team - lease.gpus >= need_team:
            kept.remove(lease)
            got -= contrib(lease)
            team -= lease.gpus
    return kept


def plan_cost(victims: list[RunningLease], have: int, gpus: int, host: str) -> tuple[float, ...]:
    if not victims:
        return (float("-inf"), 0, 0, 0, -have, 0)
    return (max(v.priority for v in victims), sum(1 for v in victims if not v.borrowed),
            len(victims), sum(v.gpus for v in victims), 0, 0)


def commit(pool: PoolState, quota: QuotaBook, req: RequestView, chosen: Plan,
           kind: str) -> tuple[list[Preemption], int, str]:
    """Start the plan: mark victims ending, hold the free GPUs of the placement for the
    requester, claim the ending GPUs it waits for, and promise the GPUs to its team. `kind` is
    the cause of preempting other teams' leases ("reclaim", "priority", "fair_share"); the
    requester's own team's leases are always stopped for priority.
    Returns (preemptions, GPUs still to be freed, reason for the requester)."""
    preemptions = []
    for victim in chosen.victims:
        pool.stopped.add(victim.lease_id)
        quota.add(quota.leaving, victim.team, pool.name, victim.gpus)
        pool.add_ending(victim)
        same_team = victim.team == req.team
        real_kind = "priority" if same_team else kind
        reason = chosen.reasons.get(victim.lease_id) or explain.preempted(
            real_kind, req, victim.priority, same_team=same_team)
        preemptions.append(Preemption(victim.lease_id, req.lease_id, reason, real_kind))
    index, group = pool.index, chosen.group
    if chosen.host is not None:
        blocks = [(chosen.host, kid, len(index.blocks[kid].get(chosen.host, ())))
                  for kid in group.kinds]
        hold = Placement(trim([b for b in blocks if b[2]], req.gpus), (0, 1, 0))
    else:
        spread = index.find([group], min(req.gpus, index.free_in(group)), False) \
            if index.free_in(group) else None
        hold = spread or Placement((), (0, 0, 0))
    held_ids = index.take(hold)
    if pool.claims is not None:  # time-sliced replicas held for it are its team's from now on
        pool.claims.claim(held_ids, req.team)
    waiting = req.gpus - len(held_ids)
    pool.claim_ending(chosen.host, group, waiting)
    quota.add(quota.promised, req.team, req.pool, req.gpus)
    if chosen.victims:
        reason = explain.waiting_for_preemption(waiting, [v.lease_id for v in chosen.victims],
                                                fair_share=kind == "fair_share")
    else:
        reason = explain.waiting_for_ending(waiting)
    return preemptions, waiting, reason
