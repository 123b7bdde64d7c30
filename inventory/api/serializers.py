"""Inventory representations. Every field carries help_text: it is the API documentation."""

from __future__ import annotations

from datetime import tzinfo
from typing import Any, cast

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.registry import known_kinds
from core.api.renderers import drf_datetime
from inventory.choices import GpuState, Health, HostState
from inventory.models import Gpu, Host, Pool


class PoolSerializer(serializers.ModelSerializer[Any]):
    capacity = serializers.IntegerField(read_only=True, help_text="Usable GPUs (not gone, not MIG parents).")
    allocated = serializers.IntegerField(read_only=True, help_text="GPUs held by leases.")
    free = serializers.IntegerField(read_only=True, help_text="GPUs free to be granted now.")
    pending = serializers.IntegerField(read_only=True, help_text="Pending leases.")
    pending_gpus = serializers.IntegerField(read_only=True, help_text="GPUs asked by pending leases.")
    models = serializers.SerializerMethodField(help_text="Per-model counts: {model: {total, free}}.")

    class Meta:
        model = Pool
        fields = ["id", "name", "description", "share_across_teams", "capacity", "allocated", "free",
                  "pending", "pending_gpus", "models", "created_at"]
        extra_kwargs = {
            "id": {"help_text": "Numeric id."},
            "name": {"help_text": "Pool name (the key used everywhere else)."},
            "description": {"help_text": "Free text."},
            "share_across_teams": {"help_text": "Whether time-sliced replicas of one physical GPU may carry "
                                                "leases of several teams at once (false: one team at a time)."},
            "created_at": {"help_text": "When the pool was created."},
        }

    @extend_schema_field({"type": "object", "additionalProperties": {
        "type": "object", "properties": {"total": {"type": "integer"}, "free": {"type": "integer"}}}})
    def get_models(self, pool: Pool) -> dict[str, Any]:
        return getattr(pool, "per_model", {})


class HostSerializer(serializers.ModelSerializer[Any]):
    # A declared field (SerializerMetaclass takes it off the class), not the stubs' `Field.source`.
    source = serializers.CharField(source="source.name", read_only=True,  # type: ignore[assignment]
                                   help_text="Source (SSH host list, cluster, simulated fleet) it came from.")
    kind = serializers.CharField(source="source.kind", read_only=True,
                                 help_text=f"Source kind: one of {', '.join(known_kinds())}.")
    gpu_count = serializers.IntegerField(read_only=True, help_text="GPUs on this host (gone ones excluded).")
    state = serializers.ChoiceField(choices=HostState.choices, read_only=True,
                                    help_text="Effective state: offline wins, then drain/cordon, then ready.")
    telemetry_error = serializers.CharField(
        source="source.telemetry_error", read_only=True,
        help_text="Why the GPU telemetry of its source could not be read at the last discovery (a Kubernetes "
                  "source's Prometheus: its GPUs' utilisation is then null); empty when it was read, or when the "
                  "source reads telemetry as part of discovery (SSH).")

    class Meta:
        model = Host
        fields = ["id", "name", "address", "source", "kind", "state", "reported_state",
                  "admin_state", "driver_version", "cuda_version", "gpu_count", "foreign_gpus",
                  "labels", "taints", "error", "telemetry_error", "last_seen", "probe_failures",
                  "next_probe_at"]
        extra_kwargs = {
            "id": {"help_text": "Numeric id (used in cordon/drain/uncordon URLs)."},
            "name": {"help_text": "Host or node name."},
            "address": {"help_text": "Address it is reached at (SSH) or its node name."},
            "reported_state": {"help_text": "State as its source reports it."},
            "admin_state": {"help_text": "What a pool admin asked: '', cordoned or draining."},
            "driver_version": {"help_text": "NVIDIA driver version."},
            "cuda_version": {"help_text": "CUDA version the driver supports."},
            "foreign_gpus": {"help_text": "GPUs in use by processes or pods gpupool did not start."},
            "labels": {"help_text": "Node labels (Kubernetes) or configured labels."},
            "taints": {"help_text": "Node taints (Kubernetes)."},
            "error": {"help_text": "Last discovery error for this host, empty when fine."},
            "last_seen": {"help_text": "When discovery last heard from it."},
            "probe_failures": {"help_text": "Discovery probes it failed in a row (0 once it answers); `error` "
                                            "holds the last one's reason."},
            "next_probe_at": {"help_text": "When discovery probes it again after failing (a backoff from 30 s "
                                           "doubling to 15 min by default, set per source with `backoff`); null: "
                                           "every round. SSH hosts only: a Kubernetes cluster is read in one call."},
        }


