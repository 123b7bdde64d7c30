"""Inventory endpoints with the admin actions that involve leases: cordon, drain, uncordon, move.
Pool listings gain pending counts."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, Sum
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.models import LeaseGpu
from allocation.services_admin import capacity_move, host_admin_action
from inventory.api import views as inventory_views
from inventory.api.serializers import GpuMoveSerializer, GpuSerializer, HostSerializer
from inventory.selectors import gpu_list, host_list
from pool.api.permissions import IsPoolAdmin


class PoolViewSet(inventory_views.PoolViewSet):
    def get_queryset(self):  # type: ignore[no-untyped-def]
        return super().get_queryset().annotate(
            pending=Count("leases", filter=Q(leases__state="pending"), distinct=True),
            pending_gpus=Sum("leases__gpu_count", filter=Q(leases__state="pending"), default=0),
        )


class HostViewSet(inventory_views.HostViewSet):
    def _admin_action(self, request: Request, verb: str) -> Response:
        host = host_admin_action(host=self.get_object(), verb=verb, actor=request.user.username)
        return Response(HostSerializer(host_list().get(pk=host.pk)).data)

    @extend_schema(request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def cordon(self, request: Request, pk: str | None = None) -> Response:
        """Stop new leases on this host; running leases continue."""
        return self._admin_action(request, "cordon")

    @extend_schema(request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Cordon, and end the host's leases with notice (their grace period applies)."""
        return self._admin_action(request, "drain")

    @extend_schema(request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def uncordon(self, request: Request, pk: str | None = None) -> Response:
        """Accept new leases on this host again."""
        return self._admin_action(request, "uncordon")


class GpuViewSet(inventory_views.GpuViewSet):
    def get_serializer_context(self) -> dict[str, Any]:
        ctx = super().get_serializer_context()
        ctx["gpu_leases"] = getattr(self, "_gpu_leases", {})
        return ctx

    def paginate_queryset(self, queryset):  # type: ignore[no-untyped-def]
        page = super().paginate_queryset(queryset)
        rows = page if page is not None else list(queryset)
        # One query for the whole page: which lease holds each GPU.
        self._gpu_leases = {gid: str(lid) for gid, lid in LeaseGpu.objects.filter(
            active=True, gpu_id__in=[g.pk for g in rows]).values_list("gpu_id", "lease_id")}
        return page

    @extend_schema(request=GpuMoveSerializer, responses=GpuSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def move(self, request: Request, uuid: str | None = None) -> Response:
        """Move this GPU (with its MIG slices) to another pool."""
        gpu = self.get_object()
        body = GpuMoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        capacity_move(gpu_ids=[gpu.pk], pool=body.validated_data["pool"], actor=request.user.username)
        return Response(GpuSerializer(gpu_list().get(pk=gpu.pk)).data)
