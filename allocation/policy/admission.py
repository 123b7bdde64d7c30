"""Admission at creation: what a new lease or advance reservation must pass before it is
written, answered from what its pool could ever offer rather than from what is free now.

The services build the views from rows (`allocation/services/placement.py`,
`allocation/services/reservations.py`) and turn a `Refusal` into the API's error; the rules are
the scheduling pass's own functions, so that each is written once:
- which GPUs a request matches: `matching.kind_eligible` (what the pool's capacity profile can
  tell: model, MIG profile, memory);
- the most GPUs one lease could ever get: `placement.capacity_bound` (the `fits_pool` gate);
- the team's limit: `gates.exceeds_limit` (the `team_limit` gate).
A rule of its own: a team's queue in a pool is capped (`QueueCaps`, `queue_full`), so that no
team can flood the queue every pass reconsiders.

A capacity profile row is one kind of GPU of the pool: (model, MIG profile, memory in MB, most
on one host, total), as `inventory.selectors.pool_capacity_profile` reads it.

Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from allocation.policy import explain
from allocation.policy.gates import Refusal, exceeds_limit
from allocation.policy.matching import Kind, kind_eligible
from allocation.policy.placement import Group, capacity_bound
from allocation.policy.types import RequestView, ReservationView

ProfileRow = tuple[str, str, int, int, int]


def profile_groups(profile: Sequence[ProfileRow], model: str, min_memory_mb: int = 0) -> tuple[Group, ...]:
    """The kinds of the profile a request for `model` (and at least `min_memory_mb`) may take,
    as groups of one kind each, their ids the rows' positions. A kind's most-on-one-host is its
    own: a host holding two kinds of one model counts each apart (the profile keeps no more)."""
    constraint = (model, min_memory_mb, "", "", "", "")
    groups = []
    for i, (name, mig, memory, most, total) in enumerate(profile):
        kind = Kind(name, mig, memory)
        if kind_eligible(kind, constraint, ""):
            groups.append(Group(kind.group_key, (i,), kind.label, False, total, most))
    return tuple(groups)


def admit_lease(req: RequestView, limit: int | None, profile: Sequence[ProfileRow]) -> Refusal | None:
    """Refuse a new lease that can never be granted: above its team's `limit` in the pool (None:
    none; `over_limit`), or larger than the matching capacity of one host (`same_host`) or of
    the pool (`unsatisfiable`). Both are final, so they are answered at once; the rest is the
    pass's."""
    if limit is not None and exceeds_limit(req.gpus, limit):
        return Refusal("over_limit", explain.over_limit_at_creation(req, limit), unsatisfiable=True)
    bound = capacity_bound(profile_groups(profile, req.model, req.min_memory_mb), req.same_host)
    if req.gpus > bound:
        return Refusal("unsatisfiable", explain.never_fits(req, bound), unsatisfiable=True)
    return None


@dataclass(frozen=True)
class QueueCaps:
    """A pool's caps on each team's queue there (`pools[].queue_caps`): how many of its leases
    may be pending at once, and how many GPUs they may ask for in all; None: no cap.

    The default, 1,000 pending leases and no cap on GPUs: every pass reconsiders every pending
    lease, so the number of leases is what a flood costs (a pass over 10,000 pending is what the
    engine is measured at: ten teams at their cap); a team may still ask for a pool's worth of
    GPUs in one lease, and the GPUs a queue asks for cost a pass nothing more. A team with a
    real need for more sets its pool's cap in the config."""

    pending_leases_per_team: int | None = 1000
    pending_gpus_per_team: int | None = None


DEFAULT_QUEUE_CAPS = QueueCaps()


def queue_full(caps: QueueCaps, gpus: int, pending_leases: int, pending_gpus: int) -> str | None:
    """The cap (its key in `QueueCaps`) that a new lease of `gpus` GPUs would go over, its team
    already having `pending_leases` pending in the pool, asking `pending_gpus` GPUs in all; None
    when it fits. The lease-create service counts under the team's queue lock, in the statement
    that writes the lease, which holds this rule's SQL twin (`allocation.services.queue_caps`);
    waiting (grants, releases) lifts it."""
    if caps.pending_leases_per_team is not None and pending_leases + 1 > caps.pending_leases_per_team:
        return "pending_leases_per_team"
    if caps.pending_gpus_per_team is not None and pending_gpus + gpus > caps.pending_gpus_per_team:
        return "pending_gpus_per_team"
    return None


def peak(windows: Iterable[ReservationView], start: float, end: float) -> int:
    """The most GPUs the reservations hold at one moment of [start, end): their sum is a step
    function that only rises at a start, so `start` and the starts inside the window are the
    moments to look at."""
    rows = [(w.start, w.end, w.gpus) for w in windows]
    moments = {start} | {s for s, _, _ in rows if start < s < end}
    return max((sum(n for s, e, n in rows if s <= t < e) for t in moments), default=0)


def admit_reservation(new: ReservationView, profile: Sequence[ProfileRow],
                      others: Callable[[], Sequence[ReservationView]],
                      limit: Callable[[], int | None]) -> Refusal | None:
    """Refuse a new reservation whose model no GPU of the pool matches (`no_match`); or that the
    matching capacity cannot take beside the other active reservations overlapping its window
    on those kinds, at their peak (`insufficient_capacity`); or that would take its team above
    its limit (None: none), counting its own overlapping reservations at their peak
    (`over_limit`). `others` gives the pool's active reservations overlapping [new.start,
    new.end), `limit` the team's limit in the pool: called only when the rules get that far, so
    that a refusal reads no more rows than it needs."""
    mine = _kinds(profile, new.model)
    if not mine:
        return Refusal("no_match", explain.no_model_to_reserve(new), unsatisfiable=True)
    capacity = sum(profile[kid][4] for kid in mine)
    overlapping = others()
    shares = {model: bool(_kinds(profile, model) & mine) for model in {o.model for o in overlapping}}
    taken = peak((o for o in overlapping if shares[o.model]), new.start, new.end)
    if taken + new.gpus > capacity:
        return Refusal("insufficient_capacity", explain.reservations_hold(new, capacity, taken))
    cap = limit()
    if cap is None:
        return None
    own = peak((o for o in overlapping if o.team == new.team), new.start, new.end)
    if exceeds_limit(new.gpus, cap, own):
        return Refusal("over_limit", explain.reservation_over_limit(new, cap, own))
    return None


def _kinds(profile: Sequence[ProfileRow], model: str) -> frozenset[int]:
    """The rows of the profile a reservation of `model` may use (any memory)."""
    return frozenset(kid for group in profile_groups(profile, model) for kid in group.kinds)
