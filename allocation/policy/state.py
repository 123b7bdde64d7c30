"""The in-memory state of one pass, built from a Snapshot and shared by the fair and fifo
policies: per pool, the index of free GPUs, the running leases by host, the GPUs being freed by
ending leases, and the quota book. Everything here is mutated only during the pass."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from allocation.policy.freebase import FreeBase
from allocation.policy.matching import Kind, Layout, PoolLayout, layout_of
from allocation.policy.placement import FreeIndex, Group
from allocation.policy.quota import QuotaBook
from allocation.policy.running import RunningTotals
from allocation.policy.timeslice import ReplicaClaims, claims_for
from allocation.policy.topology import TopologyView
from allocation.policy.tree import Tree
from allocation.policy.types import RequestView, RunningView, Snapshot


@dataclass(eq=False)
class RunningLease:
    """A running lease (or one granted earlier in this pass), as the policy sees it. Never
    changed once made (leases stopped in a pass are in `PoolState.stopped`), so the views of a
    snapshot's leases are memoised per layout across passes."""

    lease_id: str
    team: str
    pool: str
    gpus: int
    priority: int = 0
    preemptible: bool = False
    granted_at: float = 0.0
    borrowed: bool = False
    min_runtime_s: float = 0.0
    expected_end: float | None = None
    ending: bool = False
    # (host, kind id) -> number of the lease's schedulable GPUs there.
    blocks: dict[tuple[str, int], int] = field(default_factory=dict)
    hosts: tuple[str, ...] = field(init=False, default=())  # the hosts of `blocks`, in order

    def __post_init__(self) -> None:
        self.hosts = tuple(dict.fromkeys(h for h, _ in self.blocks))

    @classmethod
    def of(cls, run: RunningView, blocks: dict[tuple[str, int], int]) -> RunningLease:
        return cls(run.lease_id, run.team, run.pool, len(run.gpu_ids), run.priority,
                   run.preemptible, run.granted_at, run.borrowed, run.min_runtime_s,
                   run.expected_end, run.ending, blocks)

    def on(self, host: str, group: Group) -> int:
        """The lease's GPUs of the group's kinds on `host`."""
        if len(group.kinds) == 1:
            return self.blocks.get((host, group.kinds[0]), 0)
        return sum(self.blocks.get((host, kid), 0) for kid in group.kinds)

    def in_group(self, group: Group) -> int:
        kinds = set(group.kinds)
        return sum(n for (_, kid), n in self.blocks.items() if kid in kinds)


