"""Inventory endpoints with the admin actions that involve leases: cordon, drain, uncordon,
forget-workloads (of a host gone for good), and the capacity moves (of a GPU, a host, or GPUs and
hosts into a pool; previews with `?dry_run=true`: see allocation.api.moves). Pool listings gain
pending counts; GPUs gain the lease that holds them."""

from __future__ import annotations

from typing import Any

from django.db import connection
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema, extend_schema_view
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from allocation.api.host_bulk import HostBulkAnswerSerializer, HostBulkSerializer, bulk_call
from allocation.api.moves import (
    CONFLICT,
    DRY_RUN_DOC,
    CapacityMoveSerializer,
    GpuMoveSerializer,
    HostMoveSerializer,
    MoveQuerySerializer,
    PoolMoveSerializer,
    is_dry_run,
    move_answer,
    preview_or_move,
)
from allocation.api.serializers import ForgetWorkloadsSerializer, ForgottenWorkloadsSerializer
from allocation.models import LeaseGpu
from allocation.selectors import Pending, pending_by_pool
from allocation.selectors.capacity_preview import capacity_preview
from allocation.services.admin import host_admin_action, host_forget_workloads
from allocation.services.capacity import capacity_move
from core.api.permissions import IsPoolAdmin
from core.db.statements import execute
from core.roles import is_pool_admin
from inventory.api import views as inventory_views
from inventory.api.serializers import GpuSerializer, HostSerializer
from inventory.models import Gpu, Pool
from inventory.selectors import gpu_list, host_list

MOVED = OpenApiResponse(CapacityMoveSerializer, description="What the move did (`dry_run: false`), or with "
                                                             "`?dry_run=true` what it would do.")
GPU_MOVED = OpenApiResponse(
    PolymorphicProxySerializer(component_name="GpuMoveResult", resource_type_field_name=None,
                               serializers=[GpuSerializer, CapacityMoveSerializer]),
    description="The GPU after the move (a Gpu); with `?dry_run=true`, the preview (a CapacityMove).")


@extend_schema_view(list=extend_schema(summary="List pools"), retrieve=extend_schema(summary="Read a pool"))
class PoolViewSet(inventory_views.PoolViewSet):
    def decorate(self, pools: list[Pool]) -> list[Pool]:
        pools = super().decorate(pools)
        pending = pending_by_pool([p.pk for p in pools])
        for pool in pools:
            pool.pending, pool.pending_gpus = pending.get(pool.pk, Pending(0, 0))
        return pools

    @extend_schema(summary="Move GPUs and whole hosts into this pool (pool admins)", request=PoolMoveSerializer,
                   parameters=[MoveQuerySerializer], responses={200: MOVED, 409: CONFLICT},
                   description="The dashboard's capacity page as one call: the picked GPUs and whole hosts move "
                               "to this pool; hosts holding leases are cordoned first (`mode: keep`) or drained "
                               "(`mode: drain`). " + DRY_RUN_DOC)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def move(self, request: Request, name: str | None = None) -> Response:
        pool = self.get_object()
        body = PoolMoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        return Response(preview_or_move(request, pool=pool, gpu_ids=data["gpu_ids"], host_ids=data["host_ids"],
                                        mode=data["mode"], held_alone=data["held_alone"],
                                        fingerprint=data["fingerprint"]))


