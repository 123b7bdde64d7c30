"""The plain baseline: priority, then arrival order, per pool; the same admission gates,
matching and best-fit placement as the fair policy (so a team's hard limit is respected); no
guarantees-first ordering, no fair share, no preemption, no backfill reservations (advance
reservations are kept: a user's booking is a rule, like a limit). A request that does
not fit is skipped and the next one is tried (Kueue's BestEffortFIFO), so the baseline is not
crippled by head-of-line blocking. Used by `simulate --policy fifo` as the yardstick the fair
policy is measured against."""

from __future__ import annotations

from collections.abc import Sequence

from allocation.policy.placement import Group
from allocation.policy.poolpass import PoolPass
from allocation.policy.state import build_pass, pending_by_pool, queue_order
from allocation.policy.types import Decisions, RequestView, Snapshot


def schedule(snapshot: Snapshot, *, force_tree: bool = False) -> Decisions:
    """Decide one pass; every pending request ends up in `grants` or `pending`. `force_tree`:
    the team-tree code path on a flat snapshot too (tests: it must decide the same)."""
    by_pool = pending_by_pool(snapshot)
    state = build_pass(snapshot, set(by_pool), force_tree=force_tree)
    decisions = Decisions()
    for name in sorted(by_pool):
        _FifoPass(state, name, decisions).run(by_pool[name])
    return decisions


class _FifoPass(PoolPass):
    def run(self, requests: Sequence[RequestView]) -> None:
        for req in sorted(requests, key=queue_order):
            groups = self.admitted(req)
            if groups is not None:
                self._place(req, groups)

    def _place(self, req: RequestView, groups: Sequence[Group]) -> None:
        placement = self.fits.find(self.pool.index, req, groups)
        if placement is not None and self.holds is not None:
            placement = self.clear_of_holds(req, groups, placement)
            if placement is None:
                return
        if placement is None:
            self.pending.add(req, *self.no_room_of(req, groups))
        else:
            self.grant(req, placement)
