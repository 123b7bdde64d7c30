"""Shared reads of the inventory (API, dashboard and CLI see the same numbers)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from django.db.models import Count, Q, QuerySet

from inventory.choices import GpuState
from inventory.models import Gpu, Host, Pool, Source


def is_capacity(via: str = "") -> Q:
    """The one definition of capacity every count uses (API, dashboard, capacity moves, lease
    admission): a GPU that is present and not a MIG parent, since a MIG GPU is capacity only
    through its slices (counting both would double it). `via` is the path to the GPU from the
    model queried ("gpus__" from a pool). The engine's snapshot applies the same rule in SQL
    (`allocation.engine.snapshot`).

    Parents are excluded by id with one hashed sub-select; `slices__isnull` would be a self-join
    checked row by row."""
    parents = Gpu.objects.filter(parent__isnull=False).values("parent_id")
    return Q(**{f"{via}gone": False}) & ~Q(**{f"{via}pk__in": parents})


def capacity_units(pool_ids: Iterable[int] | None = None) -> QuerySet[Gpu]:
    """The GPUs that are capacity (`is_capacity`), of the given pools or all."""
    units = Gpu.objects.filter(is_capacity())
    return units if pool_ids is None else units.filter(pool_id__in=list(pool_ids))


def pool_list() -> QuerySet[Pool]:
    """Pools with `capacity`, `allocated` and `free` counted in capacity units, in one grouped scan."""
    usable = is_capacity("gpus__")
    # The plugin takes the names for a clash with Pool's attributes; they are those attributes'
    # values (declared on Pool for the instances the API fills by hand).
    return Pool.objects.annotate(  # type: ignore[no-redef]
        capacity=Count("gpus", filter=usable),
        allocated=Count("gpus", filter=usable & Q(gpus__state=GpuState.LEASED)),
        free=Count("gpus", filter=usable & Q(gpus__state=GpuState.FREE)),
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
    rows = capacity_units(pool_ids).values("pool_id", "model", "state").annotate(n=Count("pk")).order_by()
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
        return cast("list[tuple[str, str, int, int, int]]", cached)
    rows = (capacity_units([pool_id]).values_list("model", "mig_profile", "memory_mb", "host_id")
            .annotate(n=Count("pk")).order_by())
    kinds: dict[tuple[str, str, int], list[int]] = {}
    for model, mig, memory, _host, n in rows:
        slot = kinds.setdefault((model, mig, memory or 0), [0, 0])
        slot[0] = max(slot[0], n)
        slot[1] += n
    profile = [(model, mig, memory, most, total) for (model, mig, memory), (most, total) in kinds.items()]
    cache.set(key, profile, timeout=300)
    return profile


SOURCE_PROFILE_KEY = "gpupool:capacity-by-source:{pool_id}"
# (model, mig_profile, memory_mb, source name, source kind, most on one host, total)
SourceCapacity = tuple[str, str, int, str, str, int, int]


def pool_capacity_by_source(pool_id: int) -> list[SourceCapacity]:
    """`pool_capacity_profile` per source: (model, mig_profile, memory_mb, source name, source
    kind, most on one host, total). Read for lease requests that say where they may run (a
    binding or a selector); cached and cleared like the profile."""
    from django.core.cache import cache

    key = SOURCE_PROFILE_KEY.format(pool_id=pool_id)
    cached = cache.get(key)
    if cached is None:
        cached = _per_source(capacity_units([pool_id]))
        cache.set(key, cached, timeout=300)
    return cast("list[SourceCapacity]", cached)


def pool_capacity_on_hosts(pool_id: int, host_ids: Iterable[int]) -> list[SourceCapacity]:
    """As `pool_capacity_by_source`, counting only these hosts (a selector's); not cached."""
    return _per_source(capacity_units([pool_id]).filter(host_id__in=list(host_ids)))


def _per_source(units: QuerySet[Gpu]) -> list[SourceCapacity]:
    rows = (units.values_list("model", "mig_profile", "memory_mb", "host__source__name", "host__source__kind",
                              "host_id").annotate(n=Count("pk")).order_by())
    kinds: dict[tuple[str, str, int, str, str], list[int]] = {}
    for model, mig, memory, source, kind, _host, n in rows:
        slot = kinds.setdefault((model, mig, memory or 0, source, kind), [0, 0])
        slot[0] = max(slot[0], n)
        slot[1] += n
    return [(*key, most, total) for key, (most, total) in kinds.items()]


def pool_hosts_where(pool_id: int) -> list[tuple[int, str, str, dict[str, str]]]:
    """(host id, name, source name, labels) of every host with capacity in the pool."""
    hosts = capacity_units([pool_id]).values("host_id").distinct()
    return list(Host.objects.filter(pk__in=hosts).values_list("pk", "name", "source__name", "labels"))


def forget_capacity_profiles(pool_ids: Iterable[int]) -> None:
    from django.core.cache import cache

    cache.delete_many([key.format(pool_id=p) for p in pool_ids for key in (PROFILE_KEY, SOURCE_PROFILE_KEY)])


def hosts_backing_off(*, source: Source, now: datetime) -> set[str]:
    """Names of the source's hosts not due for a probe at `now` (`Host.next_probe_at` later than
    it, by the database's clock that set it): discovery leaves them out of this round."""
    return set(Host.objects.filter(source=source, next_probe_at__gt=now).values_list("name", flat=True))
