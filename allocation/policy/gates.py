"""Admission gates: the rules a pending request must pass before a policy looks for room.

Both policies (fair, fifo) run the same ordered list, `GATES`, on every request of a pass; the
first gate that refuses decides what the user reads, and the request stays pending (or, where
`Refusal.unsatisfiable`, may be failed by the engine: waiting cannot help). A request that
passes every gate is one the pool could serve: whether it fits now, waits for ending leases,
preempts or reserves is the policy's business (placement, preemption, backfill).

A gate is `gate(req, groups, ctx) -> Refusal | None`:
- `req`: the pending request;
- `groups`: its eligible GPU groups in the pool (model, MIG profile, memory, driver, CUDA,
  time-slicing), looked up once by the caller and cached per constraint; () when none match or
  the pool has no schedulable GPU;
- `ctx`: the pool's `GateContext`, built once per pool and pass.

Gates run for every pending request (thousands per pass): a gate reads what the context
precomputed and allocates nothing unless it refuses. Adding a rule: see README.md, "Admission
gates".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from allocation.policy import explain
from allocation.policy.codes import PendingCode
from allocation.policy.gates_tree import TreeLending, TreeLimits, capacity_quota
from allocation.policy.placement import FreeIndex, Group, capacity_bound
from allocation.policy.quota import QuotaBook
from allocation.policy.state import PassState, definitive
from allocation.policy.types import RequestView


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a gate keeps a request pending. `code` is stable: in a pass, a `PendingCode` (codes.py)
    the lease stores and the API and metrics read; at creation (admission.py), the API error's
    code. `message` is the reason the user reads (explain.py); `unsatisfiable`: waiting cannot
    help."""

    code: str
    message: str
    unsatisfiable: bool = False


Gate = Callable[[RequestView, Sequence[Group], "GateContext"], Refusal | None]


@dataclass(slots=True)
class Lending:
    """What the `lending_limit` gate reads of one pool, built once per pass and only for a pool
    where some team lends less than its whole guarantee.

    `capacity` is max(C, ΣG): the pool's schedulable GPUs C (capacity units: a time-sliced
    replica is one) or, where guarantees add up to more, their sum, as Kueue counts quota rather
    than machines. `unlent` holds ((team, pool), guaranteed, lending limit) of the teams whose lending
    limit is below their guarantee: only they can keep idle GPUs back. `keys` are the (team,
    pool) of the teams whose held and promised GPUs count here: the quota holders and the teams
    holding GPUs there when the pass began; a team joins when its first request reaches the
    gate, before it can be granted or promised anything."""

    capacity: int
    guaranteed: Mapping[str, int]
    unlent: tuple[tuple[tuple[str, str], int, int], ...]
    keys: list[tuple[str, str]]
    counted: set[tuple[str, str]]  # the keys, to look up
    # The most the teams could ever keep back, Σ (guaranteed - lending limit): a request that
    # fits in what nobody holds less this passes without looking at who keeps what.
    kept_most: int = 0
    tree: TreeLending | None = None  # with a team tree: lending limits at each level

    @classmethod
    def of(cls, state: PassState, pool: str) -> Lending | None:
        """None, and the gate costs nothing, when every team of the pool lends all its guarantee."""
        in_pool = [q for (_, name), q in state.quota.quotas.items() if name == pool]
        unlent = tuple(((q.team, pool), q.guaranteed, q.lending_limit) for q in in_pool
                       if q.lending_limit is not None and q.lending_limit < q.guaranteed)
        if not unlent:
            return None
        capacity = sum(len(ids) for hosts in state.pool(pool).index.layout.capacity.values()
                       for ids in hosts.values())
        guaranteed = {q.team: q.guaranteed for q in in_pool}
        book = state.quota
        keys = {(team, pool) for team in guaranteed}
        keys.update(key for key in (*book.held, *book.promised) if key[1] == pool)
        tree = book.tree
        if tree is not None:  # a department's counts are its teams': count the teams only
            keys = {key for key in keys if not tree.is_parent(key[0])}
        return cls(max(capacity, capacity_quota(tree, in_pool)), guaranteed, unlent, sorted(keys),
                   keys, sum(g - limit for _, g, limit in unlent),
                   None if tree is None else TreeLending.of(tree, pool, in_pool))

    def join(self, key: tuple[str, str]) -> None:
        if key not in self.counted:
            self.counted.add(key)
            self.keys.append(key)

    def in_use(self, quota: QuotaBook) -> int:
        """GPUs held or promised in the pool, every team together. Mapped in C over the keys:
        it is read for every borrowing request, and the book changes as the pass goes."""
        return sum(map(quota.held.__getitem__, self.keys)) + sum(
            map(quota.promised.__getitem__, self.keys))


@dataclass(frozen=True, slots=True)
class GateContext:
    """What the gates read, computed once per pool and pass (never per request)."""

    pool: str
    index: FreeIndex
    quota: QuotaBook  # changes during the pass (grants, promises): read it, never copy it
    # "No GPU could ever match" is final: no GPU of the pool is out of service and might return.
    definitive: bool
    limits: Mapping[str, int]  # team -> its limit in this pool; teams without one are absent
    lending: Lending | None = None  # None: every team of the pool lends all its guarantee
    tree_limits: TreeLimits | None = None  # with a team tree: the limits up each team's chain

    @classmethod
    def of(cls, state: PassState, pool: str) -> GateContext:
        pool_state = state.pool(pool)
        limits = state.quota.limits_in(pool)
        tree = state.quota.tree
        return cls(pool, pool_state.index, state.quota, definitive(pool_state), limits,
                   Lending.of(state, pool), None if tree is None else TreeLimits(tree, limits))


