"""Plain data in and out of the allocation policy. No Django, no I/O.

The engine (live) and the simulator (replay) both build a `Snapshot`, call a policy function
`(Snapshot) -> Decisions`, and apply the decisions. Times are seconds since the epoch (floats) so
that the simulator can run on its own clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from allocation.policy.idle import IdleReclaim
from allocation.policy.topology import TopologyView
from allocation.policy.where import WORKLOADS


@dataclass(frozen=True)
class GpuView:
    """A GPU of a pool. Only `schedulable` GPUs may be granted (free state, healthy, host ready
    and uncordoned, not foreign, not gone); GPUs held by running leases are listed too (with
    `schedulable=True` if they would be grantable once freed) so preemption can reason about them.
    `shared_team`: a time-sliced replica may only go to this team (None: anyone). Replicas of
    one `physical` unit carry leases of one team at a time unless the pool shares across teams
    (`PoolView.share_across_teams`)."""

    id: int
    pool: str
    host: str
    model: str
    memory_mb: int = 0
    driver_version: str = ""
    cuda_version: str = ""
    schedulable: bool = True
    mig_profile: str = ""
    shared_team: str | None = None
    # Time-sliced replica of a physical GPU (several GpuViews share the same physical id).
    time_sliced: bool = False
    # The unit a time-sliced replica shares without isolation: its physical GPU's uuid. ""
    # means the host's whole set of time-sliced GPUs (Kubernetes: the device plugin, not us,
    # picks the physical device for a pod, so any replica of the node may be on any GPU).
    physical: str = ""
    # Where a lease may run (where.py): the workload kinds its host's source can start, the
    # placement domain a multi-host lease may not leave ("" for one shared domain), and the
    # tags of the pending selectors its host matches.
    workloads: frozenset[str] = WORKLOADS
    domain: str = ""
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TeamView:
    name: str
    weight: float = 1.0
    # Exponentially decayed GPU-seconds used so far (fair-share ledger), at snapshot time.
    decayed_usage: float = 0.0
    # The parent team (a department, tree.py); "" for a root. Leases belong to leaf teams.
    parent: str = ""


@dataclass(frozen=True)
class QuotaView:
    team: str
    pool: str
    guaranteed: int = 0
    limit: int | None = None  # None: may borrow all idle capacity
    # The part of `guaranteed` other teams may borrow while this team leaves it idle (Kueue's
    # lendingLimit). None: all of it.
    lending_limit: int | None = None


@dataclass(frozen=True)
class PoolView:
    """A pool's own scheduling settings. A pool absent from `Snapshot.pools` has the defaults."""

    name: str
    # Time-sliced replicas of one physical GPU may carry leases of several teams at once.
    share_across_teams: bool = False
    # A team below its fair share may preempt borrowed leases of teams above theirs.
    fair_share_preemption: bool = False
    # The least time between two fair-share preemptions in this pool, and when the last began
    # (None: never), so shares settle before the next one.
    fair_share_preemption_interval_s: float = 0.0
    last_fair_share_preemption: float | None = None
    # Idle reclaim of the pool's leases (a priority class's own rule wins); None: none. Read by
    # the idle task and the simulator, not by a scheduling pass.
    idle_reclaim: IdleReclaim | None = None


@dataclass(frozen=True)
class PriorityClassView:
    name: str
    value: int = 0
    preemptible: bool = False
    min_runtime_s: int = 0
    grace_s: int = 30
    # Idle reclaim of leases of this class, over the pool's; None: the pool's rule applies.
    idle_reclaim: IdleReclaim | None = None


