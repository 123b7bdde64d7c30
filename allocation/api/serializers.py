from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from allocation.models import Lease, PriorityClass, Quota, Team
from inventory.models import Pool

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class StrictSerializer(serializers.Serializer):
    """Refuses unknown fields: a typo ("gpu": 2) must not silently become a default."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["unknown field"] for name in unknown}, code="unknown_field")
        return super().to_internal_value(data)


class BindingSerializer(StrictSerializer):
    """`{"kind": "process", "command": [...], "env": {...}}` or `{"kind": "pod", "pod": {...}}`."""

    kind = serializers.ChoiceField(choices=["process", "pod"])
    command = serializers.ListField(child=serializers.CharField(max_length=8192, trim_whitespace=False),
                                    required=False, min_length=1, max_length=256)
    env = serializers.DictField(child=serializers.CharField(max_length=32768, allow_blank=True,
                                                            trim_whitespace=False),
                                required=False)
    namespace = serializers.CharField(required=False, max_length=63)
    pod = serializers.DictField(required=False)
    duration_s = serializers.IntegerField(required=False, min_value=0,
                                          help_text="Simulated sources only: run time of the fake workload.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["kind"] == "process":
            if not attrs.get("command"):
                raise serializers.ValidationError({"command": ["a process binding needs a command list"]})
            bad = [k for k in attrs.get("env", {}) if not ENV_NAME.match(k)]
            if bad:
                raise serializers.ValidationError({"env": [f"invalid variable name {bad[0]!r}"]})
            if {"pod", "namespace"} & set(attrs):
                raise serializers.ValidationError({"pod": ["not allowed on a process binding"]})
        else:
            if not isinstance(attrs.get("pod"), dict) or not attrs["pod"]:
                raise serializers.ValidationError({"pod": ["a pod binding needs a Pod manifest"]})
            if "namespace" in attrs and not DNS_LABEL.match(attrs["namespace"]):
                raise serializers.ValidationError({"namespace": ["not a valid namespace name"]})
            if {"command", "env"} & set(attrs):
                raise serializers.ValidationError({"command": ["not allowed on a pod binding"]})
        return attrs


class LeaseCreateSerializer(StrictSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all())
    gpus = serializers.IntegerField(min_value=1, max_value=4096)
    model = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")
    min_memory_mb = serializers.IntegerField(required=False, min_value=0, max_value=10**9, default=0)
    min_driver_version = serializers.RegexField(r"^\d+(\.\d+)*$", required=False, default="", allow_blank=True)
    min_cuda_version = serializers.RegexField(r"^\d+(\.\d+)*$", required=False, default="", allow_blank=True)
    team = serializers.CharField(required=False, allow_null=True, max_length=64, default=None)
    priority_class = serializers.CharField(required=False, allow_null=True, max_length=64, default=None)
    ttl_seconds = serializers.IntegerField(required=False, min_value=1, allow_null=True, default=None)
    same_host = serializers.BooleanField(required=False, default=True)
    requeue_on_loss = serializers.BooleanField(required=False, default=False)
    binding = BindingSerializer(required=False, allow_null=True, default=None)

    def validate_ttl_seconds(self, value: int | None) -> int | None:
        limit = settings.GPUPOOL["MAX_TTL_S"]
        if value is not None and value > limit:
            raise serializers.ValidationError(f"at most {limit} seconds")
        return value


class RenewSerializer(StrictSerializer):
    ttl_seconds = serializers.IntegerField(required=False, min_value=1, allow_null=True, default=None)


class ReleaseSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class LeaseSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True)
    priority_class = serializers.CharField(source="priority_class.name", read_only=True)
    host = serializers.CharField(source="host.name", read_only=True, default=None, allow_null=True)
    gpus = serializers.SerializerMethodField()
    binding = serializers.SerializerMethodField()

    class Meta:
        model = Lease
        fields = ["id", "state", "team", "user", "pool", "gpu_count", "gpus", "host", "model",
                  "min_memory_mb", "min_driver_version", "min_cuda_version", "same_host",
                  "priority_class", "borrowed", "requeue_on_loss", "ttl_seconds", "created_at",
                  "granted_at", "expires_at", "ended_at", "reason", "queue_position",
                  "estimated_start", "binding", "preempted_by"]

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_gpus(self, lease: Lease) -> list[str]:
        # Uses the prefetched links (see LeaseViewSet.get_queryset): no query per lease.
        links = [link for link in lease.gpu_links.all() if link.active or lease.state in ("released",
                 "expired", "preempted", "failed", "lost")]
        return [link.gpu.uuid for link in sorted(links, key=lambda lk: (lk.gpu.host_id, lk.gpu.index))]

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "kind": {"type": "string"}, "spec": {"type": "object"}, "status": {"type": "object"}}})
    def get_binding(self, lease: Lease) -> dict[str, Any] | None:
        if not lease.binding_spec:
            return None
        return {"kind": lease.binding_kind, "spec": lease.binding_spec,
                "status": lease.binding_status or {"state": "waiting for grant"}}


class TeamSerializer(serializers.ModelSerializer):
    members = serializers.SlugRelatedField(slug_field="username", many=True, read_only=True)
    fair_share = serializers.FloatField(read_only=True, help_text="Decayed GPU-seconds ÷ weight.")
    decayed_usage_gpu_hours = serializers.FloatField(read_only=True)

    class Meta:
        model = Team
        fields = ["id", "name", "weight", "members", "decayed_usage_gpu_hours", "fair_share"]


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name", read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True)
    used = serializers.IntegerField(read_only=True)
    borrowed = serializers.IntegerField(read_only=True)
    pending = serializers.IntegerField(read_only=True)

    class Meta:
        model = Quota
        fields = ["id", "team", "pool", "guaranteed", "limit", "used", "borrowed", "pending"]


class QuotaUpdateSerializer(StrictSerializer):
    guaranteed = serializers.IntegerField(required=False, min_value=0, max_value=10**6)
    limit = serializers.IntegerField(required=False, min_value=0, max_value=10**6, allow_null=True)


class PriorityClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = PriorityClass
        fields = ["name", "value", "preemptible", "min_runtime_s", "grace_s"]
