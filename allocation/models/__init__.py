"""Who gets what: teams, quotas, priority classes, leases, the fair-share ledger and the audit log."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from allocation.choices import HOLDING_STATES, PENDING_CODES, BindingKind, LeaseState
from allocation.policy.budgets import BudgetStatus
from allocation.policy.idle import IdleReclaim
from allocation.policy.where import selector_of
from inventory.models import Gpu, Host, Pool


class IdleReclaimFields(models.Model):
    """`idle_reclaim: {below_util_pct, for_s, warn_s}` of a pool or a priority class: all three
    set, or none (no idle reclaim); see allocation.policy.idle."""

    idle_below_util_pct = models.FloatField(null=True, blank=True)
    idle_for_s = models.FloatField(null=True, blank=True)
    idle_warn_s = models.FloatField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def idle_reclaim(self) -> IdleReclaim | None:
        if self.idle_below_util_pct is None or self.idle_for_s is None or self.idle_warn_s is None:
            return None
        return IdleReclaim(self.idle_below_util_pct, self.idle_for_s, self.idle_warn_s)

    @staticmethod
    def idle_values(rule: IdleReclaim | None) -> dict[str, float | None]:
        """The columns for `rule` (None: all empty)."""
        return {"idle_below_util_pct": rule.below_util_pct if rule else None,
                "idle_for_s": rule.for_s if rule else None, "idle_warn_s": rule.warn_s if rule else None}


def idle_reclaim_constraints(prefix: str) -> list[models.BaseConstraint]:
    """The database's guard of an IdleReclaimFields model: all or none, within range."""
    none = Q(idle_below_util_pct__isnull=True, idle_for_s__isnull=True, idle_warn_s__isnull=True)
    valid = Q(idle_below_util_pct__gte=0, idle_below_util_pct__lte=100, idle_for_s__gt=0, idle_warn_s__gte=0)
    return [models.CheckConstraint(condition=none | valid, name=f"{prefix}_idle_reclaim_valid")]


class Team(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    weight = models.FloatField(default=1.0, help_text="Fair-share weight.")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="teams")
    # A department above it (any depth; members and leases belong to leaf teams). Kept cycle-free
    # by the writes (config apply; a quota's guarantee by `allocation.services.teams_tree`).
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="children")
    # Not columns: set on the instances by the reads that list teams (API, admin).
    fair_share: float
    decayed_usage_gpu_hours: float
    gpus_held: int
    n_members: int
    budget_standing: list[BudgetStatus]  # set by the team API (`budgets` is the relation)
    tree_path: list[str]  # set by the team API: names from the root down, itself included
    child_names: list[str]

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(weight__gt=0), name="team_weight_positive"),
                       models.CheckConstraint(condition=~Q(parent=F("id")), name="team_not_own_parent")]

    def __str__(self) -> str:
        return self.name


class Quota(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="quotas")
    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(null=True, blank=True,
                                        help_text="Ceiling; empty means it may borrow all idle GPUs.")
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Part of the guarantee other teams may borrow while the team leaves it idle "
                  "(Kueue's lendingLimit); empty means all of it.")
    # Not columns: set on the instances by `allocation.selectors.quota_list`.
    used: int
    borrowed: int
    pending: int

    class Meta:
        ordering = ["team__name", "pool__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "pool"], name="quota_unique_team_pool"),
            models.CheckConstraint(condition=Q(limit__isnull=True) | Q(limit__gte=F("guaranteed")),
                                   name="quota_limit_not_below_guaranteed"),
            # A team lends at most what it is guaranteed.
            models.CheckConstraint(condition=Q(lending_limit__isnull=True)
                                   | Q(lending_limit__lte=F("guaranteed")),
                                   name="quota_lending_limit_within_guaranteed"),
        ]

    def __str__(self) -> str:
        return f"{self.team}@{self.pool}"


class PriorityClass(IdleReclaimFields):
    name = models.SlugField(max_length=64, unique=True)
    value = models.IntegerField(default=0)
    preemptible = models.BooleanField(default=False)
    min_runtime_s = models.PositiveIntegerField(default=0)
    grace_s = models.PositiveIntegerField(default=30)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"
        constraints = idle_reclaim_constraints("priority_class")

    def __str__(self) -> str:
        return self.name