class GpuSerializer(serializers.ModelSerializer[Any]):
    host = serializers.CharField(source="host.name", read_only=True, help_text="Host name.")
    pool = serializers.CharField(source="pool.name", read_only=True, help_text="Pool it belongs to.")
    parent_uuid = serializers.CharField(source="parent.uuid", read_only=True, default="", allow_null=True,
                                        help_text="For a MIG slice: the UUID of its physical GPU.")
    state = serializers.ChoiceField(choices=GpuState.choices, read_only=True,
                                    help_text="free, leased, cordoned, offline, unhealthy or foreign.")
    health = serializers.ChoiceField(choices=Health.choices, read_only=True, help_text="ok or unhealthy.")
    lease = serializers.SerializerMethodField(help_text="Id of the lease holding it, or null.")
    time_slicing = serializers.SerializerMethodField(help_text=(
        "For a time-sliced replica: what it shares and how busy that is, else null. `unit` is the "
        "physical GPU's UUID, or `node NAME` on Kubernetes (the device plugin picks the physical GPU, "
        "so the node's time-sliced GPUs are shared as one); `replicas` and `leased` count the unit's "
        "replicas; `teams` names the teams using it that you may see. One team at a time uses a unit "
        "unless its pool shares across teams."))

    class Meta:
        model = Gpu
        fields = ["uuid", "index", "host", "pool", "model", "memory_mb", "mig_profile",
                  "parent_uuid", "state", "health", "health_reason", "shared_replicas", "physical_uuid",
                  "time_slicing", "utilization_pct", "memory_used_mb", "temperature_c", "power_w",
                  "telemetry_at", "lease"]
        extra_kwargs = {
            "uuid": {"help_text": "NVIDIA UUID (GPU-… or MIG-…); the key in URLs."},
            "index": {"help_text": "Device index on its host."},
            "model": {"help_text": "Model name as nvidia-smi reports it."},
            "memory_mb": {"help_text": "Total memory in MiB."},
            "mig_profile": {"help_text": "MIG profile of a slice (e.g. 1g.10gb), empty for a whole GPU."},
            "health_reason": {"help_text": "Why it is unhealthy (XID, ECC), empty when healthy."},
            "shared_replicas": {"help_text": "Time-slicing replicas (1 = not shared)."},
            "physical_uuid": {"help_text": "For a time-sliced replica on an SSH host: its physical GPU's UUID "
                                           "(the one its process sees); empty otherwise."},
            "utilization_pct": {"help_text": "Latest GPU utilisation, percent."},
            "memory_used_mb": {"help_text": "Latest memory in use, MiB."},
            "temperature_c": {"help_text": "Latest temperature, °C."},
            "power_w": {"help_text": "Latest power draw, W."},
            "telemetry_at": {"help_text": "When the telemetry above was sampled."},
        }

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_lease(self, gpu: Gpu) -> str | None:
        return cast("str | None", self.context.get("gpu_leases", {}).get(gpu.pk))

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "unit": {"type": "string"}, "replicas": {"type": "integer"}, "leased": {"type": "integer"},
        "teams": {"type": "array", "items": {"type": "string"}}}})
    def get_time_slicing(self, gpu: Gpu) -> dict[str, Any] | None:
        return cast("dict[str, Any] | None", self.context.get("gpu_sharing", {}).get(gpu.pk))

    def to_representation(self, gpu: Gpu) -> dict[str, Any]:
        """Hand-written for speed: DRF's per-field machinery costs ~0.15 ms a row, and a page of
        GPUs is the hottest read of the API. Same keys and formats as the declared fields, which
        still define the schema (tests/api/test_gpu_representation.py compares the two)."""
        when = _DATETIME.to_representation
        return {
            "uuid": gpu.uuid, "index": gpu.index, "host": gpu.host.name, "pool": gpu.pool.name,
            "model": gpu.model, "memory_mb": gpu.memory_mb, "mig_profile": gpu.mig_profile,
            "parent_uuid": gpu.parent_uuid, "state": gpu.state,
            "health": gpu.health, "health_reason": gpu.health_reason, "shared_replicas": gpu.shared_replicas,
            "physical_uuid": gpu.physical_uuid, "time_slicing": self.get_time_slicing(gpu),
            "utilization_pct": gpu.utilization_pct, "memory_used_mb": gpu.memory_used_mb,
            "temperature_c": gpu.temperature_c, "power_w": gpu.power_w,
            "telemetry_at": when(gpu.telemetry_at) if gpu.telemetry_at else None,
            "lease": self.get_lease(gpu),
        }

    @staticmethod
    def row_representation(row: dict[str, Any], lease: str | None = None, tz: tzinfo | None = None,
                           sharing: dict[str, Any] | None = None) -> dict[str, Any]:
        """The same for a values() row of GPU_ROW_FIELDS (no model instances of the GPU, its host,
        pool and parent: a third of the cost of a page); `tz`: the current time zone, looked up
        once a page; `sharing`: its `time_slicing` object."""
        return {
            "uuid": row["uuid"], "index": row["index"], "host": row["host__name"], "pool": row["pool__name"],
            "model": row["model"], "memory_mb": row["memory_mb"], "mig_profile": row["mig_profile"],
            "parent_uuid": row["parent__uuid"] if row["parent_id"] else "", "state": row["state"],
            "health": row["health"], "health_reason": row["health_reason"], "shared_replicas": row["shared_replicas"],
            "physical_uuid": row["physical_uuid"], "time_slicing": sharing,
            "utilization_pct": row["utilization_pct"], "memory_used_mb": row["memory_used_mb"],
            "temperature_c": row["temperature_c"], "power_w": row["power_w"],
            "telemetry_at": drf_datetime(row["telemetry_at"], tz or timezone.get_current_timezone()),
            "lease": lease,
        }

    def generic_representation(self, gpu: Gpu) -> dict[str, Any]:
        """DRF's own field-by-field rendering (the reference the fast path is tested against)."""
        return dict(super().to_representation(gpu))


_DATETIME = serializers.DateTimeField()
