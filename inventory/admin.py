"""Django admin for the inventory. Pool admins (is_staff) may use it without per-model permissions,
as they may in the API. Derived fields (GPU and host state) are read-only: they follow from what
the source reports and what an admin asked, through the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from core.roles import is_pool_admin
from inventory.models import Gpu, GpuSample, Host, Pool, Source
from inventory.selectors import pool_list

admin.site.site_header = "gpupool administration"
admin.site.site_title = "gpupool admin"
admin.site.index_title = "Pools, fleet, teams and leases"
admin.site.site_url = "/"


class PoolAdminAccess:
    """Pool admins get the same powers here as in the API and dashboard."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_pool_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_pool_admin(request.user)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return is_pool_admin(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_pool_admin(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_pool_admin(request.user)


class ReadOnlyAccess(PoolAdminAccess):
    """Rows written only by the system (telemetry, audit, ledgers): look, never touch."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Pool)
class PoolAdmin(PoolAdminAccess, admin.ModelAdmin[Pool]):
    list_display = ["name", "description", "capacity", "allocated", "free", "created_at"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pool]:
        return pool_list()

    @admin.display(ordering="capacity")
    def capacity(self, obj: Pool) -> int:
        return obj.capacity

    @admin.display(ordering="allocated")
    def allocated(self, obj: Pool) -> int:
        return obj.allocated

    @admin.display(ordering="free")
    def free(self, obj: Pool) -> int:
        return obj.free


@admin.register(Source)
class SourceAdmin(PoolAdminAccess, admin.ModelAdmin[Source]):
    list_display = ["name", "kind", "pool", "interval_s", "last_discovery_at", "key_stored", "has_error"]
    list_filter = ["kind", "pool"]
    search_fields = ["name", "last_error"]
    # The encrypted private key is never shown, not even as ciphertext: `apply` sets it.
    exclude = ["secret"]
    readonly_fields = ["key_stored", "last_discovery_at", "last_error", "telemetry_at", "telemetry_error"]

    @admin.display(boolean=True, description="secrets stored")
    def key_stored(self, obj: Source) -> bool:
        return bool(obj.secret)

    @admin.display(boolean=True, description="error")
    def has_error(self, obj: Source) -> bool:
        return bool(obj.last_error)


@admin.register(Host)
class HostAdmin(PoolAdminAccess, admin.ModelAdmin[Host]):
    list_display = ["name", "source", "state", "reported_state", "admin_state", "driver_version", "cuda_version",
                    "foreign_gpus", "last_seen", "has_error"]
    list_filter = ["state", "admin_state", "source__kind", "source"]
    search_fields = ["name", "address", "error"]
    list_select_related = ["source"]
    # State goes through cordon/drain/uncordon (audited), never a raw edit.
    readonly_fields = ["state", "reported_state", "admin_state", "foreign_gpus", "last_seen", "offline_since",
                       "error", "probe_failures", "next_probe_at", "driver_version", "cuda_version"]
    # The cordon/drain/uncordon actions end leases, so allocation adds them (allocation.admin):
    # inventory never imports allocation.

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False  # hosts come from discovery

    @admin.display(boolean=True, description="error")
    def has_error(self, obj: Host) -> bool:
        return bool(obj.error)


@admin.register(Gpu)
class GpuAdmin(PoolAdminAccess, admin.ModelAdmin[Gpu]):
    list_display = ["uuid", "host", "index", "model", "memory_mb", "mig_profile", "pool", "state", "health",
                    "utilization_pct", "temperature_c"]
    list_filter = ["state", "pool", "health", "foreign", "gone", "model"]
    search_fields = ["uuid", "host__name", "model", "mig_profile"]
    list_select_related = ["host", "pool"]
    raw_id_fields = ["host", "parent"]
    # Moving a GPU between pools goes through the Capacity page (preview, audit), not this form.
    readonly_fields = ["pool", "state", "leased", "foreign", "gone", "utilization_pct", "memory_used_mb",
                       "temperature_c", "power_w", "telemetry_at"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False  # GPUs come from discovery


@admin.register(GpuSample)
class GpuSampleAdmin(ReadOnlyAccess, admin.ModelAdmin[GpuSample]):
    list_display = ["gpu", "at", "utilization_pct", "memory_used_mb", "temperature_c", "power_w"]
    list_filter = ["gpu__pool"]
    search_fields = ["gpu__uuid", "gpu__host__name"]
    date_hierarchy = "at"
    list_select_related = ["gpu"]
