"""The time series in the Django admin: written by the system only, so read-only (for a look at
what was recorded; the pages and the API are where history is read)."""

from django.contrib import admin

from history.models import GpuPoint, ModelPoint, PoolPoint, TeamPoolPoint
from inventory.admin import ReadOnlyAccess


@admin.register(PoolPoint)
class PoolPointAdmin(ReadOnlyAccess, admin.ModelAdmin[PoolPoint]):
    list_display = ["pool", "step", "at", "capacity", "allocated", "free", "queue_length", "util_pct"]
    list_filter = ["step", "pool"]
    list_select_related = ["pool"]


@admin.register(TeamPoolPoint)
class TeamPoolPointAdmin(ReadOnlyAccess, admin.ModelAdmin[TeamPoolPoint]):
    list_display = ["team", "pool", "step", "at", "held", "borrowed", "guaranteed", "limit", "wait_s"]
    list_filter = ["step", "pool"]
    search_fields = ["team__name"]
    list_select_related = ["team", "pool"]


@admin.register(ModelPoint)
class ModelPointAdmin(ReadOnlyAccess, admin.ModelAdmin[ModelPoint]):
    list_display = ["pool", "model", "step", "at", "gpus", "util_pct"]
    list_filter = ["step", "pool"]
    search_fields = ["model"]
    list_select_related = ["pool"]


@admin.register(GpuPoint)
class GpuPointAdmin(ReadOnlyAccess, admin.ModelAdmin[GpuPoint]):
    list_display = ["gpu", "at", "util_pct", "memory_used_mb", "temperature_c", "power_w"]
    search_fields = ["gpu__uuid"]
    list_select_related = ["gpu"]
