"""Input and output serializers of the allocation API: leases (create, renew, release, their
binding and selector), a host's forgotten workloads, the audit log; teams, budgets, quotas and
priority classes are `allocation.api.team_serializers`. Inputs refuse unknown fields; every field
carries help_text, which is the API documentation (tests/api/test_openapi_schema.py checks it)."""

from __future__ import annotations

import re
from typing import Any, cast

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from allocation.choices import LeaseState
from allocation.models import AuditEvent, Lease
from allocation.policy import codes
from allocation.workloads.stopping import stopping_view
from inventory.api.serializers import HostSerializer

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
ENDED = ("released", "expired", "preempted", "failed", "lost")


def _max_length(model: type[Any], field: str) -> int:
    """The column's max_length, for an input field stored in it."""
    length = model._meta.get_field(field).max_length
    assert length is not None, f"{model.__name__}.{field} has no max_length"
    return int(length)


class StrictSerializer(serializers.Serializer[Any]):
    """Refuses unknown fields: a typo ("gpu": 2) must not silently become a default. Every API view
    refuses them first, naming them with code `unknown_field` (core.api.strict); this stays for the
    serializer used on its own."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["unknown field"] for name in unknown}, code="unknown_field")
        return super().to_internal_value(data)


class BindingSerializer(StrictSerializer):
    """`{"kind": "process", "command": [...], "env": {...}}`, `{"kind": "pod", "pod": {...}}` or
    `{"kind": "session"}`."""

    kind = serializers.ChoiceField(choices=["process", "pod", "session"],
                                   help_text="process: started over SSH on the lease's host; pod: a Kubernetes pod; "
                                             "session: nothing started, the lease is for shells on its host "
                                             "(`POST leases/{id}/ssh-keys/`, `gpupool ssh`): ssh sources only.")
    command = serializers.ListField(child=serializers.CharField(max_length=8192, trim_whitespace=False),
                                    required=False, min_length=1, max_length=256,
                                    help_text="process: argv of the command, run with CUDA_VISIBLE_DEVICES set.")
    env = serializers.DictField(child=serializers.CharField(max_length=32768, allow_blank=True,
                                                            trim_whitespace=False),
                                required=False, help_text="process: extra environment variables.")
    namespace = serializers.CharField(required=False, max_length=63,
                                      help_text="pod: namespace to create it in (default: the source's).")
    pod = serializers.DictField(required=False, help_text="pod: a Pod manifest.")
    duration_s = serializers.IntegerField(required=False, min_value=0,
                                          help_text="Simulated sources only: run time of the fake workload "
                                                    "(default: the source's `workload_duration_s`, else until "
                                                    "the lease ends).")
    exit_code = serializers.IntegerField(required=False, min_value=0, max_value=255,
                                         help_text="Simulated sources only: the fake workload's exit code when its "
                                                   "time is up (default 0).")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["kind"] == "session":
            extra = sorted(set(attrs) - {"kind"})
            if extra:
                raise serializers.ValidationError({extra[0]: ["not allowed on a session binding: it starts nothing"]})
        elif attrs["kind"] == "process":
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


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}],
                      "description": "A source name, or a list of source names (any of them)."})
class SourceNamesField(serializers.Field[Any, Any, Any, Any]):
    def to_internal_value(self, data: Any) -> str | list[str]:
        """As given (a name stays a name, so the lease shows what was asked)."""
        names = [data] if isinstance(data, str) else data
        if not isinstance(names, list) or not names or not all(
                isinstance(n, str) and 0 < len(n) <= 64 for n in names):
            raise serializers.ValidationError("a source name or a non-empty list of source names")
        return cast("str | list[str]", data)

    def to_representation(self, value: Any) -> Any:
        return value


class SelectorSerializer(StrictSerializer):
    """Where a lease may run; every part given must hold (allocation.policy.where)."""

    # The metaclass takes declared fields off the class, so this does not shadow Field.source.
    source = SourceNamesField(required=False,  # type: ignore[assignment]
                              help_text="Only hosts of this source (or of any of these).")
    host = serializers.CharField(required=False, max_length=255, help_text="Only this host (its name).")
    labels = serializers.DictField(child=serializers.CharField(max_length=255, allow_blank=True), required=False,
                                   help_text="Only hosts carrying every one of these labels (Kubernetes node "
                                             "labels; `labels:` of an ssh host in the config).")


class LeaseCreateSerializer(StrictSerializer):
    # A name, resolved by the service with the rest of the request in one query (an unknown pool
    # is still a 400 `invalid` on this field, with the message SlugRelatedField gave).
    pool = serializers.CharField(max_length=64, help_text="Name of the pool to draw GPUs from.")
    gpus = serializers.IntegerField(min_value=1, max_value=4096, help_text="How many GPUs.")
    model = serializers.CharField(required=False, allow_blank=True, max_length=255, default="",
                                  help_text="Case-insensitive substring of the model name; `A100|H100` "
                                            "accepts several. All GPUs of a lease are of one model.")
    min_memory_mb = serializers.IntegerField(required=False, min_value=0, max_value=10**9, default=0,
                                             help_text="Each GPU has at least this much memory, MiB.")
    # As long as the column holds (from the model, so the two cannot drift): a longer value is a
    # 400 naming the field here, not an overflow in the database.
    min_driver_version = serializers.RegexField(r"^(\d+(\.\d+)*)?$", required=False, default="", allow_blank=True,
                                                max_length=_max_length(Lease, "min_driver_version"),
                                                help_text="Hosts with at least this NVIDIA driver version.")
    min_cuda_version = serializers.RegexField(r"^(\d+(\.\d+)*)?$", required=False, default="", allow_blank=True,
                                              max_length=_max_length(Lease, "min_cuda_version"),
                                              help_text="Hosts with at least this CUDA version.")
    team = serializers.CharField(required=False, allow_null=True, max_length=64, default=None,
                                 help_text="Team to charge; may be left out when you are in one team.")
    priority_class = serializers.CharField(required=False, allow_null=True, max_length=64, default=None,
                                           help_text="Priority class name; `default` when left out.")
    ttl_seconds = serializers.IntegerField(required=False, min_value=1, allow_null=True, default=None,
                                           help_text="Seconds a granted lease lives without renewal "
                                                     "(server default when left out).")
    same_host = serializers.BooleanField(required=False, default=True,
                                         help_text="All GPUs on one host (true) or spread over hosts (false).")
    requeue_on_loss = serializers.BooleanField(required=False, default=False,
                                               help_text="When its host is lost, queue the lease again.")
    binding = BindingSerializer(required=False, allow_null=True, default=None,
                                help_text="Workload to start on the granted GPUs; null for none. The lease is "
                                          "placed only on hosts whose source can start it (ssh: process; "
                                          "kubernetes: pod).")
    selector = SelectorSerializer(required=False, allow_null=True, default=None,
                                  help_text="Where it may run: `{source, host, labels}`; null for anywhere.")

    def validate_ttl_seconds(self, value: int | None) -> int | None:
        limit = settings.GPUPOOL["MAX_TTL_S"]
        if value is not None and value > limit:
            raise serializers.ValidationError(f"at most {limit} seconds")
        return value


class RenewSerializer(StrictSerializer):
    ttl_seconds = serializers.IntegerField(required=False, min_value=1, allow_null=True, default=None,
                                           help_text="New TTL in seconds; the lease's own TTL when left out.")


class RenewQuerySerializer(serializers.Serializer[Any]):
    """The query of `renew/`: `?keep=true` (admins only) exempts the lease from idle reclaim."""

    keep = serializers.BooleanField(required=False, default=False,
                                    help_text="Exempt the lease from idle reclaim for good (pool admins only; "
                                              "others get 403 keep_requires_admin).")


class ReleaseSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="",
                                   help_text="Why, for the audit trail.")


class ForgetWorkloadsSerializer(StrictSerializer):
    """The body of `hosts/{id}/forget-workloads/`."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="",
                                   help_text="Why the host is gone for good, for the audit trail.")
    force = serializers.BooleanField(required=False, default=False,
                                     help_text="Forget even though the host is not offline (a stop could still "
                                               "succeed there); without it such a host is 409 host_not_offline.")


