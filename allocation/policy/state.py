"""The in-memory state of one pass, built from a Snapshot and shared by the fair and fifo
policies: per pool, the index of free GPUs, the running leases by host, the GPUs being freed by
ending leases, and the quota book. Everything here is mutated only during the pass."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from allocation.policy.placement import FreeIndex, Group, Kind, layout_of
from allocation.policy.quota import QuotaBook
from allocation.policy.types import RequestView, RunningView, Snapshot


@dataclass(eq=False)
class LeaseState:
    """A running lease (or one granted earlier in this pass), as the policy sees it."""

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

    @classmethod
    def of(cls, run: RunningView, blocks: dict[tuple[str, int], int]) -> LeaseState:
        return cls(run.lease_id, run.team, run.pool, len(run.gpu_ids), run.priority,
                   run.preemptible, run.granted_at, run.borrowed, run.min_runtime_s,
                   run.expected_end, run.ending, blocks)

    def on(self, host: str, group: Group) -> int:
        """The lease's GPUs of the group's kinds on `host`."""
        return sum(self.blocks.get((host, kid), 0) for kid in group.kinds)

    def in_group(self, group: Group) -> int:
        kinds = set(group.kinds)
        return sum(n for (_, kid), n in self.blocks.items() if kid in kinds)


@dataclass(eq=False)
class PoolState:
    name: str
    index: FreeIndex
    leases: list[LeaseState] = field(default_factory=list)
    by_host: dict[str, list[LeaseState]] = field(default_factory=lambda: defaultdict(list))
    # GPUs of ending leases no waiting request has claimed yet, by (host, kind id).
    ending_free: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    # The lowest priority among preemptible leases at the start of the pass (a quick bound).
    min_preemptible: float = float("inf")

    def add_lease(self, lease: LeaseState) -> None:
        self.leases.append(lease)
        for host in {h for h, _ in lease.blocks}:
            self.by_host[host].append(lease)
        if lease.ending:
            for key, count in lease.blocks.items():
                self.ending_free[key] += count
        elif lease.preemptible:
            self.min_preemptible = min(self.min_preemptible, lease.priority)

    def ending_on(self, host: str, group: Group) -> int:
        return sum(self.ending_free.get((host, kid), 0) for kid in group.kinds)

    def ending_in(self, group: Group) -> int:
        kinds = set(group.kinds)
        return sum(n for (_, kid), n in self.ending_free.items() if kid in kinds and n > 0)

    def claim_ending(self, host: str | None, group: Group, gpus: int) -> int:
        """Claim up to `gpus` unclaimed ending GPUs (on `host`, or anywhere when None)."""
        claimed = 0
        for key in list(self.ending_free):
            if claimed >= gpus:
                break
            h, kid = key
            if kid in group.kinds and (host is None or h == host) and self.ending_free[key] > 0:
                take = min(self.ending_free[key], gpus - claimed)
                self.ending_free[key] -= take
                claimed += take
        return claimed


@dataclass(eq=False)
class PassState:
    snapshot: Snapshot
    kinds: list[Kind]
    quota: QuotaBook
    pools: dict[str, PoolState]

    def pool(self, name: str) -> PoolState | None:
        return self.pools.get(name)


def build_pass(snapshot: Snapshot, pools_needed: set[str]) -> PassState:
    """Index the snapshot. Only pools with pending requests get a free-GPU index (the quota book
    and leases are still complete for them)."""
    layout = layout_of(snapshot.gpus)
    kinds = list(layout.kinds)
    quota = QuotaBook(snapshot.quotas)
    held: set[int] = set()
    for run in snapshot.running:
        held.update(run.gpu_ids)
        quota.held[(run.team, run.pool)] += len(run.gpu_ids)
        if run.ending:
            quota.leaving[(run.team, run.pool)] += len(run.gpu_ids)
    pools: dict[str, PoolState] = {}
    for name in sorted(pools_needed):
        pool_layout = layout.pools.get(name)
        if pool_layout is None:
            continue
        pools[name] = PoolState(name, FreeIndex(pool_layout, kinds, held))
    where = layout.where
    for run in snapshot.running:
        pool = pools.get(run.pool)
        if pool is None:
            continue
        blocks: dict[tuple[str, int], int] = {}
        for gid in run.gpu_ids:
            loc = where.get(gid)
            if loc is not None and loc[0] == run.pool and loc[2] in pool.index.capacity:
                blocks[(loc[1], loc[2])] = blocks.get((loc[1], loc[2]), 0) + 1
        lease = LeaseState.of(run, blocks)
        pool.add_lease(lease)
        # A team holding time-sliced replicas on a host keeps the host's free replicas to itself.
        for host, kid in blocks:
            if kinds[kid].time_sliced:
                pool.index.restrict_to_team(host, kid, run.team)
    return PassState(snapshot, kinds, quota, pools)


def definitive(pool: PoolState | None) -> bool:
    """Whether "nothing could ever satisfy it" is final: not while some GPUs of the pool are out
    of service (cordoned, offline, unhealthy) and might come back."""
    return pool is None or pool.index.layout.unschedulable == 0


def queue_order(req: RequestView) -> tuple[int, float, str]:
    """Order within a team (and the whole FIFO order): priority, then age, then lease id."""
    return (-req.priority, req.created_at, req.lease_id)
