"""The time series store: one wide row per thing and bucket, so a chart reads one indexed range.

Gauges are sampled once a minute (`Step.MINUTE`, the value at that minute) and rolled up into
hourly points (`Step.HOUR`, the mean of the hour's minutes; `*_max` the hour's peak), see
`history.services`. Values are floats because hourly points are means. Each table has a unique
key (thing, step, at): it is the read index, and what makes a second recording of the same
minute or hour a no-op. A (step, at) index serves the pruning."""

from __future__ import annotations

from django.db import models

from allocation.models import Team
from history.choices import Step
from inventory.models import Gpu, Pool


class PoolPoint(models.Model):
    """A pool at one bucket: capacity and its use, the queue, mean GPU utilisation."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    step = models.PositiveIntegerField(choices=Step.choices)
    at = models.DateTimeField()
    capacity = models.FloatField()
    allocated = models.FloatField()
    free = models.FloatField()
    pending_gpus = models.FloatField(help_text="GPUs asked for by pending leases.")
    queue_length = models.FloatField(help_text="Pending leases.")
    queue_length_max = models.FloatField()
    util_pct = models.FloatField(null=True, blank=True,
                                 help_text="Mean utilisation of the GPUs reporting it; null: none did.")

    class Meta:
        ordering = ["pool", "step", "at"]
        constraints = [models.UniqueConstraint(fields=["pool", "step", "at"], name="history_pool_point_key")]
        indexes = [models.Index(fields=["step", "at"], name="history_pool_point_age")]

    def __str__(self) -> str:
        return f"pool {self.pool_id} @{self.at:%Y-%m-%d %H:%M} /{self.step}s"


class TeamPoolPoint(models.Model):
    """A team's standing in one pool at one bucket: what it holds against its quota, and how long
    its pending leases have waited."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    step = models.PositiveIntegerField(choices=Step.choices)
    at = models.DateTimeField()
    held = models.FloatField()
    held_max = models.FloatField()
    borrowed = models.FloatField()
    guaranteed = models.FloatField()
    limit = models.FloatField(null=True, blank=True, help_text="Null: no ceiling.")
    pending_gpus = models.FloatField()
    wait_s = models.FloatField(null=True, blank=True,
                               help_text="Mean age of the pending leases; null: none pending.")
    wait_max_s = models.FloatField(null=True, blank=True, help_text="Age of the oldest pending lease.")

    class Meta:
        ordering = ["team", "pool", "step", "at"]
        constraints = [models.UniqueConstraint(fields=["team", "pool", "step", "at"],
                                               name="history_team_pool_point_key")]
        indexes = [models.Index(fields=["step", "at"], name="history_team_point_age")]

    def __str__(self) -> str:
        return f"team {self.team_id} pool {self.pool_id} @{self.at:%Y-%m-%d %H:%M} /{self.step}s"


class ModelPoint(models.Model):
    """Utilisation of one GPU model in one pool at one bucket."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=128)
    step = models.PositiveIntegerField(choices=Step.choices)
    at = models.DateTimeField()
    gpus = models.FloatField(help_text="GPUs of the model reporting utilisation.")
    util_pct = models.FloatField()

    class Meta:
        ordering = ["pool", "model", "step", "at"]
        constraints = [models.UniqueConstraint(fields=["pool", "model", "step", "at"],
                                               name="history_model_point_key")]
        indexes = [models.Index(fields=["step", "at"], name="history_model_point_age")]

    def __str__(self) -> str:
        return f"{self.model} in pool {self.pool_id} @{self.at:%Y-%m-%d %H:%M} /{self.step}s"


class GpuPoint(models.Model):
    """One GPU's telemetry over one hour: means of its samples (`inventory.GpuSample`, which are
    the per-minute history), peaks where a peak is what one looks for."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    util_pct = models.FloatField(null=True, blank=True)
    util_max_pct = models.FloatField(null=True, blank=True)
    memory_used_mb = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    temperature_max_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["gpu", "at"]
        constraints = [models.UniqueConstraint(fields=["gpu", "at"], name="history_gpu_point_key")]
        indexes = [models.Index(fields=["at"], name="history_gpu_point_age")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @{self.at:%Y-%m-%d %H:%M}"
