"""Reads for the dashboard pages, built on the shared selectors so the numbers match the API.

Each function costs a fixed number of queries, whatever the size of the fleet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Avg, Count, Q
from django.utils import timezone

from allocation.models import Lease, LeaseGpu, Quota
from allocation.selectors import Pending, fair_share_standing, pending_by_pool, quota_list, team_gpus_held
from allocation.selectors.idle import idle_gpus
from core.roles import is_pool_admin
from frontend.charts import LineChart, line_chart
from history.choices import Step
from history.models import PoolPoint
from inventory.choices import GpuState
from inventory.models import Gpu, GpuSample, Host, Pool
from inventory.replicas import ReplicaSummary, summarise, unit_key
from inventory.selectors import gpu_list, host_list, pool_list

CHART_BUCKETS = 40


@dataclass
class PoolStats:
    pool: Pool
    capacity: int = 0
    allocated: int = 0
    free: int = 0
    borrowed: int = 0
    pending_leases: int = 0
    pending_gpus: int = 0
    states: dict[str, int] = field(default_factory=dict)
    gpu_hours_today: float = 0.0
    chart: LineChart | None = None

    @property
    def in_guarantee(self) -> int:
        """Allocated GPUs that are not borrowed."""
        return max(self.allocated - self.borrowed, 0)

    @property
    def foreign(self) -> int:
        return self.states.get(GpuState.FOREIGN, 0)

    @property
    def unhealthy(self) -> int:
        return self.states.get(GpuState.UNHEALTHY, 0)

    @property
    def out_of_service(self) -> int:
        """Cordoned and offline GPUs: neither free nor in use."""
        return self.states.get(GpuState.CORDONED, 0) + self.states.get(GpuState.OFFLINE, 0)


def telemetry_window_s() -> int:
    """How far back GpuSample history reaches (inventory.sync prunes older rows)."""
    return settings.GPUPOOL["TELEMETRY_HISTORY"] * settings.GPUPOOL["DISCOVERY_INTERVAL_S"]


def pool_overview(*, now: datetime | None = None) -> list[PoolStats]:
    """Per pool: capacity, allocation, borrowing, queue, GPU states, GPU-hours today, utilisation."""
    now = now or timezone.now()
    stats = [PoolStats(pool=p, capacity=p.capacity, allocated=p.allocated, free=p.free) for p in pool_list()]
    states = _gpu_states_by_pool()
    borrowed = _borrowed_gpus_by_pool()
    pending = pending_by_pool()
    hours = gpu_hours_since(now.replace(hour=0, minute=0, second=0, microsecond=0), now)
    start = chart_start(now)
    series = utilisation_series(start, now)
    for s in stats:
        pool_id = s.pool.pk
        s.states = states.get(pool_id, {})
        s.borrowed = borrowed.get(pool_id, 0)
        s.pending_leases, s.pending_gpus = pending.get(pool_id, Pending(0, 0))
        s.gpu_hours_today = hours.get(pool_id, 0.0)
        s.chart = line_chart(series.get(pool_id, []), start=start, end=now)
    return stats


def _gpu_states_by_pool() -> dict[int, dict[str, int]]:
    """Per pool: how many GPUs are in each state, counting whole GPUs and MIG slices (not their
    parents). Pools without GPUs are absent."""
    states: dict[int, dict[str, int]] = defaultdict(dict)
    for row in (Gpu.objects.filter(gone=False, slices__isnull=True).values("pool_id", "state")
                .annotate(n=Count("pk", distinct=True))):
        states[row["pool_id"]][row["state"]] = row["n"]
    return dict(states)


def _borrowed_gpus_by_pool() -> dict[int, int]:
    """Per pool: GPUs held by leases that borrow beyond their team's guarantee; pools with none
    are absent."""
    borrowed: dict[int, int] = defaultdict(int)
    for (_, pool_id), held in team_gpus_held().items():
        if held.borrowed:
            borrowed[pool_id] += held.borrowed
    return dict(borrowed)


def chart_start(now: datetime) -> datetime:
    """Where the utilisation charts begin: the oldest sample still kept, but at least 15 minutes
    back, so a young install does not draw a mostly empty chart."""
    oldest = now - timedelta(seconds=telemetry_window_s())
    first = GpuSample.objects.filter(at__gte=oldest).order_by("at").values_list("at", flat=True).first()
    return min(first or now, now - timedelta(minutes=15))


def gpu_hours_since(start: datetime, now: datetime) -> dict[int, float]:
    """GPU-hours granted per pool between `start` and `now` (leases still running count to now)."""
    rows = Lease.objects.filter(granted_at__isnull=False, granted_at__lt=now).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start)).values_list("pool_id", "gpu_count", "granted_at", "ended_at")
    hours: dict[int, float] = defaultdict(float)
    for pool_id, gpus, granted, ended in rows:
        assert granted is not None  # filtered above
        seconds = (min(ended or now, now) - max(granted, start)).total_seconds()
        hours[pool_id] += gpus * max(seconds, 0.0) / 3600
    return dict(hours)


def utilisation_series(start: datetime, end: datetime,
                       buckets: int = CHART_BUCKETS) -> dict[int, list[tuple[datetime, float | None]]]:
    """Mean GPU utilisation per pool in equal time buckets; None where no sample fell.

    The minutes the history has recorded (a pool's minute points, `history_record`) are read from
    there: one row a pool and minute, where the raw samples are one a GPU and minute (16,000 rows a
    minute on a 2,000-host fleet, a second's scan for the overview's window). Raw samples fill in
    only the minutes outside the recorded span (a young install, the minute not yet recorded),
    weighted by their count as the points are by their pool's capacity.
    GPUs count towards the pool they are in now (a moved GPU takes its history along)."""
    width = (end - start).total_seconds() / buckets
    sums: dict[int, list[list[float]]] = defaultdict(lambda: [[0.0, 0.0] for _ in range(buckets)])

    def add(pool_id: int, at: datetime, mean: float, weight: float) -> None:
        slot = min(max(int((at - start).total_seconds() // width), 0), buckets - 1)
        sums[pool_id][slot][0] += mean * weight
        sums[pool_id][slot][1] += weight

    points = list(PoolPoint.objects.filter(step=Step.MINUTE, at__gte=start, at__lte=end, util_pct__isnull=False)
                  .values_list("pool_id", "at", "util_pct", "capacity"))
    for pool_id, at, mean, capacity in points:
        assert mean is not None  # filtered above
        add(pool_id, at, mean, max(capacity, 1.0))
    outside = Q(at__gte=start, at__lte=end)
    if points:
        # A point stands for its minute [at, at + 60 s): samples inside the span are counted there.
        # Two ranges, so each is an index range scan (not a filter over the whole window).
        first, after = min(p[1] for p in points), max(p[1] for p in points) + timedelta(seconds=Step.MINUTE)
        outside = Q(at__gte=start, at__lt=first) | Q(at__gte=after, at__lte=end)
    samples = GpuSample.objects.filter(outside, utilization_pct__isnull=False)
    for pool_id, at, mean, n in (samples.values_list("gpu__pool_id", "at")
                                 .annotate(mean=Avg("utilization_pct"), n=Count("pk"))):
        add(pool_id, at, mean, n)
    return {pool_id: [(start + timedelta(seconds=width * (i + 0.5)), total / n if n else None)
                      for i, (total, n) in enumerate(slots)] for pool_id, slots in sums.items()}


@dataclass(frozen=True)
class QuotaRow:
    """A quota as its row on the quotas page draws it: the quota (with the counts `quota_list`
    sets), the capacity of its pool, and the bar's full length `scale` (its limit, or the pool's
    capacity when unlimited)."""

    quota: Quota
    capacity: int
    scale: int

    @property
    def in_guarantee(self) -> int:
        """Used GPUs that are not borrowed."""
        return max(self.quota.used - self.quota.borrowed, 0)

    def __getattr__(self, name: str) -> Any:
        """The quota's own fields and counts (team, limit, used, …), as the row's template and the
        pages' tests read them."""
        if name == "quota":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.quota, name)


