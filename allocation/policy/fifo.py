"""The plain baseline: priority, then arrival order, per pool; the same admission gates,
matching and best-fit placement as the fair policy (so a team's hard limit is respected); no
guarantees-first ordering, no fair share, no preemption, no reservations. A request that does
not fit is skipped and the next one is tried (Kueue's BestEffortFIFO), so the baseline is not
crippled by head-of-line blocking. Used by `simulate --policy fifo` as the yardstick the fair
policy is measured against."""

from __future__ import annotations

from collections.abc import Sequence

from allocation.policy.gates import GateContext, admit
from allocation.policy.outcome import NoRoomReasons, PendingLog, grant
from allocation.policy.placement import FitMemo
from allocation.policy.state import PassState, build_pass, pending_by_pool, queue_order
from allocation.policy.types import Decisions, RequestView, Snapshot


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide one pass; every pending request ends up in `grants` or `pending`."""
    by_pool = pending_by_pool(snapshot)
    state = build_pass(snapshot, set(by_pool))
    decisions = Decisions()
    for name in sorted(by_pool):
        _FifoPool(state, name, decisions).run(by_pool[name])
    return decisions


class _FifoPool:
    def __init__(self, state: PassState, name: str, decisions: Decisions) -> None:
        self.pool = state.pool(name)
        self.quota = state.quota
        self.gates = GateContext.of(state, name)
        self.decisions = decisions
        self.pending = PendingLog(decisions.pending)
        self.fits = FitMemo()
        self.no_room = NoRoomReasons()

    def run(self, requests: Sequence[RequestView]) -> None:
        for req in sorted(requests, key=queue_order):
            self._consider(req)

    def _consider(self, req: RequestView) -> None:
        pool = self.pool
        groups = pool.index.groups_for(req) if pool is not None else ()
        refusal = admit(req, groups, self.gates)
        if refusal is not None:
            self.pending.add(req, refusal.message, unsatisfiable=refusal.unsatisfiable)
            return
        assert pool is not None  # a pool without GPUs matches nothing
        placement = self.fits.find(pool.index, req, groups)
        if placement is None:
            self.pending.add(req, self.no_room.reason(pool, req, groups))
            return
        self.decisions.grants.append(grant(pool, self.quota, req, placement))
