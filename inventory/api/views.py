"""Read-only inventory endpoints. Admin actions (cordon, drain, move) that touch leases are added
by allocation.api.fleet, which subclasses these (inventory never imports allocation)."""

from __future__ import annotations

from typing import Any

from inventory.api.serializers import GpuSerializer, HostSerializer, PoolSerializer
from inventory.filtersets import GpuFilterSet, HostFilterSet, PoolFilterSet
from inventory.selectors import gpu_list, host_list, pool_list, pool_per_model
from pool.api.viewsets import ReadOnlyViewSet


class PoolViewSet(ReadOnlyViewSet):
    """GPU pools with capacity, allocation and per-model counts."""

    serializer_class = PoolSerializer
    filterset_class = PoolFilterSet
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return pool_list()

    def get_serializer_context(self) -> dict[str, Any]:
        ctx = super().get_serializer_context()
        # One grouped query for every pool; a pool's share is looked up by pk in the serializer.
        ctx["per_model"] = pool_per_model(self.get_queryset().values_list("pk", flat=True))
        return ctx


class HostViewSet(ReadOnlyViewSet):
    """Hosts and Kubernetes nodes with their state, driver and CUDA versions."""

    serializer_class = HostSerializer
    filterset_class = HostFilterSet

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return host_list()


class GpuViewSet(ReadOnlyViewSet):
    """GPUs and MIG slices with state and latest telemetry."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilterSet
    lookup_field = "uuid"
    lookup_value_regex = "[^/]+"

    def get_queryset(self):  # type: ignore[no-untyped-def]
        return gpu_list()
