"""The chargeback report (`GET usage/`). The view only translates: allocation.economy.chargeback checks,
scopes and computes."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.economy.chargeback import UsageQuery, chargeback, report_json
from allocation.economy.usage import GROUP_BY
from allocation.models import LeaseUsage
from core.api.viewsets import ApiViewSet


class UsageQuerySerializer(serializers.Serializer[Any]):
    team = serializers.CharField(required=False, max_length=64, help_text="One team (default: all you may see).")
    pool = serializers.CharField(required=False, max_length=64, help_text="One pool (default: all).")
    since = serializers.DateTimeField(required=False, help_text="Window start, ISO 8601 (default: "
                                                                "the start of this month, UTC).")
    until = serializers.DateTimeField(required=False, help_text="Window end, ISO 8601 (default: now).")
    group_by = serializers.ChoiceField(choices=list(GROUP_BY), required=False, default="team",
                                       help_text="Grouping of the rows (day: UTC days).")


_ROW_FIELDS: dict[str, serializers.Field[Any, Any, Any, Any]] = {
    "team": serializers.CharField(required=False, help_text="The group's key, named after group_by: team, "
                                                            "pool, model, user, day (YYYY-MM-DD) or "
                                                            "department (a top-level team: its teams' sum)."),
    "gpu_hours": serializers.FloatField(help_text="GPU-hours (MIG slices and time-sliced replicas weighted)."),
    "idle_gpu_hours": serializers.FloatField(help_text="Of gpu_hours, those the GPUs sat allocated but idle: "
                                                       "below the idle threshold for the idle time (metered "
                                                       "from then, per UTC hour)."),
    "cost": serializers.FloatField(required=False, help_text="With prices set: cost of the priced GPU-hours."),
    "unpriced_gpu_hours": serializers.FloatField(required=False, help_text="With prices set: GPU-hours of "
                                                                           "models no price names."),
}
_REPORT = inline_serializer("UsageReport", {
    "since": serializers.DateTimeField(help_text="Window start (inclusive)."),
    "until": serializers.DateTimeField(help_text="Window end (exclusive)."),
    "group_by": serializers.CharField(help_text="The grouping: the key each row is named by."),
    "rows": inline_serializer("UsageRow", _ROW_FIELDS, many=True, help_text="One per group with usage, by key."),
    "total": inline_serializer("UsageTotal", {
        "gpu_hours": serializers.FloatField(help_text="GPU-hours of all rows."),
        "idle_gpu_hours": serializers.FloatField(help_text="Idle GPU-hours of all rows."),
        "cost": serializers.FloatField(required=False, help_text="With prices set: cost of all rows.")},
        help_text="The sums over the rows."),
})


class UsageViewSet(ApiViewSet):
    """One object, not a list: routed as `report` (pool.api.urls), so the schema says so too."""

    pagination_class = None
    queryset = LeaseUsage.objects.none()  # for the schema: the report is computed, not listed

    @extend_schema(
        summary="GPU-hours and cost (chargeback report)", parameters=[UsageQuerySerializer],
        responses=_REPORT,
        description="GPU-hours metered from grant to end per lease (a MIG slice counts its share of the GPU, "
                    "a time-sliced replica 1/N), clipped to [since, until), grouped by team, pool, model, user "
                    "or UTC day, with the idle GPU-hours among them; with prices configured, the cost. Members "
                    "see their teams' usage, pool admins everyone's. 400 (`invalid`, `invalid_window`, "
                    "`window_too_long`, `unknown_team`, `unknown_pool`) names the parameter; 403 `not_a_member` "
                    "for another team.")
    def report(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A plain dict, not the QueryDict: DRF would read `until=` in a QueryDict as absent.
        params = UsageQuerySerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        report = chargeback(user=request.user, query=UsageQuery(**params.validated_data))
        return Response(report_json(report))
