"""Advance reservations: GPUs of a pool kept for one team over a window (`ReservationView`).

Not to be confused with backfill's reservations (backfill.py), which a blocked head makes for
itself within a pass; these come from users, through the snapshot, and last for their window.

A reservation holds a *number* of GPUs of the kinds its model matches, not particular GPUs, so
it strands nothing: any free GPU of those kinds will do when its window begins. Per pool and
pass, `Holds.of` works out how many each one still keeps (`Hold.held`):
- before its start, all of them (`gpus`): a lease that would outlive the start may not take
  them, one known to end by then (`expected_duration_s`) may (backfill);
- during its window, `gpus` less what the team already holds of those kinds (leases granted
  before the window count toward it), less what this pass grants the team there.
The rule, for a request of another team whose lease would still run at a reservation's start:
for every kind set K of such a reservation, taking its placement must leave free GPUs of K at
least the GPUs still held by the reservations on K or on a subset of K. A placement that breaks
it is looked for again clear of those kinds, else the request waits with the reservation's
reason. The owner's requests are not held back by its own reservation; during the window the
fair policy serves them first from the held kinds (`_FairPass._reserved_first`).

Cost: a pool with no reservation in the snapshot has no `Holds` (None), and every check is one
attribute test.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from allocation.policy import explain
from allocation.policy.placement import Exclusions, Group, Placement
from allocation.policy.state import PoolState
from allocation.policy.types import RequestView, ReservationView, Snapshot


@dataclass(eq=False, slots=True)
class Hold:
    """One reservation in one pass: the kinds it may use and how many GPUs it still keeps."""

    view: ReservationView
    kinds: frozenset[int]
    label: str  # the model of its GPUs, for reasons
    held: int
    active: bool  # its window has begun


class Holds:
    """The reservations of one pool during one pass (see the module docstring)."""

    def __init__(self, pool: PoolState, holds: list[Hold], now: float) -> None:
        self.pool = pool
        self.holds = holds
        self.now = now

    @classmethod
    def of(cls, snapshot: Snapshot, pool: PoolState) -> Holds | None:
        """None when no reservation of the snapshot concerns the pool (the common case)."""
        views = [r for r in snapshot.reservations if r.pool == pool.name and r.end > snapshot.now]
        if not views:
            return None
        holds = []
        for view in sorted(views, key=lambda r: (r.start, r.reservation_id)):
            probe = RequestView(f"reservation {view.reservation_id}", view.team, view.pool,
                                view.gpus, model=view.model, same_host=False)
            groups = pool.index.groups_for(probe)
            kinds = frozenset(kid for group in groups for kid in group.kinds)
            label = groups[0].label if groups else (view.model or "any model")
            holds.append(Hold(view, kinds, label, view.gpus, view.start <= snapshot.now))
        _count_owners(pool, holds)
        return cls(pool, holds, snapshot.now)

    def _against(self, req: RequestView) -> list[Hold]:
        """The holds `req` must respect: another team's, still holding GPUs, whose start the
        lease would outlive (an unknown duration outlives everything)."""
        ends = math.inf if req.expected_duration_s is None else self.now + req.expected_duration_s
        return [h for h in self.holds
                if h.held > 0 and h.view.team != req.team and h.view.start < ends]

    def broken(self, req: RequestView, placement: Placement) -> Hold | None:
        """The first hold that granting `placement` to `req` would break; None when it keeps
        them all."""
        against = self._against(req)
        if not against:
            return None
        taken: dict[int, int] = defaultdict(int)
        for _, kid, count in placement.blocks:
            taken[kid] += count
        free_total = self.pool.index.free_total
        for hold in against:
            take = sum(taken.get(kid, 0) for kid in hold.kinds)
            if not take:
                continue
            need = sum(o.held for o in against if o.kinds <= hold.kinds)
            free = sum(free_total.get(kid, 0) for kid in hold.kinds)
            if free - take < need:
                return hold
        return None

    @staticmethod
    def exclude(hold: Hold, exclude: Exclusions | None) -> Exclusions:
        """`exclude` with every kind of `hold` left out."""
        out = dict(exclude or {})
        out.update(dict.fromkeys(hold.kinds))
        return out

    def reason(self, req: RequestView, hold: Hold) -> str:
        free = sum(self.pool.index.free_total.get(kid, 0) for kid in hold.kinds)
        return explain.reserved(req, hold.view, hold.label, min(hold.held, free), hold.active)

    def granted(self, team: str, placement: Placement) -> None:
        """A grant to `team`: what it takes of its own active reservations' kinds counts
        toward them."""
        for hold in self.holds:
            if hold.active and hold.held > 0 and hold.view.team == team:
                got = sum(count for _, kid, count in placement.blocks if kid in hold.kinds)
                hold.held = max(0, hold.held - got)

    def serving(self) -> list[Hold]:
        """The reservations in their window that still keep GPUs, earliest first."""
        return [h for h in self.holds if h.active and h.held > 0]

    def only(self, hold: Hold, groups: Sequence[Group]) -> Exclusions:
        """Exclusions keeping a placement on `hold`'s kinds."""
        return {kid: None for group in groups for kid in group.kinds if kid not in hold.kinds}


def _count_owners(pool: PoolState, holds: list[Hold]) -> None:
    """During its window, what the team already holds of a reservation's kinds counts toward
    it (shared out over the team's reservations, earliest first, never counted twice)."""
    active = [h for h in holds if h.active]
    if not active:
        return
    teams = {h.view.team for h in active}
    owned: dict[tuple[str, int], int] = defaultdict(int)
    for lease in pool.leases:
        if lease.team in teams and not lease.ending:
            for (_, kid), count in lease.blocks.items():
                owned[(lease.team, kid)] += count
    for hold in active:
        for kid in sorted(hold.kinds):
            use = min(owned[(hold.view.team, kid)], hold.held)
            owned[(hold.view.team, kid)] -= use
            hold.held -= use
