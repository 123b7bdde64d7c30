"""What exists: pools, sources, hosts and their GPUs (MIG slices are GPUs with a parent)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from inventory.choices import AdminState, GpuState, Health, HostState
from inventory.validators import validate_source_kind


class Pool(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=255, blank=True, default="")
    # Time-sliced replicas of one physical GPU may carry leases of several teams at once (they
    # share it without memory or fault isolation: off unless the teams trust each other).
    share_across_teams = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Not columns: capacity counts annotated by `inventory.selectors.pool_list`, per-model counts
    # and pending work set by the API's pool listing.
    capacity: int
    allocated: int
    free: int
    per_model: dict[str, dict[str, int]]
    pending: int
    pending_gpus: int

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Source(models.Model):
    """A place GPUs are discovered from: an SSH host list, a Kubernetes cluster, the demo fleet."""

    name = models.SlugField(max_length=64, unique=True)
    # Any kind a connector in agents/ declares (agents.registry); no choices, so a new kind needs
    # no migration.
    kind = models.CharField(max_length=16, validators=[validate_source_kind])
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="sources",
                             help_text="Pool that newly discovered GPUs join.")
    config = models.JSONField(default=dict, blank=True)
    # Fernet token of a private key given inline; never stored in clear.
    secret = models.TextField(blank=True, default="")
    interval_s = models.PositiveIntegerField(default=60)
    last_discovery_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    # Per-GPU telemetry history is sampled less often than discovery runs (see SAMPLE_INTERVAL_S).
    last_sample_at = models.DateTimeField(null=True, blank=True)
    # Telemetry read apart from discovery (a Kubernetes source's Prometheus): why it could not be
    # read at the last discovery ("" when it was, or when there is none) and when it last was.
    telemetry_error = models.TextField(blank=True, default="")
    telemetry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Host(models.Model):
    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="hosts")
    # Natural order (node-2 before node-10) wherever names are sorted: an ICU collation with
    # numeric ordering (migration 0007), so ORDER BY name needs no sort key.
    name = models.CharField(max_length=255, db_collation="natural")
    address = models.CharField(max_length=255, blank=True, default="")
    # What the source reports (ready/cordoned/offline) and what an admin asked (cordon/drain);
    # `state` is derived from both by Host.derive_state and stored for filtering.
    reported_state = models.CharField(max_length=16, choices=HostState.choices,
                                      default=HostState.READY)
    admin_state = models.CharField(max_length=16, choices=AdminState.choices, blank=True,
                                   default=AdminState.NONE)
    state = models.CharField(max_length=16, choices=HostState.choices, default=HostState.READY,
                             db_index=True)
    driver_version = models.CharField(max_length=64, blank=True, default="")
    cuda_version = models.CharField(max_length=64, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    foreign_gpus = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    last_seen = models.DateTimeField(null=True, blank=True)
    offline_since = models.DateTimeField(null=True, blank=True)
    # Discovery's per-host backoff (agents.host_backoff): probes failed in a row (`error` holds the
    # last one's words) and when the host is probed again; null: every round. One answer resets both.
    probe_failures = models.PositiveIntegerField(default=0)
    next_probe_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["source__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["source", "name"], name="host_unique_per_source"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_offline(self) -> bool:
        """Whether it stopped answering discovery (its derived state): nothing can be started or
        stopped on it until it answers again."""
        return self.state == HostState.OFFLINE

    @staticmethod
    def derive_state(reported: str, admin: str) -> str:
        """Offline wins; then an admin's drain or cordon; then what the source says."""
        if reported == HostState.OFFLINE:
            return HostState.OFFLINE
        if admin == AdminState.DRAINING:
            return HostState.DRAINING
        if admin == AdminState.CORDONED or reported == HostState.CORDONED:
            return HostState.CORDONED
        return HostState.READY


class Gpu(models.Model):
    """A GPU or a MIG slice. `state` is derived (see inventory.services.gpu_state_sql) from
    the host's state and the GPU's own flags, and stored so lists can filter on it."""

    # Unique across all sources: the NVIDIA UUID where known, else one qualified by the source
    # (agents.k8s_resources.gpu_uuid).
    uuid = models.CharField(max_length=255, unique=True)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="gpus")
    parent = models.ForeignKey("self", on_delete=models.CASCADE, null=True, blank=True,
                               related_name="slices")
    index = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=128)
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True, default="")
    shared_replicas = models.PositiveIntegerField(default=1)
    # A time-sliced replica's physical GPU (its NVIDIA UUID), the unit replicas are shared by.
    # Empty for a GPU that is not a replica, and on Kubernetes, where the device plugin, not us,
    # picks the physical device for a pod: there the node's time-sliced GPUs are one unit.
    physical_uuid = models.CharField(max_length=128, blank=True, default="", db_index=True)
    # Its NVLink island (agents.base.GpuFact.nvlink_island): `nvl0` within its host, `clique:ID`
    # across hosts; empty: in none, or not known.
    nvlink_island = models.CharField(max_length=128, blank=True, default="")
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.OK)
    health_reason = models.CharField(max_length=255, blank=True, default="")
    foreign = models.BooleanField(default=False)
    leased = models.BooleanField(default=False)
    gone = models.BooleanField(default=False, help_text="No longer reported by its source.")
    # Not indexed, on purpose: every grant and release rewrites `state` and `leased`, and with
    # neither in an index those updates are HOT (heap-only: no new entry in the table's indexes,
    # the old version pruned by the next visit to the page). Lists filter by pool or host first.
    state = models.CharField(max_length=16, choices=GpuState.choices, default=GpuState.FREE)
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mb = models.PositiveIntegerField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    telemetry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "GPU"
        ordering = ["host__name", "index", "uuid"]
        constraints = [
            models.CheckConstraint(condition=Q(shared_replicas__gte=1), name="gpu_replicas_positive"),
        ]

    def __str__(self) -> str:
        return self.uuid

    @property
    def parent_uuid(self) -> str:
        # parent_id first: a whole GPU answers without the descriptor's work.
        return self.parent.uuid if self.parent_id and self.parent else ""


class GpuSample(models.Model):
    """Bounded telemetry history for the dashboard (the latest value also lives on Gpu)."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField(db_index=True)
    utilization_pct = models.FloatField(null=True, blank=True)
    memory_used_mb = models.PositiveIntegerField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)

    class Meta:
        verbose_name = "GPU sample"
        ordering = ["-at"]
        indexes = [models.Index(fields=["gpu", "-at"])]

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.at:%H:%M:%S}"