class PoolState:
    """One pool during one pass. The per-lease views (by host, GPUs being freed) are built on
    first need: most passes grant or refuse without looking at running leases one by one."""

    def __init__(self, name: str, index: FreeIndex, runs: list[RunningView],
                 where: dict[int, tuple[str, str, int]], now: float,
                 totals: RunningTotals | None) -> None:
        self.name = name
        self.index = index
        self.runs = runs
        self.where = where
        self.now = now
        if totals is not None:  # kept up to date across passes: no need to look at every lease
            self.ending_gpus = totals.ending.get(name, 0)
            self.preemptible_runs: list[RunningView] | None = list(
                totals.preemptible.get(name, {}).values())
        else:
            self.ending_gpus = sum(len(run.gpu_ids) for run in runs if run.ending)
            self.preemptible_runs = None
        self.has_ending = self.ending_gpus > 0
        # Which team uses each time-sliced GPU (None: no replica here serves one team only).
        self.claims: ReplicaClaims | None = None
        self.topology: TopologyView | None = None  # the snapshot's, when it has one
        self._preemptible: dict[str, tuple[list[int], list[int]]] | None = None
        self._mature: dict[str, int] | None = None
        self._victim_hosts: dict[tuple[int, frozenset[str]], dict[str, int]] = {}
        self._victim_room: dict[tuple[int, frozenset[str], int, int], int] = {}
        # Running leases in victim order, sorted once per pass on first need (preemption.py).
        self.victim_order: list[RunningLease] | None = None
        self.fresh: list[RunningLease] = []  # granted in this pass: never victims
        self.stopped: set[str] = set()  # leases preempted in this pass
        self._leases: list[RunningLease] | None = None
        self._by_host: dict[str, list[RunningLease]] = defaultdict(list)
        # GPUs of ending leases no waiting request has claimed yet, by (host, kind id).
        self._ending_free: dict[tuple[str, int], int] = defaultdict(int)
        self._ending_unclaimed = 0  # their sum, kept up to date: asked for every waiting request

    def _build(self) -> list[RunningLease]:
        leases: list[RunningLease] = []
        by_host, ending_free = self._by_host, self._ending_free
        memo = self.index.layout.leases
        for run in self.runs:
            hit = memo.get(id(run))  # inline: a pass over an unchanged fleet only hits
            lease = hit[1] if hit is not None and hit[0] is run else self._view(run)
            leases.append(lease)
            for host in lease.hosts:
                by_host[host].append(lease)
            if lease.ending:
                for key, count in lease.blocks.items():
                    ending_free[key] += count
                    self._ending_unclaimed += count
        for lease in self.fresh:
            for host in lease.hosts:
                by_host[host].append(lease)
        self._leases = leases
        return leases

    def _view(self, run: RunningView) -> RunningLease:
        """The policy's view of a running lease: its schedulable GPUs of this pool by host and
        kind. Kept in the layout's memo under the identity of the (frozen) RunningView, where
        `_build` looks first."""
        memo = self.index.layout.leases
        capacity = self.index.capacity
        blocks: dict[tuple[str, int], int] = {}
        for gid in run.gpu_ids:
            loc = self.where.get(gid)
            if loc is not None and loc[0] == run.pool and loc[2] in capacity:
                blocks[(loc[1], loc[2])] = blocks.get((loc[1], loc[2]), 0) + 1
        lease = RunningLease.of(run, blocks)
        if len(memo) > 200_000:
            memo.clear()
        memo[id(run)] = (run, lease)
        return lease

    @property
    def leases(self) -> list[RunningLease]:
        """Running leases of the snapshot (not those granted in this pass)."""
        return self._leases if self._leases is not None else self._build()

    @property
    def by_host(self) -> dict[str, list[RunningLease]]:
        """Running leases by host, including those granted in this pass."""
        if self._leases is None:
            self._build()
        return self._by_host

    @property
    def ending_free(self) -> dict[tuple[str, int], int]:
        if self._leases is None:
            self._build()
        return self._ending_free

    def any_ending_free(self) -> bool:
        if self._leases is None:
            return self.has_ending
        return self._ending_unclaimed > 0

    def add_ending(self, lease: RunningLease) -> None:
        """`lease` was told to stop in this pass: its GPUs are being freed, unclaimed yet."""
        ending = self.ending_free
        for key, count in lease.blocks.items():
            ending[key] += count
            self._ending_unclaimed += count

    def _preemptible_by_team(self) -> dict[str, tuple[list[int], list[int]]]:
        """Per team, the priorities (sorted) and cumulative GPUs of its leases preemptible now."""
        if self._preemptible is None:
            items: dict[str, list[tuple[int, int]]] = defaultdict(list)
            candidates = self.preemptible_runs if self.preemptible_runs is not None else self.runs
            for run in candidates:
                if (run.preemptible and not run.ending
                        and run.granted_at + run.min_runtime_s <= self.now):
                    items[run.team].append((run.priority, len(run.gpu_ids)))
            self._preemptible = {}
            for team, pairs in items.items():
                pairs.sort()
                self._preemptible[team] = ([p for p, _ in pairs],
                                           list(accumulate(n for _, n in pairs)))
        return self._preemptible

    def mature_gpus(self, team: str) -> int:
        """GPUs of the team's leases that are past their minimum runtime and not ending."""
        if self._mature is None:
            self._mature = defaultdict(int)
            for run in self.runs:
                if not run.ending and run.granted_at + run.min_runtime_s <= self.now:
                    self._mature[run.team] += len(run.gpu_ids)
        return self._mature.get(team, 0)

    def preemptible_below(self, team: str, priority: int) -> int:
        """GPUs of the team's leases preemptible now with a priority strictly below `priority`."""
        hit = self._preemptible_by_team().get(team)
        if hit is None:
            return 0
        i = bisect_left(hit[0], priority)
        return hit[1][i - 1] if i else 0

    def victim_gpus_by_host(self, priority: int, reclaim_from: frozenset[str]) -> dict[str, int]:
        """GPUs per host of the leases that could be victims of a request of `priority` (an
        upper bound: preemptible now and lower, or any mature lease of a team in
        `reclaim_from`), without building the per-lease views."""
        key = (priority, reclaim_from)
        hit = self._victim_hosts.get(key)
        if hit is not None:
            return hit
        out: dict[str, int] = defaultdict(int)
        where, now = self.where, self.now
        for run in self.runs:
            if run.ending or run.granted_at + run.min_runtime_s > now:
                continue
            if (run.preemptible and run.priority < priority) or run.team in reclaim_from:
                for gid in run.gpu_ids:
                    loc = where.get(gid)
                    if loc is not None:
                        out[loc[1]] += 1
        self._victim_hosts[key] = out
        return out

    def victim_room(self, priority: int, reclaim_from: frozenset[str],
                    groups: Sequence[Group]) -> int:
        """The most GPUs of one group one host could give a same-host request of `priority`:
        its free GPUs and those of its possible victims (an upper bound, as in
        `victim_gpus_by_host`). Remembered while the free index stands: the requests waiting
        behind a full pool ask it again and again."""
        # A groups tuple is cached per constraint while the index version stands.
        key = (priority, reclaim_from, id(groups), self.index.version)
        room = self._victim_room.get(key)
        if room is None:
            if len(self._victim_room) > 4096:
                self._victim_room.clear()
            index = self.index
            room = self._victim_room[key] = max(
                (count + index.free_on(host, group)
                 for host, count in self.victim_gpus_by_host(priority, reclaim_from).items()
                 if count for group in groups), default=0)
        return room

    def add_fresh(self, lease: RunningLease) -> None:
        self.fresh.append(lease)
        if self._leases is not None:
            for host in lease.hosts:
                self._by_host[host].append(lease)

    def ending_on(self, host: str, group: Group) -> int:
        ending = self.ending_free
        if not ending:
            return 0
        return sum(ending.get((host, kid), 0) for kid in group.kinds)

    def ending_in(self, group: Group) -> int:
        kinds = set(group.kinds)
        return sum(n for (_, kid), n in self.ending_free.items() if kid in kinds and n > 0)

    def claim_ending(self, host: str | None, group: Group, gpus: int) -> int:
        """Claim up to `gpus` unclaimed ending GPUs (on `host`, or anywhere when None)."""
        claimed = 0
        ending = self.ending_free
        for key in list(ending):
            if claimed >= gpus:
                break
            h, kid = key
            if kid in group.kinds and (host is None or h == host) and ending[key] > 0:
                take = min(ending[key], gpus - claimed)
                ending[key] -= take
                claimed += take
        self._ending_unclaimed -= claimed
        return claimed


