from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle

from allocation.api.serializers import (
    LeaseCreateSerializer,
    LeaseSerializer,
    PriorityClassSerializer,
    QuotaSerializer,
    QuotaUpdateSerializer,
    ReleaseSerializer,
    RenewSerializer,
    TeamSerializer,
)
from allocation.filtersets import LeaseFilterSet, QuotaFilterSet
from allocation.leases import audit
from allocation.models import PriorityClass
from allocation.selectors import fair_share_standing, lease_list, quota_list, team_list
from allocation.services import lease_create, lease_release, lease_renew
from allocation.triggers import request_pass
from pool.api.permissions import IsPoolAdmin


class LeaseCreateThrottle(UserRateThrottle):
    scope = "lease_create"


class LeaseViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Leases of the caller's teams (pool admins see all). Another team's lease is a 404."""

    serializer_class = LeaseSerializer
    filterset_class = LeaseFilterSet

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return lease_list(user=self.request.user)

    def get_throttles(self):  # type: ignore[no-untyped-def]
        return [LeaseCreateThrottle()] if self.action == "create" else super().get_throttles()

    def _out(self, lease: Any, code: int = status.HTTP_200_OK) -> Response:
        return Response(LeaseSerializer(lease_list(user=self.request.user).get(pk=lease.pk)).data,
                        status=code)

    @extend_schema(request=LeaseCreateSerializer, responses={201: LeaseSerializer, 200: LeaseSerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                                description="Same key + same body returns the same lease.")])
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = LeaseCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["gpus"] = data.pop("gpus")
        key = request.headers.get("Idempotency-Key", "")[:255]
        lease, created = lease_create(user=request.user, idempotency_key=key, **data)
        return self._out(lease, status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=RenewSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def renew(self, request: Request, pk: str | None = None) -> Response:
        """Push the lease's expiry to now + TTL (a heartbeat)."""
        lease = self.get_object()
        body = RenewSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        lease = lease_renew(lease=lease, actor=request.user.username,
                            ttl_seconds=body.validated_data["ttl_seconds"])
        return self._out(lease)

    @extend_schema(request=ReleaseSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """End the lease (or cancel it while pending). Releasing twice is harmless."""
        lease = self.get_object()
        body = ReleaseSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        lease = lease_release(lease=lease, actor=request.user.username,
                              reason=body.validated_data["reason"])
        return self._out(lease)


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = TeamSerializer
    lookup_field = "name"

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return team_list(user=self.request.user)

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        standing = fair_share_standing()
        items = args[0] if args else None
        for team in (items if isinstance(items, list | tuple) else [items] if items is not None else []):
            s = standing.get(team.name, {})
            team.fair_share = s.get("fair_share", 0.0)
            team.decayed_usage_gpu_hours = s.get("decayed_gpu_hours", 0.0)
        return super().get_serializer(*args, **kwargs)

    def paginate_queryset(self, queryset):  # type: ignore[no-untyped-def]
        page = super().paginate_queryset(queryset)
        return list(page) if page is not None else None


class QuotaViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilterSet
    http_method_names = ["get", "patch", "head", "options"]

    def get_queryset(self):  # type: ignore[no-untyped-def]
        from allocation.models import Quota

        return Quota.objects.select_related("team", "pool")

    def get_permissions(self):  # type: ignore[no-untyped-def]
        return [IsPoolAdmin()] if self.action == "partial_update" else super().get_permissions()

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quotas = quota_list(user=request.user)
        ids = set(self.filter_queryset(self.get_queryset()).values_list("pk", flat=True))
        rows = [q for q in quotas if q.pk in ids]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(QuotaSerializer(page, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        rows = [q for q in quota_list(user=request.user) if q.pk == quota.pk]
        if not rows:
            from rest_framework.exceptions import NotFound

            raise NotFound()
        return Response(QuotaSerializer(rows[0]).data)

    @extend_schema(request=QuotaUpdateSerializer, responses=QuotaSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        quota = self.get_object()
        body = QuotaUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changes = {k: v for k, v in body.validated_data.items() if getattr(quota, k) != v}
        new_g = changes.get("guaranteed", quota.guaranteed)
        new_l = changes.get("limit", quota.limit)
        if new_l is not None and new_l < new_g:
            from pool.errors import DomainError

            raise DomainError(f"limit {new_l} is below guaranteed {new_g}", code="invalid_quota")
        with transaction.atomic():
            before = {k: getattr(quota, k) for k in changes}
            for key, value in changes.items():
                setattr(quota, key, value)
            quota.save()
            if changes:
                audit(actor=request.user.username, action="quota.update", obj=quota,
                      message=f"quota {quota.team.name}@{quota.pool.name}: {before} → {changes}",
                      data={"before": before, "after": changes}).save()
        request_pass(quota.pool_id)
        return self.retrieve(request, *args, **kwargs)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.partial_update(request, *args, **kwargs)


class PriorityClassViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = PriorityClassSerializer
    queryset = PriorityClass.objects.all()
    lookup_field = "name"
    pagination_class = None