@dataclass
class TeamQuotas:
    name: str
    weight: float
    standing: dict[str, float]
    quotas: list[QuotaRow]


def team_quotas(*, user: Any) -> tuple[list[TeamQuotas], int]:
    """The user's visible quotas grouped by team, as rows of the quotas page, plus the number of
    ranked teams."""
    capacity = {p.pk: p.capacity for p in pool_list()}
    standing = fair_share_standing()
    teams: dict[str, TeamQuotas] = {}
    for quota in quota_list(user=user):
        pool_capacity = capacity.get(quota.pool_id, 0)
        ceiling = quota.limit if quota.limit is not None else pool_capacity
        row = QuotaRow(quota, capacity=pool_capacity, scale=max(ceiling, quota.used, quota.guaranteed, 1))
        team = teams.setdefault(quota.team.name, TeamQuotas(
            quota.team.name, quota.team.weight, standing.get(quota.team.name, {}), []))
        team.quotas.append(row)
    return sorted(teams.values(), key=lambda t: t.standing.get("rank", 10**6)), len(standing)


@dataclass
class GpuTile:
    gpu: Gpu
    lease_id: str = ""
    lease_team: str = ""
    visible: bool = False  # may this user open the lease?
    idle_since: datetime | None = None  # allocated but idle since (allocation.selectors.idle)
    slices: list[GpuTile] = field(default_factory=list)
    sharing: ReplicaSummary | None = None  # a time-sliced replica: its physical GPU's replicas


