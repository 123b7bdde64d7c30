"""The scheduler's settings: the `scheduler:` section (one row) and each pool's own (imported by
allocation.models, where Django finds them)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from allocation.models import IdleReclaimFields, idle_reclaim_constraints
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps
from inventory.models import Pool


class SchedulerSettings(models.Model):
    """The `scheduler:` section of the configuration: one row (pk=1)."""

    fair_share_half_life_hours = models.FloatField(default=168.0)
    pass_interval_s = models.FloatField(default=10.0)
    fair_share_preemption = models.BooleanField(
        default=False, help_text="A team below its fair share may preempt borrowed leases of teams above it.")
    fair_share_preemption_interval_s = models.FloatField(
        default=60.0, help_text="The least time between two fair-share preemptions in a pool.")
    # `topology:` of the configuration: host label keys, outermost first (allocation.policy.topology).
    topology = models.JSONField(default=list, blank=True)
    # The half-life the grant weights (GrantLedger, UsageLedger.ended_weight) are computed with;
    # another than fair_share_half_life_hours (None: never set) until they are rebuilt with it
    # (allocation.running_usage.rebuild): passes count the running leases one by one meanwhile.
    weights_half_life_hours = models.FloatField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name_plural = "scheduler settings"
        constraints = [models.CheckConstraint(condition=Q(fair_share_half_life_hours__gt=0),
                                              name="half_life_positive"),
                       models.CheckConstraint(condition=Q(fair_share_preemption_interval_s__gte=0),
                                              name="fair_share_interval_not_negative")]

    def __str__(self) -> str:
        return f"half-life {self.fair_share_half_life_hours} h, pass every {self.pass_interval_s} s"

    @classmethod
    def current(cls) -> SchedulerSettings:
        return cls.objects.filter(pk=1).first() or cls(pk=1)


class PoolScheduling(IdleReclaimFields):
    """A pool's own scheduler settings (`pools[].scheduler` in the configuration; empty: the
    `scheduler:` section's), and when the pool last preempted for fair share (the engine keeps
    the minimum interval between such preemptions across passes, workers and restarts), the
    pool's idle reclaim rule (`pools[].idle_reclaim`), and its caps on each team's queue
    (`pools[].queue_caps`; a pool without this row has the default caps)."""

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="scheduling")
    fair_share_preemption = models.BooleanField(null=True, blank=True)
    fair_share_preemption_interval_s = models.FloatField(null=True, blank=True)
    last_fair_share_preemption_at = models.DateTimeField(null=True, blank=True)
    # allocation.policy.admission.QueueCaps; null: no cap.
    pending_leases_per_team = models.PositiveIntegerField(
        null=True, blank=True, default=DEFAULT_QUEUE_CAPS.pending_leases_per_team)
    pending_gpus_per_team = models.PositiveIntegerField(
        null=True, blank=True, default=DEFAULT_QUEUE_CAPS.pending_gpus_per_team)

    class Meta:
        verbose_name_plural = "pool scheduling"
        constraints = [models.CheckConstraint(
            condition=Q(fair_share_preemption_interval_s__isnull=True) | Q(fair_share_preemption_interval_s__gte=0),
            name="pool_fair_share_interval_not_negative"), *idle_reclaim_constraints("pool_scheduling"),
            *[models.CheckConstraint(condition=Q(**{f"{cap}__isnull": True}) | Q(**{f"{cap}__gte": 1}),
                                     name=f"pool_{cap}_positive")
              for cap in ("pending_leases_per_team", "pending_gpus_per_team")]]

    def __str__(self) -> str:
        return f"scheduling of {self.pool}"

    @property
    def queue_caps(self) -> QueueCaps:
        return QueueCaps(self.pending_leases_per_team, self.pending_gpus_per_team)

    def overrides(self) -> dict[str, object]:
        """The settings this pool sets itself, as the configuration spells them."""
        values = {"fair_share_preemption": self.fair_share_preemption,
                  "fair_share_preemption_interval_s": self.fair_share_preemption_interval_s}
        return {key: value for key, value in values.items() if value is not None}