def asks_for_gpus(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """A request for no GPUs can never be granted."""
    if req.gpus <= 0:
        return Refusal(PendingCode.NO_GPUS, explain.NO_GPUS, unsatisfiable=True)
    return None


def gpus_match(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """Some schedulable GPU of the pool meets the model, MIG, memory, driver and CUDA
    constraints (and, for time-sliced replicas, is not another team's). The reason names the
    first constraint that excludes them all."""
    if not groups:
        return Refusal(*explain.no_match(req, ctx.index), ctx.definitive)
    return None


def fits_pool(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The request is no larger than the matching GPUs of one host (same host) or of the pool,
    counting busy GPUs too."""
    if req.gpus > capacity_bound(groups, req.same_host):
        return Refusal(PendingCode.TOO_BIG, explain.too_big(req, groups), ctx.definitive)
    return None


def team_limit(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The team's limit in the pool: a request above it can never be granted; one that would
    take the team above it (counting ending leases, which still hold their GPUs, and GPUs
    promised to it in this pass) waits. On `at_limit` the fair policy may still preempt the
    team's own lower-priority leases for it (`PoolPass.refused`, `preemption_team.plan_within_team`).
    With a team tree, each department above the team caps what its teams hold together."""
    if ctx.tree_limits is not None:
        return _tree_limits(req, ctx, ctx.tree_limits)
    limit = ctx.limits.get(req.team)
    if limit is None:
        return None
    if exceeds_limit(req.gpus, limit):
        return Refusal(PendingCode.OVER_LIMIT, explain.over_limit(req, limit), unsatisfiable=True)
    holds = ctx.quota.holds(req.team, ctx.pool)
    if exceeds_limit(req.gpus, limit, holds):
        return Refusal(PendingCode.AT_LIMIT, explain.at_limit(req, limit, holds))
    return None


def _tree_limits(req: RequestView, ctx: GateContext, limits: TreeLimits) -> Refusal | None:
    """`team_limit` up the tree: the team's own limit, then each ancestor's (rolled-up holds)."""
    chain = limits.of(req.team)
    for node, limit in chain:
        if exceeds_limit(req.gpus, limit):
            message = (explain.over_limit(req, limit) if node == req.team
                       else explain.over_parent_limit(req, node, limit))
            return Refusal(PendingCode.OVER_LIMIT, message, unsatisfiable=True)
    for node, limit in chain:
        holds = ctx.quota.holds(node, ctx.pool)
        if exceeds_limit(req.gpus, limit, holds):
            message = (explain.at_limit(req, limit, holds) if node == req.team
                       else explain.at_parent_limit(req, node, limit, holds))
            return Refusal(PendingCode.AT_LIMIT, message)
    return None


def exceeds_limit(gpus: int, limit: int, holds: int = 0) -> bool:
    """The team-limit rule: `gpus` more, on top of the `holds` the team already has (or has
    reserved) in the pool, would take it above its `limit` there. The `team_limit` gate and
    admission at creation (admission.py: leases, reservations) ask it."""
    return holds + gpus > limit


def lending_limit(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """Kueue's lendingLimit, per pool: a team lends others at most `lending_limit` of the
    guarantee it leaves idle; the rest stays free for it. A request that would take its team
    above its guarantee is refused while granting it would leave fewer unheld GPUs (counted
    against max(C, ΣG), held and promised GPUs of every team taken off) than the other teams
    keep back: Σ max(0, guaranteed − holds − lending limit). That is Kueue's rule, borrowing ≤
    max(0, C − ΣG) + Σ min(lending limit, idle guarantee), after the grant. A request within
    its guarantee always passes (guarantees stay reachable), and so does every request while no
    other team keeps idle GPUs back. Waiting can lift it (those teams' own use, or leases
    ending): never final."""
    lending = ctx.lending
    if lending is None:
        return None
    quota, pool = ctx.quota, ctx.pool
    lending.join((req.team, pool))  # from now on it may hold GPUs here: count them
    free = lending.capacity - lending.in_use(quota)
    if req.gpus <= free - lending.kept_most or quota.within_guarantee(req.team, pool, req.gpus):
        return None
    held, promised = quota.held, quota.promised
    if lending.tree is not None:
        kept = lending.tree.kept_from(req.team, quota)
    else:
        kept = [(key[0], guaranteed - limit - holds, guaranteed, limit)
                for key, guaranteed, limit in lending.unlent
                if key[0] != req.team and (holds := held[key] + promised[key]) < guaranteed - limit]
    if not kept:
        return None
    room = free - sum(k[1] for k in kept)
    if req.gpus <= room:
        return None
    holds, guaranteed = quota.holds(req.team, pool), lending.guaranteed.get(req.team, 0)
    borrows = holds + req.gpus - max(guaranteed, holds)
    may_lend = max(0, room - max(0, guaranteed - holds))  # its own idle guarantee is not lent
    return Refusal(PendingCode.LENDING_LIMIT, explain.lending_limit(req, borrows, guaranteed, may_lend, kept))


# In order: the first refusal is the reason the user reads, so a rule that cannot change by
# waiting goes before one that can.
GATES: tuple[Gate, ...] = (asks_for_gpus, gpus_match, fits_pool, team_limit, lending_limit)


def admit(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The first refusal of `GATES`, in order, or None when `req` passes them all."""
    for gate in GATES:
        refusal = gate(req, groups, ctx)
        if refusal is not None:
            return refusal
    return None
