"""One pool during one pass: the part both policies share. Requests pass the admission gates
(gates.py) before any search for room; grants take their GPUs from the free index and count
for their team; pending entries are numbered by queue position, and the "no room" reason most
of them share is worked out once per request shape and state of the index."""

from __future__ import annotations

from collections.abc import Sequence

from allocation.policy import explain
from allocation.policy.codes import PendingCode
from allocation.policy.fit_memo import FitMemo
from allocation.policy.gates import GateContext, Refusal, admit
from allocation.policy.placement import Exclusions, Group, Placement
from allocation.policy.reservations import Holds
from allocation.policy.state import PassState, PoolState
from allocation.policy.topo_place import TopologyFits, refused_for_topology
from allocation.policy.types import Decisions, Grant, Pending, RequestView


class PendingLog:
    """The pending entries of one pool, numbered in the order they are decided: the queue
    position the user sees (1 is next)."""

    __slots__ = ("items", "position")

    def __init__(self, items: list[Pending]) -> None:
        self.items = items  # Decisions.pending, shared by every pool of the pass
        self.position = 0  # entries of this pool so far

    def add(self, req: RequestView, code: PendingCode, reason: str, *, unsatisfiable: bool = False) -> None:
        self.position += 1
        self.items.append(Pending(req.lease_id, code, reason, self.position, None, unsatisfiable))


class NoRoomReasons:
    """`explain.no_room`, remembered per request shape and state of the free index: between two
    grants, the many requests of one shape waiting in a pool read the same reason."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[tuple[object, ...], str] = {}

    def reason(self, pool: PoolState, req: RequestView, groups: Sequence[Group]) -> str:
        # A groups tuple is cached per constraint while the index version stands (a new one
        # comes only with a change of the index): its identity is a key.
        key = (req.gpus, req.same_host, req.model, id(groups), pool.index.version)
        reason = self._reasons.get(key)
        if reason is None:
            if len(self._reasons) > 4096:
                self._reasons.clear()
            reason = self._reasons[key] = explain.no_room(req, pool.index, groups)
        return reason


class PoolPass:
    """A policy's work on one pool in one pass; subclasses decide what to do with a request
    that passes the gates."""

    def __init__(self, state: PassState, name: str, decisions: Decisions) -> None:
        self.name = name
        self.pool = state.pool(name)
        self.quota = state.quota
        self.gates = GateContext.of(state, name)
        self.decisions = decisions
        self.pending = PendingLog(decisions.pending)
        # Shapes that did not fit, for the rest of the pass; placements honour the topology.
        self.fits = FitMemo() if self.pool.topology is None else TopologyFits(self.pool.topology)
        self.no_room = NoRoomReasons()
        # Advance reservations of the pool; None (nothing to check) when it has none.
        self.holds = Holds.of(state.snapshot, self.pool) if state.snapshot.reservations else None

    def admitted(self, req: RequestView) -> tuple[Group, ...] | None:
        """The request's eligible GPU groups when it passes every gate; None when one refuses
        it, and it is then pending with that gate's reason."""
        groups = self.pool.index.groups_for(req)
        refusal = admit(req, groups, self.gates)
        if refusal is None:
            return groups
        self.refused(req, groups, refusal)
        return None

    def refused(self, req: RequestView, groups: tuple[Group, ...], refusal: Refusal) -> None:
        """A gate refused `req`: it stays pending with the gate's reason. A policy may first
        look for a way round a refusal that waiting alone would not lift (fair: a team at its
        limit preempting its own lower-priority leases)."""
        self.pending.add(req, PendingCode(refusal.code), refusal.message, unsatisfiable=refusal.unsatisfiable)

    def clear_of_holds(self, req: RequestView, groups: Sequence[Group], placement: Placement,
                       exclude: Exclusions | None = None) -> Placement | None:
        """`placement`, or one that keeps every advance reservation `req` must respect (found
        clear of the kinds of those it would break, on top of `exclude`); None, and `req`
        pending with the reservation's reason, when there is none. Call only with holds."""
        holds = self.holds
        assert holds is not None
        broken = holds.broken(req, placement)
        while broken is not None:
            exclude = holds.exclude(broken, exclude)
            found = self.fits.find(self.pool.index, req, groups, exclude)
            if found is None:
                self.pending.add(req, PendingCode.RESERVATION, holds.reason(req, broken))
                return None
            placement, broken = found, holds.broken(req, found)
        return placement

    def no_room_of(self, req: RequestView, groups: Sequence[Group]) -> tuple[PendingCode, str]:
        """Why `req` does not fit now: its required topology when the blind placement would fit
        it, else no capacity."""
        if refused_for_topology(self.pool.index, req, groups, self.pool.topology):
            return PendingCode.TOPOLOGY, explain.topology(req)
        return PendingCode.NO_CAPACITY, self.no_room.reason(self.pool, req, groups)

    def grant(self, req: RequestView, placement: Placement) -> Grant:
        """Take the placement's GPUs for `req`, count them for its team and record the grant.
        Time-sliced replicas share a physical GPU without isolation: unless the pool shares
        them across teams, the replicas left on those GPUs go to its team only."""
        gpu_ids = self.pool.index.take(placement)
        if self.pool.claims is not None:
            self.pool.claims.claim(gpu_ids, req.team)
        borrowed = self.quota.grant(req.team, self.name, req.gpus)
        if self.holds is not None:
            self.holds.granted(req.team, placement)
        decision = Grant(req.lease_id, tuple(sorted(gpu_ids)), placement.host, borrowed)
        self.decisions.grants.append(decision)
        return decision