class Lease(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    state = models.CharField(max_length=16, choices=LeaseState.choices, default=LeaseState.PENDING)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="leases", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                             related_name="leases")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="leases", db_index=False)
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT,
                                       related_name="leases")
    gpu_count = models.PositiveIntegerField()
    model = models.CharField(max_length=255, blank=True, default="")
    min_memory_mb = models.PositiveIntegerField(default=0)
    min_driver_version = models.CharField(max_length=32, blank=True, default="")
    min_cuda_version = models.CharField(max_length=32, blank=True, default="")
    same_host = models.BooleanField(default=True)
    # Where it may run: {source: NAME | [NAMES], host: NAME, labels: {key: value}} ({} anywhere),
    # matched by the scheduler against each host (allocation.policy.where).
    selector = models.JSONField(default=dict, blank=True)
    # Topology {within: nvlink|host|LEVEL, mode: required|preferred} ({} the default), see
    # allocation.policy.topology.
    topology = models.JSONField(default=dict, blank=True)
    requeue_on_loss = models.BooleanField(default=False)
    ttl_seconds = models.PositiveIntegerField()
    borrowed = models.BooleanField(default=False)
    host = models.ForeignKey(Host, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="leases")
    gpus = models.ManyToManyField(Gpu, through="LeaseGpu", related_name="leases")
    reason = models.TextField(blank=True, default="")
    # Why it is pending, as a stable code (allocation.policy.codes), written with `reason` by the
    # same statements; "" once it is no longer pending.
    pending_code = models.CharField(max_length=32, choices=PENDING_CODES, blank=True, default="")
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    granted_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # Set when the lease was told to end (preemption notice, release of a bound workload) and is
    # waiting for its workload to stop; `end_state` is where it goes once it has.
    ending_since = models.DateTimeField(null=True, blank=True)
    end_state = models.CharField(max_length=16, choices=LeaseState.choices, blank=True, default="")
    # Not indexed (0022): no query looks leases up by their preemptor, and leases are not deleted
    # (the one use Django's SET_NULL would make of it); an entry at every insert and state change.
    preempted_by = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="preempted", db_index=False)
    binding_kind = models.CharField(max_length=16, choices=BindingKind.choices, blank=True,
                                    default=BindingKind.NONE)
    binding_spec = models.JSONField(default=dict, blank=True)
    binding_status = models.JSONField(default=dict, blank=True)
    # Idle reclaim (allocation.services.idle): the standing warning in words ("" none), when it
    # was given, and an admin's exemption (renew with keep=true).
    warning = models.TextField(blank=True, default="")
    warned_at = models.DateTimeField(null=True, blank=True)
    idle_exempt = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        # Each is written at every insert and state change: none repeats another's lead (0019).
        indexes = [models.Index(fields=["pool", "state"]), models.Index(fields=["team", "state"]),
                   models.Index(fields=["state"], name="lease_state"),
                   # A team's queue in a pool, as the queue caps count it at every lease request
                   # (allocation.services.queue_caps): an index-only scan of that queue alone.
                   models.Index(fields=["pool", "team"], include=["gpu_count"], condition=Q(state="pending"),
                                name="lease_pending_queue"),
                   # The few leases being ended while they keep their GPUs, by pool: a pass reads
                   # their links (allocation.running_links) without the pool's history.
                   models.Index(fields=["pool"], condition=Q(ending_since__isnull=False), name="lease_ending")]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="lease_gpu_count_positive"),
            models.UniqueConstraint(fields=["user", "idempotency_key"],
                                    condition=~Q(idempotency_key=""),
                                    name="lease_unique_idempotency_key"),
        ]

    def __str__(self) -> str:
        return str(self.id)

    @property
    def selector_text(self) -> str:
        """The selector as reasons show it (`source=kb host=n1 zone=a`); "" for none."""
        return selector_of(self.selector).tag

    @property
    def is_holding(self) -> bool:
        """Whether it holds GPUs as a live lease (granted or bound). An ended lease whose workload
        is being stopped keeps its GPU links but is not holding."""
        return self.state in HOLDING_STATES

    @property
    def has_workload(self) -> bool:
        """Whether something of the lease may be running on its host: a bound workload (its
        handle), or a bind that was started (the bind task marks the lease with `bind` before it
        asks the host, and a bind whose reply was lost may have started it all the same). A
        recorded handle counts whatever its value (every connector records a non-empty one), as
        in the queryset form `WORKLOAD_MAY_RUN`, so the two never disagree."""
        status = self.binding_status or {}
        return "handle" in status or "bind" in status or self.state == LeaseState.BOUND

    @property
    def exit_code(self) -> int | None:
        """The workload's exit code once it ended on its own (`workload_exit_code`)."""
        return workload_exit_code(self.binding_status)

    @property
    def is_renewable(self) -> bool:
        """Whether its TTL may be renewed: while it waits or holds GPUs."""
        return self.is_holding or self.state == LeaseState.PENDING

    def is_expired(self, now: datetime) -> bool:
        """Whether its TTL has run out at `now` while it holds GPUs (the reaper ends it)."""
        return self.is_holding and self.expires_at is not None and self.expires_at <= now

    def end_time(self, now: datetime) -> datetime:
        """When it ends if it ends at `now`: never before it was granted. `now` may be a clock read
        taken before the scheduling pass, in another transaction, stamped `granted_at` from its
        own read: a release whose locked read started (taking the transaction's time) just before
        the pass read its clock, and then waited for the pass's lock on the lease row, finds the
        lease granted after its `now`; a process clock behind the database's does the same. The
        lease then ends at its grant, a zero duration, never a negative one in the lease row, the
        fair-share ledger or the GPU-hour meter."""
        return max(now, self.granted_at) if self.granted_at is not None else now