@extend_schema_view(list=extend_schema(summary="List hosts"), retrieve=extend_schema(summary="Read a host"))
class HostViewSet(inventory_views.HostViewSet):
    def _admin_action(self, request: Request, verb: str) -> Response:
        host = host_admin_action(host=self.get_object(), verb=verb, actor=request.user.username)
        return Response(HostSerializer(host_list().get(pk=host.pk)).data)

    @extend_schema(summary="Cordon a host (pool admins)", request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def cordon(self, request: Request, pk: str | None = None) -> Response:
        """Stop new leases on this host; running leases continue."""
        return self._admin_action(request, "cordon")

    @extend_schema(summary="Drain a host (pool admins)", request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        """Cordon, and end the host's leases with notice (their grace period applies)."""
        return self._admin_action(request, "drain")

    @extend_schema(summary="Uncordon a host (pool admins)", request=None, responses=HostSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def uncordon(self, request: Request, pk: str | None = None) -> Response:
        """Accept new leases on this host again."""
        return self._admin_action(request, "uncordon")

    @extend_schema(summary="Cordon, drain or uncordon many hosts (pool admins)", request=HostBulkSerializer,
                   responses={200: HostBulkAnswerSerializer, 409: CONFLICT},
                   description="The hosts named, or every host the fleet's filters match, as the dashboard's "
                               "bulk bar does; `dry_run: true` answers the preview (GPUs in service per pool "
                               "before and after, leases preempted) and its `fingerprint`. Audited per host.")
    @action(detail=False, methods=["post"], url_path="bulk", permission_classes=[IsPoolAdmin])
    def bulk(self, request: Request) -> Response:
        body = HostBulkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(bulk_call(body.validated_data, request.user.username))

    @extend_schema(summary="Move a whole host to another pool (pool admins)", request=HostMoveSerializer,
                   parameters=[MoveQuerySerializer], responses={200: MOVED, 409: CONFLICT},
                   description="Every GPU of the host moves; if it holds leases it is cordoned first "
                               "(`mode: keep`) or drained (`mode: drain`). " + DRY_RUN_DOC)
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def move(self, request: Request, pk: str | None = None) -> Response:
        host = self.get_object()
        body = HostMoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        return Response(preview_or_move(request, pool=data["pool"], host_ids=[host.pk], mode=data["mode"],
                                        fingerprint=data["fingerprint"]))

    @extend_schema(summary="Forget the workloads of a host gone for good (pool admins)",
                   request=ForgetWorkloadsSerializer, responses=ForgottenWorkloadsSerializer)
    @action(detail=True, methods=["post"], url_path="forget-workloads", permission_classes=[IsPoolAdmin])
    def forget_workloads(self, request: Request, pk: str | None = None) -> Response:
        """Free the GPUs of this host's ended leases whose workloads could not be stopped (their
        lease shows `stopping`), without a stop: for a host that is gone for good (decommissioned,
        reinstalled, out of the configuration). Until then such GPUs stay held, so that none is
        handed out under a workload that still runs. 409 `host_not_offline` while the host
        answers discovery, unless `force`. Audited per lease and for the host."""
        body = ForgetWorkloadsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        host = self.get_object()
        leases, freed = host_forget_workloads(host=host, actor=request.user.username, **body.validated_data)
        return Response({"host": HostSerializer(host_list().get(pk=host.pk)).data, "leases": leases,
                         "gpus_freed": freed})


@extend_schema_view(list=extend_schema(summary="List GPUs"), retrieve=extend_schema(summary="Read a GPU"))
class GpuViewSet(inventory_views.GpuViewSet):
    _gpu_leases: dict[int, str]
    _gpu_sharing: dict[int, dict[str, Any]]

    def holders(self, gpu_ids: list[int]) -> dict[int, str]:
        """Which lease holds each GPU: one query for the whole page."""
        if not gpu_ids:
            return {}
        with connection.cursor() as cur:  # one array parameter: a fixed, prepared statement
            execute(cur, f"SELECT gpu_id, lease_id FROM {LeaseGpu._meta.db_table} "
                         "WHERE active AND gpu_id = ANY(%s)", [gpu_ids])
            return {gid: str(lid) for gid, lid in cur.fetchall()}

    def holder_teams(self, gpu_ids: list[int]) -> dict[int, str]:
        """The team of the lease holding each GPU, "" for a team the requester is not in (as the
        dashboard's "held by another team"); pool admins see every team."""
        if not gpu_ids:
            return {}
        user: Any = self.request.user  # authenticated: the viewset's permissions say so
        mine = None if is_pool_admin(user) else set(user.teams.values_list("name", flat=True))
        return {gid: team if mine is None or team in mine else "" for gid, team in LeaseGpu.objects.filter(
            active=True, gpu_id__in=gpu_ids).values_list("gpu_id", "lease__team__name")}

    def _describe(self, gpu: Gpu) -> None:
        """What the serializer reads besides the row: the holding lease and time-slicing."""
        self._gpu_leases = self.holders([gpu.pk])
        self._gpu_sharing = self.time_slicing([{"id": gpu.pk, "physical_uuid": gpu.physical_uuid,
                                                "host_id": gpu.host_id, "shared_replicas": gpu.shared_replicas}])

    def get_serializer_context(self) -> dict[str, Any]:
        ctx = dict(super().get_serializer_context())
        ctx["gpu_leases"] = getattr(self, "_gpu_leases", {})
        ctx["gpu_sharing"] = getattr(self, "_gpu_sharing", {})
        return ctx

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        gpu = self.get_object()
        self._describe(gpu)
        return Response(self.get_serializer(gpu).data)

    @extend_schema(summary="Move a GPU to another pool (pool admins)", request=GpuMoveSerializer,
                   parameters=[MoveQuerySerializer], responses={200: GPU_MOVED, 409: CONFLICT})
    @action(detail=True, methods=["post"], permission_classes=[IsPoolAdmin])
    def move(self, request: Request, uuid: str | None = None) -> Response:
        """Move this GPU (with its MIG slices) to another pool; a running lease keeps it until it ends.
        Answers the GPU as it is after the move; with `?dry_run=true`, the preview instead (changing
        nothing): what the move would do, exactly as the dashboard's capacity page previews it. A
        confirm may carry the preview's `fingerprint`: 409 `preview_stale` (nothing changed) if the
        move would now do otherwise.

        The same locked service as the dashboard's capacity page; moving a GPU to the pool it is in
        changes nothing and answers as a move would (idempotent)."""
        gpu = self.get_object()
        body = GpuMoveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        target = body.validated_data["pool"]
        if is_dry_run(request):
            preview = capacity_preview(pool=target, gpu_ids=[gpu.pk], held_alone="follow_lease")
            return Response(move_answer(preview, dry_run=True))
        if gpu.pool_id != target.pk:
            capacity_move(pool=target, gpu_ids=[gpu.pk], actor=request.user.username, held_alone="follow_lease",
                          fingerprint=body.validated_data["fingerprint"])
        gpu = gpu_list().get(pk=gpu.pk)
        self._describe(gpu)
        return Response(self.get_serializer(gpu).data)
