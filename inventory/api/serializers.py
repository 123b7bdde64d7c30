from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inventory.models import Gpu, Host, Pool


class PoolSerializer(serializers.ModelSerializer):
    capacity = serializers.IntegerField(read_only=True, help_text="Usable GPUs (not gone, not MIG parents).")
    allocated = serializers.IntegerField(read_only=True, help_text="GPUs held by leases.")
    free = serializers.IntegerField(read_only=True)
    pending = serializers.IntegerField(read_only=True, help_text="Pending leases.")
    pending_gpus = serializers.IntegerField(read_only=True, help_text="GPUs asked by pending leases.")
    models = serializers.SerializerMethodField(help_text="Per-model counts: {model: {total, free}}.")

    class Meta:
        model = Pool
        fields = ["id", "name", "description", "capacity", "allocated", "free", "pending",
                  "pending_gpus", "models", "created_at"]

    @extend_schema_field({"type": "object", "additionalProperties": {
        "type": "object", "properties": {"total": {"type": "integer"}, "free": {"type": "integer"}}}})
    def get_models(self, pool: Pool) -> dict[str, Any]:
        return self.context.get("per_model", {}).get(pool.pk, {})


class HostSerializer(serializers.ModelSerializer):
    source = serializers.CharField(source="source.name", read_only=True)
    kind = serializers.CharField(source="source.kind", read_only=True)
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Host
        fields = ["id", "name", "address", "source", "kind", "state", "reported_state",
                  "admin_state", "driver_version", "cuda_version", "gpu_count", "foreign_gpus",
                  "labels", "taints", "error", "last_seen"]


class GpuSerializer(serializers.ModelSerializer):
    host = serializers.CharField(source="host.name", read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True)
    parent_uuid = serializers.CharField(source="parent.uuid", read_only=True, default="",
                                        allow_null=True)
    lease = serializers.SerializerMethodField()

    class Meta:
        model = Gpu
        fields = ["uuid", "index", "host", "pool", "model", "memory_mb", "mig_profile",
                  "parent_uuid", "state", "health", "health_reason", "shared_replicas",
                  "utilization_pct", "memory_used_mb", "temperature_c", "power_w",
                  "telemetry_at", "lease"]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_lease(self, gpu: Gpu) -> str | None:
        return self.context.get("gpu_leases", {}).get(gpu.pk)


class GpuMoveSerializer(serializers.Serializer):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all())