# The queryset forms of `Lease.has_workload` and `Lease.is_expired`, defined once beside them.
# `binding_status` is never NULL (default {}), so `exclude(WORKLOAD_MAY_RUN)` is its negation.
WORKLOAD_MAY_RUN = (Q(binding_status__has_key="handle") | Q(binding_status__has_key="bind")
                    | Q(state=LeaseState.BOUND))


def workload_exit_code(binding_status: Any) -> int | None:
    """The exit code a workload ended with on its own, as its connector observed it (a process's
    exit status, 128+N when a signal N killed it; a pod's failed container's code, 0 when it
    succeeded); None while it runs, when the lease had none, or when gpupool stopped it."""
    code = (binding_status or {}).get("exit_code") if isinstance(binding_status, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def expired_at(now: datetime) -> Q:
    """Leases whose TTL has run out at `now` while they hold GPUs (`Lease.is_expired`)."""
    return Q(state__in=HOLDING_STATES, expires_at__lte=now)


class LeaseGpu(models.Model):
    """The lease↔GPU link. `active` stays true while the lease holds the GPU; the partial unique
    constraint makes the database itself refuse a GPU in two active leases."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="gpu_links", db_index=False)
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="lease_links")
    active = models.BooleanField(default=True)
    # Allocated but idle (allocation.services.idle_gpus, each idle check): the GPU's run of
    # samples below the idle threshold as the last check left it, and when that run reached the
    # idle time (null: not idle that long, or no fresh telemetry), which flags it on the
    # dashboard and in /metrics. Null until the first check after the grant.
    idle_since = models.DateTimeField(null=True, blank=True)
    idle_seen_at = models.DateTimeField(null=True, blank=True)
    idle_flagged_at = models.DateTimeField(null=True, blank=True)
    idle_metered_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "lease GPU"
        constraints = [
            models.UniqueConstraint(fields=["gpu"], condition=Q(active=True),
                                    name="gpu_in_at_most_one_active_lease"),
            models.UniqueConstraint(fields=["lease", "gpu"], name="lease_gpu_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}:{self.gpu_id}{'' if self.active else ' (ended)'}"


class AuditEvent(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150, help_text="User name, or system:<component>.")
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    # No constraint in the database (0022): the log names the lease, as the outbox does; a check
    # at every commit of its three events a lease, for leases that are never deleted.
    lease = models.ForeignKey(Lease, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="audit_events", db_constraint=False)
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        # Three events a lease, each an entry in every index (0022): one index per column looked up.
        # `action` is matched whole and by prefix (the API's `action_prefix`): the pattern index
        # serves both; `object_id` is matched whole only.
        indexes = [models.Index(fields=["action"], opclasses=["varchar_pattern_ops"], name="audit_action"),
                   models.Index(fields=["object_id"], name="audit_object_id")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type}:{self.object_id}"


# The scheduler's settings, the fair-share ledger, reservations, metering, budgets and prices, the
# outbox of lease events (allocation.outbox writes and relays it), notifications (allocation.notify),
# users' shell keys, single sign-on's mapping and the passes wanted (allocation.triggers,
# allocation.engine.handoff) live in their own modules; imported here so Django registers them.
from allocation.models.ledger import GrantLedger, UsageLedger  # noqa: E402, F401
from allocation.models.notify import Notification, NotificationDelivery, NotificationEvent  # noqa: E402, F401
from allocation.models.outbox import LeaseOutbox, NotificationCursor  # noqa: E402, F401
from allocation.models.queues import QueueBound  # noqa: E402, F401
from allocation.models.reservations import Reservation  # noqa: E402, F401
from allocation.models.scheduling import PoolScheduling, SchedulerSettings  # noqa: E402, F401
from allocation.models.shells import LeaseShellKey  # noqa: E402, F401
from allocation.models.sso import SsoGroupTeam, SsoMembership, SsoSettings  # noqa: E402, F401
from allocation.models.usage import Budget, IdleUsage, LeaseUsage, Price  # noqa: E402, F401
from allocation.models.wanted import PassWanted  # noqa: E402, F401
