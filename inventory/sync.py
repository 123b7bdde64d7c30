"""Reconcile: turn one source's discovered facts into Host and Gpu rows.

Source-agnostic: it knows HostFact/GpuFact, never SSH or Kubernetes. All reads and writes are in
bulk (a constant number of queries, whatever the fleet size) and inside one transaction. When a
GPU that a lease holds vanishes, sync does not touch the lease: it sends `gpus_vanished` and the
allocation app decides (the lease becomes `lost`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.base import GPU_ERRORS_LABEL, HEALTH_UNHEALTHY, HOST_OFFLINE, Discovery, GpuFact, HostFact
from inventory.bulk import bulk_update_fast
from inventory.choices import Health, HostState
from inventory.models import Gpu, GpuSample, Host, Source
from inventory.services import gpu_refresh_states
from inventory.signals import gpus_vanished, inventory_changed

HOST_FIELDS = ("address", "reported_state", "driver_version", "cuda_version", "labels", "taints",
               "foreign_gpus", "error", "offline_since", "state")


@dataclass
class SyncReport:
    source: str
    hosts_seen: int = 0
    hosts_failed: int = 0
    gpus_seen: int = 0
    created: int = 0
    updated: int = 0
    gone: int = 0
    errors: list[str] = field(default_factory=list)


def sync_source(source: Source, discovery: Discovery, *, now: datetime | None = None) -> SyncReport:
    """Apply one discovery of `source`. A whole-source failure (`discovery.error`) only records
    the error: hosts then age into `offline` through `hosts_mark_stale`, not at the first blip."""
    now = now or timezone.now()
    report = SyncReport(source=source.name)
    if discovery.error:
        Source.objects.filter(pk=source.pk).update(last_error=discovery.error, last_discovery_at=now)
        report.errors.append(discovery.error)
        return report

    with transaction.atomic():
        hosts = _sync_hosts(source, discovery.hosts, now, report)
        vanished = _sync_gpus(source, discovery.hosts, hosts, now, report)
        gpu_refresh_states(Gpu.objects.filter(host__source=source))
        Source.objects.filter(pk=source.pk).update(last_error="", last_discovery_at=now)
    if vanished:
        gpus_vanished.send(sender=Source, gpu_ids=vanished, reason=f"GPU no longer reported by source {source.name}")
    if report.created or report.gone or report.updated:
        inventory_changed.send(sender=Source, pool_ids={source.pool_id})
    return report


def _sync_hosts(source: Source, facts: tuple[HostFact, ...], now: datetime,
                report: SyncReport) -> dict[str, Host]:
    existing = {h.name: h for h in Host.objects.filter(source=source)}
    new, changed = [], []
    for fact in facts:
        reported = HOST_OFFLINE if fact.error else fact.state
        host = existing.get(fact.name)
        values = {
            "address": fact.address, "reported_state": reported,
            "labels": dict(fact.labels), "taints": list(fact.taints),
            "foreign_gpus": fact.foreign_gpus, "error": fact.error,
        }
        if not fact.error:
            values |= {"driver_version": fact.driver_version, "cuda_version": fact.cuda_version,
                       "last_seen": now}
            report.hosts_seen += 1
        else:
            report.hosts_failed += 1
            report.errors.append(f"{fact.name}: {fact.error}")
        if host is None:
            host = Host(source=source, name=fact.name, **values)
            new.append(host)
        else:
            values.pop("last_seen", None)  # moves every time: written below in one UPDATE
            before = (host.state, host.offline_since)
            dirty = False
            for key, value in values.items():
                if getattr(host, key) != value:
                    setattr(host, key, value)
                    dirty = True
            _derive(host, now)
            if dirty or before != (host.state, host.offline_since):
                changed.append(host)
        if host.pk is None:
            _derive(host, now)
        existing[fact.name] = host
    Host.objects.bulk_create(new, batch_size=1000)
    bulk_update_fast(Host, changed, HOST_FIELDS)
    answered = [existing[f.name].pk for f in facts if not f.error]
    Host.objects.filter(pk__in=answered).update(last_seen=now)
    return existing


def _derive(host: Host, now: datetime) -> None:
    host.state = Host.derive_state(host.reported_state, host.admin_state)
    host.offline_since = (host.offline_since or now) if host.state == HostState.OFFLINE else None


STRUCT_FIELDS = ("host_id", "parent_id", "index", "model", "memory_mb", "mig_profile", "shared_replicas",
                 "health", "health_reason", "foreign", "gone")
TELEMETRY_FIELDS = ("utilization_pct", "memory_used_mb", "temperature_c", "power_w", "telemetry_at")
_ROW_FIELDS = ("pk", "uuid", "leased", *STRUCT_FIELDS, *TELEMETRY_FIELDS)


def _sync_gpus(source: Source, facts: tuple[HostFact, ...], hosts: dict[str, Host], now: datetime,
               report: SyncReport) -> list[int]:
    """Create, update and mark gone the source's GPUs. Existing rows are read as plain tuples
    (building 16,000 model instances would cost more than the whole comparison), and only rows
    that differ are written: structural changes and telemetry in separate bulk UPDATEs."""
    seen_uuids = {g.uuid for f in facts for g in f.gpus}
    rows = {r[1]: dict(zip(_ROW_FIELDS, r, strict=True)) for r in
            Gpu.objects.filter(host__source=source).values_list(*_ROW_FIELDS)}
    unknown = seen_uuids - rows.keys()
    if unknown:  # GPUs that moved here from another source's host (rare): adopt them
        rows.update((r[1], dict(zip(_ROW_FIELDS, r, strict=True))) for r in
                    Gpu.objects.filter(uuid__in=unknown).values_list(*_ROW_FIELDS))
    counted = {hosts[f.name].pk for f in facts if not f.error and f.foreign_gpus}
    struct_changed: dict[str, dict] = {}
    telemetry_changed: dict[str, dict] = {}
    samples: list[GpuSample] = []
    take_samples = _sample_due(source, now)
    # Two phases, parents before slices, so a new slice can point at its new parent's row.
    for slices in (False, True):
        batch: list[Gpu] = []
        for fact_host in facts:
            if fact_host.error:
                continue  # an unreachable host keeps its GPUs as they were (shown offline)
            host_id = hosts[fact_host.name].pk
            for fact in fact_host.gpus:
                if bool(fact.parent_uuid) != slices:
                    continue
                report.gpus_seen += 1
                parent = rows.get(fact.parent_uuid) if fact.parent_uuid else None
                values = _gpu_values(fact, host_id, parent["pk"] if parent else None, now)
                if host_id in counted:
                    del values["foreign"]  # decided per host below, from the count
                row = rows.get(fact.uuid)
                if row is None:
                    gpu = Gpu(uuid=fact.uuid, pool_id=source.pool_id, **values)
                    batch.append(gpu)
                    rows[fact.uuid] = {"pk": None, "uuid": fact.uuid, "leased": False, "foreign": False, **values}
                    report.created += 1
                    continue
                if any(row[k] != v for k, v in values.items() if k in STRUCT_FIELDS):
                    row.update(values)
                    struct_changed[fact.uuid] = row
                    report.updated += 1
                elif any(row[k] != values[k] for k in TELEMETRY_FIELDS if k != "telemetry_at"):
                    row.update(values)
                    telemetry_changed[fact.uuid] = row
                if take_samples and (fact.utilization_pct is not None or fact.temperature_c is not None):
                    samples.append(GpuSample(gpu_id=row["pk"], at=now, utilization_pct=fact.utilization_pct,
                                             memory_used_mb=fact.memory_used_mb,
                                             temperature_c=fact.temperature_c, power_w=fact.power_w))
        Gpu.objects.bulk_create(batch, batch_size=1000)
        for gpu in batch:
            rows[gpu.uuid]["pk"] = gpu.pk

    answered_ids = {hosts[f.name].pk for f in facts if not f.error}
    # A host that says some GPU could not be read (fell off the bus): its missing GPUs are broken
    # hardware still in the box, so unhealthy with the host's words, not gone.
    broken = {hosts[f.name].pk: f.labels[GPU_ERRORS_LABEL] for f in facts
              if not f.error and f.labels.get(GPU_ERRORS_LABEL)}
    vanished: list[int] = []
    for uuid, row in rows.items():
        if uuid not in seen_uuids and not row["gone"] and row["host_id"] in broken:
            if row["health"] != Health.UNHEALTHY:
                row.update(health=Health.UNHEALTHY, health_reason=broken[row["host_id"]][:255])
                struct_changed[uuid] = row
                report.updated += 1
                if row["leased"]:
                    vanished.append(row["pk"])
        elif uuid not in seen_uuids and not row["gone"] and row["host_id"] in answered_ids:
            row["gone"] = True
            struct_changed[uuid] = row
            report.gone += 1
            if row["leased"]:
                vanished.append(row["pk"])
    for row in _assign_counted_foreign(counted, facts, hosts, rows):
        struct_changed[row["uuid"]] = row
    bulk_update_fast(Gpu, struct_changed.values(), (*STRUCT_FIELDS, *TELEMETRY_FIELDS))
    bulk_update_fast(Gpu, [r for u, r in telemetry_changed.items() if u not in struct_changed],
                     TELEMETRY_FIELDS)
    if take_samples:
        GpuSample.objects.bulk_create([s for s in samples if s.gpu_id], batch_size=2000)
        Source.objects.filter(pk=source.pk).update(last_sample_at=now)
        _prune_samples(now)
    return vanished


def _sample_due(source: Source, now: datetime) -> bool:
    every = settings.GPUPOOL["SAMPLE_INTERVAL_S"]
    last = Source.objects.filter(pk=source.pk).values_list("last_sample_at", flat=True).first()
    return last is None or (now - last).total_seconds() >= every


def _gpu_values(fact: GpuFact, host_id: int, parent_id: int | None, now: datetime) -> dict[str, object]:
    unhealthy = fact.health == HEALTH_UNHEALTHY
    return {
        "host_id": host_id, "parent_id": parent_id, "index": fact.index, "model": fact.model,
        "memory_mb": fact.memory_mb, "mig_profile": fact.mig_profile,
        "shared_replicas": max(1, fact.shared_replicas),
        "health": Health.UNHEALTHY if unhealthy else Health.OK,
        "health_reason": fact.health_reason[:255] if unhealthy else "",
        # A process on a GPU that no lease of ours holds is someone else's work.
        "foreign": bool(fact.processes), "gone": False,
        "utilization_pct": fact.utilization_pct, "memory_used_mb": fact.memory_used_mb,
        "temperature_c": fact.temperature_c, "power_w": fact.power_w,
        "telemetry_at": now if fact.utilization_pct is not None else None,
    }


def _assign_counted_foreign(counted: set[int], facts: tuple[HostFact, ...], hosts: dict[str, Host],
                            rows: dict[str, dict]) -> list[dict]:
    """Kubernetes reports foreign use as a count per node (the device plugin picks devices):
    mark that many of the node's unleased GPUs foreign, keeping earlier picks stable.
    Returns the rows whose flag changed."""
    if not counted:
        return []
    counts = {hosts[f.name].pk: f.foreign_gpus for f in facts if not f.error and f.foreign_gpus}
    per_host: dict[int, list[dict]] = {}
    for row in rows.values():
        if row["host_id"] in counted and not row["gone"] and not row["leased"] and not row["parent_id"]:
            per_host.setdefault(row["host_id"], []).append(row)
    flipped = []
    for host_id, candidates in per_host.items():
        candidates.sort(key=lambda r: (not r["foreign"], -r["index"]))
        for i, row in enumerate(candidates):
            want = i < counts[host_id]
            if row["foreign"] != want:
                row["foreign"] = want
                flipped.append(row)
    return flipped


def _prune_samples(now: datetime) -> None:
    keep = settings.GPUPOOL["TELEMETRY_HISTORY"] * settings.GPUPOOL["SAMPLE_INTERVAL_S"]
    GpuSample.objects.filter(at__lt=now - timedelta(seconds=keep)).delete()


def hosts_mark_stale(*, now: datetime | None = None) -> int:
    """Hosts not heard from within N discovery intervals of their source go offline."""
    now = now or timezone.now()
    n = settings.GPUPOOL["OFFLINE_AFTER_INTERVALS"]
    stale = []
    for host in Host.objects.select_related("source").exclude(reported_state=HostState.OFFLINE):
        limit = timedelta(seconds=n * max(host.source.interval_s, 1))
        if host.last_seen is not None and now - host.last_seen > limit:
            host.reported_state = HostState.OFFLINE
            host.error = host.error or f"not heard from since {host.last_seen:%Y-%m-%d %H:%M:%S} UTC"
            host.state = Host.derive_state(host.reported_state, host.admin_state)
            host.offline_since = now
            stale.append(host)
    if stale:
        with transaction.atomic():
            Host.objects.bulk_update(stale, ["reported_state", "error", "state", "offline_since"])
            gpu_refresh_states(Gpu.objects.filter(host__in=stale))
        inventory_changed.send(sender=Host, pool_ids={h.source.pool_id for h in stale})
    return len(stale)