class ForgottenWorkloadsSerializer(serializers.Serializer[Any]):
    """The answer of `hosts/{id}/forget-workloads/`."""

    host = HostSerializer(read_only=True, help_text="The host, as GET hosts/{id}/ shows it.")
    leases = serializers.ListField(child=serializers.UUIDField(), read_only=True,
                                   help_text="The leases whose workloads were forgotten (their GPUs freed).")
    gpus_freed = serializers.IntegerField(read_only=True, help_text="GPUs freed.")


PENDING_CODE_HELP = ("Why a pending lease waits, as a stable code beside `reason` (empty once it is not "
                     "pending; filter with `?pending_code=`): " + codes.documented() + ".")
STOPPING_HELP = ("Set while the lease has ended but keeps its GPUs until its workload is stopped (or its "
                 "preemption notice runs out); null otherwise. A failed stop is retried with backoff "
                 "(5 s doubling to 5 min; every 30 min after a permanent error) and the GPUs are never "
                 "freed without a stop, unless an admin forgets the host's workloads.")
EXIT_CODE_HELP = ("The workload's exit code once it ended on its own: a process's exit status (128+N when "
                  "signal N killed it), a pod's failed container's code (0 when the pod succeeded). Null while "
                  "it runs, for a lease without a workload, and when gpupool ended it (release, expiry, "
                  "preemption, loss: `state` and `reason` say which). A lease whose workload ended on its own "
                  "is `released` with this code and the reason in words.")
