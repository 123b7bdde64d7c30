"""The lease's `topology` field: `{within: nvlink|host|LEVEL, mode: required|preferred}`.

Kept beside allocation/api/serializers.py (which stays as it is): the create and output
serializers of leases, with the field added. Its shape is checked as any field (400 `invalid`
naming `topology`); a level the configuration does not define is a 400 `unknown_topology_level`
that lists the levels there are (allocation.policy.topology has the words)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from allocation.api import serializers as base
from allocation.models import SchedulerSettings
from allocation.policy.topology import MODES, PREFERRED, known_levels, resolve_level, topology_problems
from core.errors import DomainError

HELP = ("Keep the lease's GPUs within one NVLink island (`nvlink`), one host (`host`) or one domain of a "
        "configured level (`rack`, `block`, `zone`…, see `topology:` of the configuration); `mode: required` "
        "waits rather than place it across (pending code `topology`), `preferred` (the default) places it within "
        "one when it can. Null: the default (multi-GPU leases prefer one NVLink island; multi-host leases one "
        "domain of the innermost level).")


class TopologySerializer(base.StrictSerializer):
    within = serializers.CharField(max_length=317, help_text="nvlink, host, or a configured level's label key.")
    mode = serializers.ChoiceField(choices=MODES, required=False, default=PREFERRED,
                                   help_text="required: wait rather than place across; preferred: within if it can.")


class LeaseCreateSerializer(base.LeaseCreateSerializer):
    topology = TopologySerializer(required=False, allow_null=True, default=None, help_text=HELP)

    def validate_topology(self, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        levels = SchedulerSettings.current().topology or []
        problems = topology_problems(value, levels)
        if problems:
            raise DomainError(f"topology: {'; '.join(problems)}", code="unknown_topology_level",
                              details={"field": "topology", "levels": list(known_levels(levels))})
        # Stored as the configured level's full key: `zone` names `topology.kubernetes.io/zone`.
        return {"within": resolve_level(value["within"], levels), "mode": value.get("mode", PREFERRED)}


class LeaseSerializer(base.LeaseSerializer):
    topology = serializers.JSONField(read_only=True, help_text="The topology asked for (`{within, mode}`); "
                                                               "empty: the default.")

    class Meta(base.LeaseSerializer.Meta):
        fields = [*base.LeaseSerializer.Meta.fields, "topology"]
        read_only_fields = fields