@dataclass(eq=False)
class PassState:
    snapshot: Snapshot
    kinds: list[Kind]
    quota: QuotaBook
    pools: dict[str, PoolState]  # every pool with pending requests, those without GPUs too

    def pool(self, name: str) -> PoolState:
        return self.pools[name]


def pending_by_pool(snapshot: Snapshot) -> dict[str, list[RequestView]]:
    """The snapshot's pending requests by pool, in snapshot order."""
    by_pool: dict[str, list[RequestView]] = defaultdict(list)
    for req in snapshot.pending:
        by_pool[req.pool].append(req)
    return by_pool


def build_pass(snapshot: Snapshot, pools_needed: set[str], *, force_tree: bool = False) -> PassState:
    """Index the snapshot: the quota book (every pool; with the team tree when a team names a
    parent, or `force_tree`) and, for each of `pools_needed` (the pools with pending requests),
    the free GPUs and the running leases."""
    layout = layout_of(snapshot.gpus)
    kinds = list(layout.kinds)
    quota = QuotaBook(snapshot.quotas, Tree.of(snapshot.teams, force=force_tree))
    # The memoised totals and free-GPU base are shared by every pass over this GPU tuple:
    # one pass at a time brings them up to date and copies what it will change.
    with layout.lock:
        counted = layout.running.update(snapshot.running)
        held = _count_running(quota, layout.running if counted else None, snapshot.running)
        quota.roll_up()
        pools: dict[str, PoolState] = {}
        for name in sorted(pools_needed):
            if name in layout.pools:
                pools[name] = _pool_state(snapshot, layout, kinds, name, held, counted)
            else:  # not a GPU in it: the gates refuse its requests
                pools[name] = _no_gpus(name, kinds, snapshot.now)
    return PassState(snapshot, kinds, quota, pools)


