"""Read-only inventory endpoints. Admin actions (cordon, drain, move) that touch leases are added
by allocation.api.fleet, which subclasses these (inventory never imports allocation)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.viewsets import ReadOnlyViewSet
from inventory.api.serializers import GpuSerializer, HostSerializer, PoolSerializer
from inventory.filtersets import GpuFilterSet, HostFilterSet, PoolFilterSet
from inventory.models import Gpu, Host, Pool
from inventory.replicas import summarise, unit_key, unit_members
from inventory.selectors import gpu_list, host_list, pool_stats


class PoolViewSet(ReadOnlyViewSet):
    """GPU pools with capacity, allocation and per-model counts."""

    serializer_class = PoolSerializer
    filterset_class = PoolFilterSet
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Pool]:
        return Pool.objects.order_by("name")

    def decorate(self, pools: list[Pool]) -> list[Pool]:
        """Sets the counts the serializer reads, for a page of pools in one grouped query (pools are
        few, GPUs many: aggregating them per pool in the listing query cost ~100 ms at 16,000)."""
        stats = pool_stats([p.pk for p in pools])
        for pool in pools:
            row = stats.get(pool.pk, {})
            pool.capacity, pool.allocated, pool.free = (row.get(k, 0) for k in ("capacity", "allocated", "free"))
            pool.per_model = row.get("models", {})
        return pools

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(list(self.filter_queryset(self.get_queryset())))
        return self.get_paginated_response(self.get_serializer(self.decorate(list(page or [])), many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(self.decorate([self.get_object()])[0]).data)


class HostViewSet(ReadOnlyViewSet):
    """Hosts and Kubernetes nodes with their state, driver and CUDA versions."""

    serializer_class = HostSerializer
    filterset_class = HostFilterSet

    def get_queryset(self) -> QuerySet[Host]:
        return host_list()


GPU_COLUMNS = ("uuid", "index", "host_id", "pool_id", "parent_id", "model", "memory_mb", "mig_profile", "state",
               "health", "health_reason", "shared_replicas", "physical_uuid", "utilization_pct", "memory_used_mb",
               "temperature_c", "power_w", "telemetry_at", "host__name", "pool__name", "parent__uuid")


GPU_ROW_FIELDS = ("id", *GPU_COLUMNS)


class GpuViewSet(ReadOnlyViewSet):
    """GPUs and MIG slices with state and latest telemetry."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilterSet
    lookup_field = "uuid"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Gpu]:
        # Host id (discovery order) rather than host name: the GPU's own host_id index then serves
        # `?limit=100` pages without sorting the whole fleet (0.5 ms instead of ~100 ms at 16,000).
        # Only the columns the representation reads: hosts carry JSON labels and taints that would
        # otherwise be decoded 100 times a page.
        return gpu_list().order_by("host_id", "parent_id", "index", "uuid").only(*GPU_COLUMNS)

    def holders(self, gpu_ids: list[int]) -> dict[int, str]:
        """Which lease holds each of these GPUs; allocation's subclass knows (inventory does not)."""
        return {}

    def holder_teams(self, gpu_ids: list[int]) -> dict[int, str]:
        """The team holding each of these GPUs, "" where the requester may not see it;
        allocation's subclass knows (inventory does not)."""
        return {}

    def time_slicing(self, rows: Iterable[Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
        """Per time-sliced GPU of `rows` (with id, physical_uuid, host_id, shared_replicas), its
        unit's replicas (inventory.replicas) as JSON. Two queries when some row is time-sliced,
        none otherwise."""
        shared = {r["id"]: unit_key(r["physical_uuid"], r["host_id"]) for r in rows if r["shared_replicas"] > 1}
        if not shared:
            return {}
        members = unit_members(set(shared.values()))
        units = summarise(members, self.holder_teams([m[0] for m in members if m[4]]))
        return {gid: units[key].as_dict() for gid, key in shared.items() if key in units}

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A page rendered from values() rows (GpuSerializer.row_representation): model instances
        of each GPU with its host, pool and parent cost ~30 µs a row."""
        query = self.filter_queryset(self.get_queryset()).values(*GPU_ROW_FIELDS)
        page = self.paginate_queryset(query)
        rows = list(page if page is not None else query)
        holders = self.holders([row["id"] for row in rows])
        sharing = self.time_slicing(rows)
        tz = timezone.get_current_timezone()
        data = [GpuSerializer.row_representation(row, holders.get(row["id"]), tz, sharing.get(row["id"]))
                for row in rows]
        return self.get_paginated_response(data) if page is not None else Response(data)