@dataclass
class HostRow:
    host: Host
    gpus: list[GpuTile] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)

    @property
    def leased(self) -> int:
        return sum(1 for t in self._all() if t.gpu.state == GpuState.LEASED)

    @property
    def idle(self) -> int:
        """Leased GPUs flagged allocated but idle."""
        return sum(1 for t in self._all() if t.idle_since is not None)

    @property
    def units(self) -> int:
        """GPUs that count as capacity: whole GPUs, and the slices of MIG GPUs."""
        return len(self._all())

    @property
    def util(self) -> float | None:
        """Mean utilisation of its GPUs that report one (None: none does)."""
        known = [t.gpu.utilization_pct for t in self.gpus if t.gpu.utilization_pct is not None]
        return sum(known) / len(known) if known else None

    def _all(self) -> list[GpuTile]:
        return [s for t in self.gpus for s in (t.slices or [t])]


def fleet(*, user: Any, pool: str = "", host_ids: list[int] | None = None) -> list[HostRow]:
    """Hosts with their GPUs (MIG slices nested), who holds each GPU, optionally one pool only."""
    hosts = host_list()
    gpus = gpu_list(filters={"gone": False})
    if pool:
        gpus = gpus.filter(pool__name=pool)
        # A subquery, not a join: a join would multiply host_list's per-host GPU count.
        hosts = hosts.filter(pk__in=Gpu.objects.filter(pool__name=pool, gone=False).values("host_id"))
    if host_ids is not None:
        hosts, gpus = hosts.filter(pk__in=host_ids), gpus.filter(host_id__in=host_ids)
    admin = is_pool_admin(user)
    my_teams = set() if admin else set(user.teams.values_list("name", flat=True))
    holders = {gid: (str(lid), team) for gid, lid, team in LeaseGpu.objects.filter(
        active=True, gpu__in=gpus).values_list("gpu_id", "lease_id", "lease__team__name")}
    idle = idle_gpus(gpu_ids=holders)
    rows = {h.pk: HostRow(h) for h in hosts}
    tiles: dict[int, GpuTile] = {}
    # Whole GPUs before slices, so every slice finds its parent's tile (NULLs sort last in PostgreSQL).
    for gpu in sorted(gpus, key=lambda g: g.parent_id is not None):
        lease_id, team = holders.get(gpu.pk, ("", ""))
        tile = GpuTile(gpu, lease_id, team, visible=bool(lease_id) and (admin or team in my_teams),
                       idle_since=idle.get(gpu.pk))
        tiles[gpu.pk] = tile
        if gpu.parent_id and gpu.parent_id in tiles:
            tiles[gpu.parent_id].slices.append(tile)
        elif gpu.host_id in rows:
            rows[gpu.host_id].gpus.append(tile)
            if gpu.pool.name not in rows[gpu.host_id].pools:
                rows[gpu.host_id].pools.append(gpu.pool.name)
    _describe_replicas(tiles.values())
    return list(rows.values())


def _describe_replicas(tiles: Iterable[GpuTile]) -> None:
    """Give each time-sliced tile its unit's summary ("GPU-…: 4 replicas, 2 leased by team
    vision"), counted over the tiles shown; teams the user may not see read "another team"."""
    shared = [t for t in tiles if t.gpu.shared_replicas > 1]
    if not shared:
        return
    members = [(t.gpu.pk, t.gpu.physical_uuid, t.gpu.host_id, t.gpu.host.name, bool(t.lease_id)) for t in shared]
    units = summarise(members, {t.gpu.pk: t.lease_team if t.visible else "" for t in shared if t.lease_id})
    for tile in shared:
        tile.sharing = units[unit_key(tile.gpu.physical_uuid, tile.gpu.host_id)]


def pool_names() -> list[str]:
    """Every pool's name, A to Z (the choices of the lists' pool filter)."""
    return list(Pool.objects.order_by("name").values_list("name", flat=True))


def capacity_hosts(host_ids: list[int] | None = None) -> list[HostRow]:
    """Hosts (all, or `host_ids` in that order) with their top-level GPUs, for the capacity-move
    picker (no lease visibility); hosts without GPUs are left out."""
    hosts = host_list() if host_ids is None else host_list().filter(pk__in=host_ids)
    gpus = gpu_list(filters={"gone": False, "parent__isnull": True})
    if host_ids is not None:
        gpus = gpus.filter(host_id__in=host_ids)
    rows = {h.pk: HostRow(h) for h in hosts}
    for gpu in gpus.annotate(n_slices=Count("slices", filter=Q(slices__gone=False))):
        if gpu.host_id in rows:
            rows[gpu.host_id].gpus.append(GpuTile(gpu))
            if gpu.pool.name not in rows[gpu.host_id].pools:
                rows[gpu.host_id].pools.append(gpu.pool.name)
    ordered = rows.values() if host_ids is None else (rows[pk] for pk in host_ids if pk in rows)
    return [r for r in ordered if r.gpus]