def _count_running(quota: QuotaBook, totals: RunningTotals | None,
                   running: tuple[RunningView, ...]) -> set[int]:
    """Count the running leases in the quota book (held and leaving); returns the GPUs they
    hold. From the memoised totals when they describe `running`, else plainly (None: a lease
    id twice)."""
    if totals is not None:
        quota.held.update(totals.per_key)
        quota.leaving.update(totals.leaving)
        return totals.held
    held: set[int] = set()
    for run in running:
        held.update(run.gpu_ids)
        quota.held[(run.team, run.pool)] += len(run.gpu_ids)
        if run.ending:
            quota.leaving[(run.team, run.pool)] += len(run.gpu_ids)
    return held


def _pool_state(snapshot: Snapshot, layout: Layout, kinds: list[Kind], name: str, held: set[int],
                counted: bool) -> PoolState:
    """One pool's state for the pass: its free GPUs and its running leases."""
    pool_layout, running, totals = layout.pools[name], snapshot.running, layout.running
    if totals.per_pool.get(name, 0) == len(running):
        runs = list(running)
    else:
        runs = [run for run in running if run.pool == name]
    base = _free_base(pool_layout, held, layout.where, totals, counted and not layout.time_sliced)
    pool = PoolState(name, FreeIndex(pool_layout, kinds, base), runs, layout.where, snapshot.now,
                     totals if counted else None)
    if snapshot.topology is not None:
        pool.index.islands = snapshot.topology.islands
        pool.topology = snapshot.topology
    if pool_layout.units:
        # A team holding replicas of a time-sliced GPU keeps its free replicas to itself.
        pool.claims = claims_for(pool.index, snapshot.pools, ((r.gpu_ids, r.team) for r in runs))
    return pool


def _no_gpus(name: str, kinds: list[Kind], now: float) -> PoolState:
    empty = PoolLayout(name)
    return PoolState(name, FreeIndex(empty, kinds, FreeBase(empty, set())), [], {}, now, None)


def _free_base(layout: PoolLayout, held: set[int], where: dict[int, tuple[str, str, int]],
               totals: RunningTotals, reuse: bool) -> FreeBase:
    """The pool's free GPUs before the pass: the previous pass's, patched by the GPUs that
    changed hands since, when it is from the totals' previous generation; else built anew."""
    base = layout.free
    if not reuse:
        return FreeBase(layout, held)
    if base is None or totals.changed is None or base.generation != totals.generation - 1:
        base = layout.free = FreeBase(layout, held)
    elif totals.changed:
        base.patch(held, where, totals.changed)
    base.generation = totals.generation
    return base


def definitive(pool: PoolState) -> bool:
    """Whether "nothing could ever satisfy it" is final: not while some GPUs of the pool are out
    of service (cordoned, offline, unhealthy) and might come back."""
    return pool.index.layout.unschedulable == 0


def queue_order(req: RequestView) -> tuple[int, float, str]:
    """Order within a team (and the whole FIFO order): priority, then age, then lease id."""
    return (-req.priority, req.created_at, req.lease_id)
