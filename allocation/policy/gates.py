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
from allocation.policy.placement import FreeIndex, Group, capacity_bound
from allocation.policy.quota import QuotaBook
from allocation.policy.state import PassState, definitive
from allocation.policy.types import RequestView


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a gate keeps a request pending. `code` is stable (tests, metrics); `message` is the
    reason the user reads (explain.py); `unsatisfiable`: waiting cannot help."""

    code: str
    message: str
    unsatisfiable: bool = False


Gate = Callable[[RequestView, Sequence[Group], "GateContext"], Refusal | None]


@dataclass(frozen=True, slots=True)
class GateContext:
    """What the gates read, computed once per pool and pass (never per request)."""

    pool: str
    index: FreeIndex
    quota: QuotaBook  # changes during the pass (grants, promises): read it, never copy it
    # "No GPU could ever match" is final: no GPU of the pool is out of service and might return.
    definitive: bool
    limits: Mapping[str, int]  # team -> its limit in this pool; teams without one are absent

    @classmethod
    def of(cls, state: PassState, pool: str) -> GateContext:
        pool_state = state.pool(pool)
        return cls(pool, pool_state.index, state.quota, definitive(pool_state),
                   state.quota.limits_in(pool))


def asks_for_gpus(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """A request for no GPUs can never be granted."""
    if req.gpus <= 0:
        return Refusal("no_gpus", explain.NO_GPUS, unsatisfiable=True)
    return None


def gpus_match(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """Some schedulable GPU of the pool meets the model, MIG, memory, driver and CUDA
    constraints (and, for time-sliced replicas, is not another team's). The reason names the
    first constraint that excludes them all."""
    if not groups:
        return Refusal("no_match", explain.no_match(req, ctx.index), ctx.definitive)
    return None


def fits_pool(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The request is no larger than the matching GPUs of one host (same host) or of the pool,
    counting busy GPUs too."""
    if req.gpus > capacity_bound(groups, req.same_host):
        return Refusal("too_big", explain.too_big(req, groups), ctx.definitive)
    return None


def team_limit(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The team's limit in the pool: a request above it can never be granted; one that would
    take the team above it (counting ending leases, which still hold their GPUs, and GPUs
    promised to it in this pass) waits. On `at_limit` the fair policy may still preempt the
    team's own lower-priority leases for it (`PoolPass.refused`, `preemption_team.plan_within_team`)."""
    limit = ctx.limits.get(req.team)
    if limit is None:
        return None
    if req.gpus > limit:
        return Refusal("over_limit", explain.over_limit(req, limit), unsatisfiable=True)
    holds = ctx.quota.holds(req.team, ctx.pool)
    if holds + req.gpus > limit:
        return Refusal("at_limit", explain.at_limit(req, limit, holds))
    return None


# In order: the first refusal is the reason the user reads, so a rule that cannot change by
# waiting goes before one that can.
GATES: tuple[Gate, ...] = (asks_for_gpus, gpus_match, fits_pool, team_limit)


def admit(req: RequestView, groups: Sequence[Group], ctx: GateContext) -> Refusal | None:
    """The first refusal of `GATES`, in order, or None when `req` passes them all."""
    for gate in GATES:
        refusal = gate(req, groups, ctx)
        if refusal is not None:
            return refusal
    return None