@dataclass(frozen=True)
class RequestView:
    """A pending lease."""

    lease_id: str
    team: str
    pool: str
    gpus: int
    priority: int = 0
    created_at: float = 0.0
    model: str = ""  # "" any; "A100|H100": case-insensitive substrings, one model per lease
    min_memory_mb: int = 0
    same_host: bool = True
    min_driver_version: str = ""
    min_cuda_version: str = ""
    # Expected run time, for backfill estimates (the lease TTL, or the trace duration).
    expected_duration_s: float | None = None
    # The workload kind it will start ("" none: it may go anywhere) and its selector's tag
    # ("" none), see where.py.
    workload: str = ""
    selector: str = ""
    # Topology (topology.py): the level its GPUs should stay within ("" the default) and
    # whether it waits rather than be placed across (`required`).
    within: str = ""
    within_required: bool = False


@dataclass(frozen=True)
class RunningView:
    """A lease holding GPUs (granted or bound)."""

    lease_id: str
    team: str
    pool: str
    gpu_ids: tuple[int, ...]
    priority: int = 0
    preemptible: bool = False
    granted_at: float = 0.0
    borrowed: bool = False
    min_runtime_s: int = 0
    # When it is expected to end (TTL expiry or known duration); None if unknown.
    expected_end: float | None = None
    # Already told to stop (preemption notice sent, grace running): never a victim again.
    ending: bool = False


@dataclass(frozen=True)
class ReservationView:
    """An advance reservation: `gpus` GPUs matching `model` ("" any; as `RequestView.model`) in
    `pool` kept for `team` over [start, end). Only active ones that have not ended are listed."""

    reservation_id: str
    team: str
    pool: str
    gpus: int
    start: float
    end: float
    model: str = ""


@dataclass(frozen=True)
class Snapshot:
    now: float
    gpus: tuple[GpuView, ...]
    teams: Mapping[str, TeamView]
    quotas: Mapping[tuple[str, str], QuotaView]  # (team, pool) -> quota
    running: tuple[RunningView, ...]
    pending: tuple[RequestView, ...]
    priority_classes: Mapping[str, PriorityClassView] = field(default_factory=dict)
    # Fair-share half-life (scheduler.fair_share_half_life_hours in seconds). The policy divides
    # `TeamView.decayed_usage` by the mean life (half_life / ln 2) to express past use in GPUs.
    half_life_s: float = 168 * 3600.0
    # False: leave `Pending.estimated_start` empty where working it out is not needed for a
    # decision (the simulator). Decisions are the same either way.
    estimate_starts: bool = True
    # N: estimate the starts of the first N pending entries of each pool only (queue positions
    # 1..N), leaving the rest empty: the engine writes the explanations behind its head only
    # every few seconds, and a sweep of a queue of thousands, every pass, was 13% of the
    # scheduler's CPU. None: every entry's. Decisions are the same either way.
    estimate_head: int | None = None
    pools: Mapping[str, PoolView] = field(default_factory=dict)  # pool name -> its settings
    # Advance reservations not yet ended (reservations.py); () costs nothing.
    reservations: tuple[ReservationView, ...] = ()
    # NVLink islands and the levels above hosts (topology.py); None: topology-blind.
    topology: TopologyView | None = None


@dataclass(frozen=True)
class Grant:
    lease_id: str
    gpu_ids: tuple[int, ...]
    host: str
    borrowed: bool = False


@dataclass(frozen=True)
class Preemption:
    lease_id: str  # the victim
    by_lease_id: str  # the request it makes room for
    reason: str
    # The cause: "reclaim" (borrowed capacity taken back for a team below its guarantee),
    # "priority" (a higher-priority request displacing a preemptible lease, of its own team or
    # another's) or "fair_share" (borrowed capacity taken from a team above its fair share for
    # one below it).
    kind: str = "priority"


@dataclass(frozen=True)
class Pending:
    lease_id: str
    code: str  # why, as a stable code (codes.PendingCode)
    reason: str  # why, in words (explain.py)
    queue_position: int
    estimated_start: float | None = None
    # True when no capacity of the pool could ever satisfy the request (even with every GPU
    # free), or it asks for more than its team's limit: the engine may fail it instead of waiting.
    unsatisfiable: bool = False


@dataclass
class Decisions:
    grants: list[Grant] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
