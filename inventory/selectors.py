"""Shared reads of the inventory (API, dashboard and CLI see the same numbers)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count, Q, QuerySet

from inventory.choices import GpuState
from inventory.models import Gpu, Host, Pool

# A MIG parent is capacity only through its slices; counting both would double it.
USABLE = Q(gpus__gone=False, gpus__slices__isnull=True)


def pool_list() -> QuerySet[Pool]:
    return Pool.objects.annotate(
        capacity=Count("gpus", filter=USABLE, distinct=True),
        allocated=Count("gpus", filter=USABLE & Q(gpus__state=GpuState.LEASED), distinct=True),
        free=Count("gpus", filter=USABLE & Q(gpus__state=GpuState.FREE), distinct=True),
    ).order_by("name")


def host_list() -> QuerySet[Host]:
    return Host.objects.select_related("source").annotate(
        gpu_count=Count("gpus", filter=Q(gpus__gone=False))).order_by("source__name", "name")


def gpu_list(*, filters: dict[str, Any] | None = None) -> QuerySet[Gpu]:
    return Gpu.objects.select_related("host", "pool", "parent").filter(**(filters or {})).order_by(
        "host__name", "parent_id", "index", "uuid")


def pool_stats(pool_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Per pool: `capacity`, `allocated`, `free` and per-model `{model: {total, free}}`, from one
    grouped query (no join per GPU: MIG parents are left out with an anti-join on a small set).
    Pools without GPUs are absent."""
    parents = Gpu.objects.filter(parent__isnull=False).values("parent_id")
    rows = (Gpu.objects.filter(pool_id__in=list(pool_ids), gone=False).exclude(pk__in=parents)
            .values("pool_id", "model", "state").annotate(n=Count("pk")).order_by())
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        stats = out.setdefault(row["pool_id"], {"capacity": 0, "allocated": 0, "free": 0, "models": {}})
        model = stats["models"].setdefault(row["model"], {"total": 0, "free": 0})
        stats["capacity"] += row["n"]
        model["total"] += row["n"]
        if row["state"] == GpuState.LEASED:
            stats["allocated"] += row["n"]
        elif row["state"] == GpuState.FREE:
            stats["free"] += row["n"]
            model["free"] += row["n"]
    return out


PROFILE_KEY = "gpupool:capacity-profile:{pool_id}"


def pool_capacity_profile(pool_id: int) -> list[tuple[str, str, int, int, int]]:
    """What a pool could ever offer, per kind of GPU: (model, mig_profile, memory_mb, most on one
    host, total). MIG parents count only through their slices; unknown memory reads as 0.

    Cached (it is read on every lease request, and a 16,000-GPU pool takes tens of milliseconds
    to aggregate); `inventory_changed` clears it, so new or vanished GPUs show at once."""
    from django.core.cache import cache

    key = PROFILE_KEY.format(pool_id=pool_id)
    cached = cache.get(key)
    if cached is not None:
        return cached
    # `slices__isnull` would be a self-join checked row by row; excluding the parent ids is one
    # hashed sub-select.
    parents = Gpu.objects.filter(pool_id=pool_id, parent__isnull=False).values("parent_id")
    rows = (Gpu.objects.filter(pool_id=pool_id, gone=False).exclude(pk__in=parents)
            .values_list("model", "mig_profile", "memory_mb", "host_id").annotate(n=Count("pk")))
    kinds: dict[tuple[str, str, int], list[int]] = {}
    for model, mig, memory, _host, n in rows:
        slot = kinds.setdefault((model, mig, memory or 0), [0, 0])
        slot[0] = max(slot[0], n)
        slot[1] += n
    profile = [(model, mig, memory, most, total) for (model, mig, memory), (most, total) in kinds.items()]
    cache.set(key, profile, timeout=300)
    return profile


def forget_capacity_profiles(pool_ids: Iterable[int]) -> None:
    from django.core.cache import cache

    cache.delete_many([PROFILE_KEY.format(pool_id=p) for p in pool_ids])
