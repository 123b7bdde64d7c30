"""GPU-hour metering, budgets and prices (imported by allocation.models, where Django finds them).

`LeaseUsage` is the meter: one row per grant of a lease (a lease requeued after a loss and granted
again gets a second row), written in the pass that grants it and closed in the statement that ends
it. Usage over any window is SQL arithmetic over these intervals clipped to the window
(`allocation.economy.usage`), so a restart can neither count an hour twice nor lose one, and a running
lease counts up to now.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from allocation.choices import BudgetAction, BudgetPeriod
from inventory.models import Pool


class LeaseUsage(models.Model):
    """One grant of a lease: `gpu_equiv` GPU-equivalents (allocation.policy.metering) of `model`
    held from `started_at` to `ended_at` (null while the lease holds them). Team and pool are the
    lease's, copied so the report and the budgets filter on this table's own indexes."""

    lease = models.ForeignKey("allocation.Lease", on_delete=models.CASCADE, related_name="usage")
    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="usage", db_index=False)
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="usage")
    model = models.CharField(max_length=128, blank=True, default="")
    gpu_equiv = models.FloatField()
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "lease usage"
        verbose_name_plural = "lease usage"
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["team", "started_at"]), models.Index(fields=["started_at"])]
        constraints = [
            # No double metering: a lease holds GPUs under one grant at a time.
            models.UniqueConstraint(fields=["lease"], condition=Q(ended_at__isnull=True),
                                    name="lease_usage_one_open_per_lease"),
            models.CheckConstraint(condition=Q(gpu_equiv__gt=0), name="lease_usage_gpu_equiv_positive"),
            models.CheckConstraint(condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                                   name="lease_usage_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.gpu_equiv:g} × {self.model} from {self.started_at:%Y-%m-%d %H:%M}"


class IdleUsage(models.Model):
    """GPU-seconds leased GPUs sat allocated but idle within one UTC `hour`, per team, pool, user
    (the lease's requester) and model: what the usage report groups by. Weighted as the meter
    weighs a GPU (a MIG slice its share, a time-sliced replica 1/N); added to by each idle check
    (allocation.services.idle_gpus) from the time a GPU was flagged. One row per group and hour,
    not per lease: a month of a fleet a quarter idle is thousands of rows, not millions."""

    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="idle_usage")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="idle_usage")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="idle_usage")
    model = models.CharField(max_length=128, blank=True, default="")
    hour = models.DateTimeField()
    gpu_seconds = models.FloatField()

    class Meta:
        verbose_name = "idle usage"
        verbose_name_plural = "idle usage"
        ordering = ["-hour"]
        indexes = [models.Index(fields=["hour"]), models.Index(fields=["team", "hour"])]
        constraints = [
            models.UniqueConstraint(fields=["team", "pool", "user", "model", "hour"],
                                    name="idle_usage_one_row_per_hour"),
            models.CheckConstraint(condition=Q(gpu_seconds__gte=0), name="idle_usage_gpu_seconds_not_negative"),
        ]

    def __str__(self) -> str:
        return (f"team {self.team_id} pool {self.pool_id} user {self.user_id}: {self.gpu_seconds:g} idle GPU-s "
                f"in {self.hour:%Y-%m-%d %H}:00")


class Budget(models.Model):
    """`budgets[]` of the configuration: `gpu_hours` per calendar `period` for a team, in one pool
    or (pool null) all of them. The columns after `action` are the budget's standing, written by
    `allocation.services.budgets.budgets_refresh` (never by `apply`): usage in the period as of
    `used_as_of`, the GPU-equivalents the team held then (the lease-create check adds their hours
    since), and the highest threshold (80, 100) already warned of in the period starting
    `warned_for`."""

    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="budgets")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, null=True, blank=True, related_name="budgets")
    gpu_hours = models.FloatField()
    period = models.CharField(max_length=16, choices=BudgetPeriod.choices)
    action = models.CharField(max_length=16, choices=BudgetAction.choices, default=BudgetAction.WARN)
    period_start = models.DateTimeField(null=True, blank=True)
    used_gpu_hours = models.FloatField(default=0.0)
    held_gpu_equiv = models.FloatField(default=0.0)
    used_as_of = models.DateTimeField(null=True, blank=True)
    warned_pct = models.PositiveSmallIntegerField(default=0)
    warned_for = models.DateTimeField(null=True, blank=True, help_text="The period start `warned_pct` is of.")

    class Meta:
        # All pools first (PostgreSQL sorts nulls last by default).
        ordering = ["team__name", models.F("pool__name").asc(nulls_first=True), "period"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_hours__gt=0), name="budget_gpu_hours_positive"),
            models.UniqueConstraint(fields=["team", "pool", "period"], condition=Q(pool__isnull=False),
                                    name="budget_unique_team_pool_period"),
            models.UniqueConstraint(fields=["team", "period"], condition=Q(pool__isnull=True),
                                    name="budget_unique_team_period_all_pools"),
        ]

    def __str__(self) -> str:
        where = self.pool.name if self.pool_id and self.pool else "all pools"
        return f"{self.team}: {self.gpu_hours:g} GPU-h per {self.period} in {where}"


class Price(models.Model):
    """`prices[]` of the configuration: what one GPU-hour of `model` costs (matched like a lease's
    `model`, case-insensitively as a substring of the GPU model; the longest match wins)."""

    model = models.CharField(max_length=128, unique=True)
    per_gpu_hour = models.FloatField()

    class Meta:
        ordering = ["model"]
        constraints = [models.CheckConstraint(condition=Q(per_gpu_hour__gte=0), name="price_not_negative")]

    def __str__(self) -> str:
        return f"{self.model}: {self.per_gpu_hour:g} per GPU-hour"
