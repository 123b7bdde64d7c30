"""What a configuration file says, as plain data: one spec per entry, the whole `Config`, and the
error that lists every problem of a file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocation.notify_vocabulary import DEFAULT_EXPIRING_BEFORE_S, DEFAULT_GRANTED_AFTER_S
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps
from allocation.policy.idle import IdleReclaim
from allocation.policy.types import PriorityClassView, QuotaView


class ConfigError(Exception):
    """A configuration file is invalid; `errors` holds one message per problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class PoolSchedulerSpec:
    """`pools[].scheduler`: the pool's own values of the per-pool scheduler settings; None:
    the `scheduler:` section's."""

    fair_share_preemption: bool | None = None
    fair_share_preemption_interval_s: float | None = None


@dataclass(frozen=True)
class PoolSpec:
    name: str
    description: str = ""
    scheduler: PoolSchedulerSpec | None = None  # None: the file does not say (left as it is)
    # Time-sliced replicas of one physical GPU may carry leases of several teams at once.
    share_across_teams: bool = False
    # `idle_reclaim:`; None: no idle reclaim for the pool (a priority class may still set one).
    idle_reclaim: IdleReclaim | None = None
    # `queue_caps:`; absent: the defaults.
    queue_caps: QueueCaps = DEFAULT_QUEUE_CAPS


@dataclass(frozen=True)
class TeamSpec:
    name: str
    weight: float = 1.0
    members: tuple[str, ...] = ()
    parent: str | None = None  # a department above it (allocation/policy/tree_rules.py); None: a root


# A quota or priority class in the file is exactly what the policy reads: one type, not two.
QuotaSpec = QuotaView
PriorityClassSpec = PriorityClassView


@dataclass(frozen=True)
class SchedulerSpec:
    fair_share_half_life_hours: float = 168.0
    pass_interval_s: float = 10.0
    fair_share_preemption: bool = False
    fair_share_preemption_interval_s: float = 60.0


# Scheduler settings a pool may set for itself under `pools[].scheduler`.
POOL_SCHEDULER_KEYS = ("fair_share_preemption", "fair_share_preemption_interval_s")


@dataclass(frozen=True)
class SourceSpec:
    name: str
    kind: str
    pool: str
    interval_s: int = 60
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BudgetSpec:
    """`budgets[]`: `gpu_hours` per calendar `period` for `team` in `pool` (None: all pools)."""

    team: str
    pool: str | None
    gpu_hours: float
    period: str
    action: str = "warn"

    @property
    def label(self) -> str:
        return f"budget {self.team}@{self.pool or '*'}/{self.period}"


@dataclass(frozen=True)
class PriceSpec:
    """`prices[]`: the cost of one GPU-hour of the GPUs whose model `model` names."""

    model: str
    per_gpu_hour: float


@dataclass(frozen=True)
class NotificationSpec:
    """`notifications[]`: a webhook (`url`) or e-mail (`to`) target of `events`, of every team's
    or of `teams` only; `secret` (or the environment variable `secret_env` of the sending worker)
    signs a webhook's body. `secret` None: the file does not give one (a stored one is kept)."""

    name: str
    kind: str
    events: tuple[str, ...]
    url: str = ""
    to: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    secret: str | None = None
    secret_env: str = ""
    granted_after_s: float = DEFAULT_GRANTED_AFTER_S
    expiring_before_s: float = DEFAULT_EXPIRING_BEFORE_S


@dataclass(frozen=True)
class SsoSpec:
    """`sso:`: which claims name a user and list their groups, which groups give which teams,
    which groups make pool admins. None: the file does not say (left as it is, or the default)."""

    username_claim: str | None = None
    groups_claim: str | None = None
    teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # group → team names
    admins: tuple[str, ...] = ()


@dataclass
class Config:
    pools: list[PoolSpec] = field(default_factory=list)
    teams: list[TeamSpec] = field(default_factory=list)
    quotas: list[QuotaSpec] = field(default_factory=list)
    priority_classes: list[PriorityClassSpec] = field(default_factory=list)
    scheduler: SchedulerSpec | None = None
    sources: list[SourceSpec] = field(default_factory=list)
    budgets: list[BudgetSpec] = field(default_factory=list)
    prices: list[PriceSpec] = field(default_factory=list)
    notifications: list[NotificationSpec] = field(default_factory=list)
    sso: SsoSpec | None = None
    topology: list[str] | None = None  # host label keys, outermost first (None: not in the file)
