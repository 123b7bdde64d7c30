"""Teams (with fair-share standing), quotas (PATCH by pool admins) and priority classes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.api.team_serializers import (
    PriorityClassSerializer,
    QuotaSerializer,
    QuotaUpdateSerializer,
)
from allocation.api.team_tree import TeamTreeSerializer, set_tree_fields
from allocation.filtersets import QuotaFilterSet
from allocation.models import PriorityClass, Quota, Team
from allocation.policy.budgets import BudgetStatus
from allocation.selectors import fair_share_standing, quota_list, team_gpus_held, team_list
from allocation.services.admin import quota_set
from allocation.services.budgets import budget_statuses
from core.api.permissions import IsPoolAdmin, is_pool_admin
from core.api.viewsets import ReadOnlyViewSet


@extend_schema_view(list=extend_schema(summary="List teams", description="Your teams (admins: all)."),
                    retrieve=extend_schema(summary="Read a team", description="Another team is a 404."))
class TeamViewSet(ReadOnlyViewSet):
    serializer_class = TeamTreeSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Team]:
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Team.objects.none()
        return team_list(user=self.request.user)

    @staticmethod
    def _decorate(teams: list[Team]) -> list[Team]:
        """Sets usage, fair share and budgets on each team: three queries for the page, not three
        per team."""
        standing = fair_share_standing()
        held: dict[int, int] = {}
        for (team_id, _), in_pool in team_gpus_held([t.pk for t in teams]).items():
            held[team_id] = held.get(team_id, 0) + in_pool.gpus
        budgets: dict[str, list[BudgetStatus]] = {}
        for status in budget_statuses(team_ids=[t.pk for t in teams]):
            budgets.setdefault(status.budget.team, []).append(status)
        set_tree_fields(teams)
        for team in teams:
            team.budget_standing = budgets.get(team.name, [])
            row = standing.get(team.name, {})
            team.fair_share = row.get("fair_share", 0.0)
            team.decayed_usage_gpu_hours = row.get("decayed_gpu_hours", 0.0)
            team.gpus_held = held.get(team.pk, 0)
        return teams

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(self.get_serializer(self._decorate(list(page or [])), many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(self._decorate([self.get_object()])[0]).data)


@extend_schema_view(
    list=extend_schema(summary="List quotas", description="Quotas of your teams (admins: all), with usage."),
    retrieve=extend_schema(summary="Read a quota", description="Another team's quota is a 404."),
)
class QuotaViewSet(mixins.UpdateModelMixin, ReadOnlyViewSet):
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilterSet
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Quota]:
        qs = Quota.objects.select_related("team", "pool").order_by("team__name", "pool__name")
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return qs.none()
        return qs if is_pool_admin(self.request.user) else qs.filter(team__members=self.request.user.pk)

    def get_permissions(self) -> Sequence[Any]:
        return [IsPoolAdmin()] if self.action == "partial_update" else super().get_permissions()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # quota_list computes usage for every visible quota in three queries; the filters pick rows.
        ids = set(self.filter_queryset(self.get_queryset()).values_list("pk", flat=True))
        rows = [q for q in quota_list(user=request.user) if q.pk in ids]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(QuotaSerializer(page, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        row = next(q for q in quota_list(user=request.user) if q.pk == quota.pk)
        return Response(QuotaSerializer(row).data)

    @extend_schema(summary="Change a quota (pool admins)", request=QuotaUpdateSerializer,
                   responses=QuotaSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        body = QuotaUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        quota_set(quota=quota, guaranteed=data.get("guaranteed", quota.guaranteed),
                  limit=data.get("limit", quota.limit),
                  lending_limit=data.get("lending_limit", quota.lending_limit), actor=request.user.username)
        return self.retrieve(request, *args, **kwargs)


@extend_schema_view(list=extend_schema(summary="List priority classes"),
                    retrieve=extend_schema(summary="Read a priority class"))
class PriorityClassViewSet(ReadOnlyViewSet):
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.all()
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    pagination_class = None