STOPPING_SCHEMA: dict[str, Any] = {
    "type": "object", "nullable": True, "description": STOPPING_HELP,
    "properties": {
        "since": {"type": "string", "format": "date-time", "description": "When the lease ended."},
        "attempts": {"type": "integer", "description": "Failed attempts at stopping the workload so far."},
        "last_error": {"type": "string", "description": "Why the last attempt failed; empty before any failed."},
        "permanent": {"type": "boolean", "description": "The last error will not pass by itself (a changed host "
                                                        "key, a host gone from the configuration): retried "
                                                        "slowly, an admin may have to act."},
        "last_attempt_at": {"type": "string", "format": "date-time", "nullable": True,
                            "description": "When the last failed attempt ended."},
        "next_attempt_at": {"type": "string", "format": "date-time", "nullable": True,
                            "description": "When the next attempt is planned (sooner when its host answers "
                                           "discovery again)."},
    },
}


class LeaseSerializer(serializers.ModelSerializer[Any]):
    state = serializers.ChoiceField(choices=LeaseState.choices, read_only=True,
                                    help_text="pending → granted → bound → released | expired | preempted "
                                              "| failed | lost.")
    team = serializers.CharField(source="team.name", read_only=True, help_text="Team charged.")
    user = serializers.CharField(source="user.username", read_only=True, help_text="Who asked.")
    pool = serializers.CharField(source="pool.name", read_only=True, help_text="Pool.")
    priority_class = serializers.CharField(source="priority_class.name", read_only=True,
                                           help_text="Priority class name.")
    host = serializers.CharField(source="host.name", read_only=True, default=None, allow_null=True,
                                 help_text="Host of the granted GPUs (first host when spread); null while pending.")
    gpus = serializers.SerializerMethodField(help_text="UUIDs of the granted GPUs (empty while pending).")
    binding = serializers.SerializerMethodField(help_text="The workload with its live status, or null.")
    preempted_by = serializers.UUIDField(source="preempted_by_id", read_only=True, allow_null=True,
                                         help_text="Lease that preempted this one, or null.")
    stopping = serializers.SerializerMethodField(help_text=STOPPING_HELP)
    exit_code = serializers.SerializerMethodField(help_text=EXIT_CODE_HELP)

    class Meta:
        model = Lease
        fields = ["id", "state", "team", "user", "pool", "gpu_count", "gpus", "host", "model",
                  "min_memory_mb", "min_driver_version", "min_cuda_version", "same_host", "selector",
                  "priority_class", "borrowed", "requeue_on_loss", "ttl_seconds", "created_at",
                  "granted_at", "expires_at", "ended_at", "reason", "pending_code", "queue_position",
                  "estimated_start", "binding", "preempted_by", "warning", "idle_exempt", "stopping", "exit_code"]
        read_only_fields = fields
        extra_kwargs = {
            "id": {"help_text": "Lease id (UUID)."},
            "gpu_count": {"help_text": "GPUs asked for."},
            "model": {"help_text": "Model pattern asked for (empty: any)."},
            "min_memory_mb": {"help_text": "Minimum memory per GPU asked for, MiB."},
            "min_driver_version": {"help_text": "Minimum driver version asked for."},
            "min_cuda_version": {"help_text": "Minimum CUDA version asked for."},
            "same_host": {"help_text": "Whether all GPUs must be on one host."},
            "selector": {"help_text": "Where it may run (`{source, host, labels}`); empty: anywhere."},
            "borrowed": {"help_text": "Granted beyond the team's guaranteed share (may be reclaimed)."},
            "requeue_on_loss": {"help_text": "Queued again when its host is lost."},
            "ttl_seconds": {"help_text": "Lifetime without renewal, seconds."},
            "created_at": {"help_text": "When it was requested."},
            "granted_at": {"help_text": "When GPUs were granted; null while pending."},
            "expires_at": {"help_text": "When a granted lease expires unless renewed."},
            "ended_at": {"help_text": "When it ended; null while active."},
            "reason": {"help_text": "Why it is pending, or why it ended, in words."},
            "pending_code": {"help_text": PENDING_CODE_HELP},
            "queue_position": {"help_text": "1-based place in its pool's queue while pending; null otherwise."},
            "estimated_start": {"help_text": "When a pending lease is expected to start, if the scheduler "
                                             "can tell; null otherwise."},
            "warning": {"help_text": "A standing warning (idle reclaim: its GPUs sat idle and it will be "
                                     "reclaimed unless their utilisation rises); empty when none."},
            "idle_exempt": {"help_text": "Exempt from idle reclaim (an admin renewed it with keep=true)."},
        }

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_gpus(self, lease: Lease) -> list[str]:
        # Uses the prefetched links (see allocation.selectors.lease_list): no query per lease.
        links = [link for link in lease.gpu_links.all() if link.active or lease.state in ENDED]
        return [link.gpu.uuid for link in sorted(links, key=lambda lk: (lk.gpu.host_id, lk.gpu.index))]

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "kind": {"type": "string", "description": "process or pod"},
        "spec": {"type": "object", "description": "The binding as requested."},
        "status": {"type": "object", "description": "Live status: state (starting, running, succeeded, failed, "
                                                    "gone; stopping while its workload is being stopped, then "
                                                    "stopped or forgotten), exit_code, reason, handle, and `stop` "
                                                    "(the attempts at stopping it).",
                   "properties": {
                       "state": {"type": "string", "description": "waiting for grant, starting, running; how "
                                 "it ended on its own: succeeded (exit 0), failed (another code, or it never "
                                 "started), gone (removed outside gpupool); or stopping, stopped, forgotten "
                                 "when gpupool ended it."},
                       "exit_code": {"type": "integer", "nullable": True,
                                     "description": "As the lease's `exit_code` (set once it ended on its own)."},
                       "reason": {"type": "string", "description": "How it ended, in words."}}}}})
    def get_binding(self, lease: Lease) -> dict[str, Any] | None:
        if not lease.binding_spec:
            return None
        return {"kind": lease.binding_kind, "spec": lease.binding_spec,
                "status": lease.binding_status or {"state": "waiting for grant"}}

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_exit_code(self, lease: Lease) -> int | None:
        return lease.exit_code

    @extend_schema_field(STOPPING_SCHEMA)
    def get_stopping(self, lease: Lease) -> dict[str, Any] | None:
        return stopping_view(lease.state, lease.ending_since, lease.binding_status,
                             serializers.DateTimeField().to_representation)


class AuditEventSerializer(serializers.ModelSerializer[Any]):
    lease = serializers.UUIDField(source="lease_id", read_only=True, allow_null=True,
                                  help_text="Lease concerned, or null.")

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "action", "object_type", "object_id", "lease", "message", "data"]
        read_only_fields = fields
        extra_kwargs = {
            "id": {"help_text": "Numeric id."},
            "at": {"help_text": "When it happened."},
            "actor": {"help_text": "User name, or system:<component>."},
            "action": {"help_text": "What happened: lease.granted, host.drain, quota.update…"},
            "object_type": {"help_text": "Kind of object acted on."},
            "object_id": {"help_text": "Id of the object acted on."},
            "message": {"help_text": "Who and why, in words."},
            "data": {"help_text": "Details (from/to states, GPUs, before/after values)."},
        }
