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
from django.db.models import Q
from django.utils import timezone

from agents.base import HEALTH_UNHEALTHY, HOST_OFFLINE, Discovery, GpuFact, HostFact
from inventory.choices import Health, HostState
from inventory.models import Gpu, GpuSample, Host, Source
from inventory.services import gpu_refresh_states
from inventory.signals import gpus_vanished, inventory_changed

HOST_FIELDS = ("address", "reported_state", "driver_version", "cuda_version", "labels", "taints",
               "foreign_gpus", "error", "last_seen", "offline_since", "state")
GPU_FIELDS = ("host_id", "parent_id", "index", "model", "memory_mb", "mig_profile",
              "shared_replicas", "health", "health_reason", "foreign", "gone", "utilization_pct",
              "memory_used_mb", "temperature_c", "power_w", "telemetry_at")


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
            dirty = False
            for key, value in values.items():
                if getattr(host, key) != value:
                    setattr(host, key, value)
                    dirty = dirty or key != "last_seen"
            changed.append(host)  # last_seen moves every time
        host.state = Host.derive_state(host.reported_state, host.admin_state)
        if host.state == HostState.OFFLINE:
            host.offline_since = host.offline_since or now
        else:
            host.offline_since = None
        existing[fact.name] = host
    Host.objects.bulk_create(new, batch_size=1000)
    Host.objects.bulk_update(changed, HOST_FIELDS, batch_size=1000)
    return existing


def _sync_gpus(source: Source, facts: tuple[HostFact, ...], hosts: dict[str, Host], now: datetime,
               report: SyncReport) -> list[int]:
    seen_uuids = {g.uuid for f in facts for g in f.gpus}
    rows = {g.uuid: g for g in Gpu.objects.filter(Q(host__source=source) | Q(uuid__in=seen_uuids))}
    # Hosts whose report failed keep their GPUs as they are (shown offline through the host).
    answered = {f.name for f in facts if not f.error}
    by_host_gpus: dict[int, list[GpuFact]] = {}
    for fact in facts:
        if not fact.error:
            by_host_gpus[hosts[fact.name].pk] = list(fact.gpus)

    counted = {hosts[f.name].pk for f in facts if not f.error and f.foreign_gpus}
    new: list[Gpu] = []
    changed: list[Gpu] = []
    samples: list[GpuSample] = []
    # Two phases, parents before slices, so a new slice can point at its new parent's row.
    for slices in (False, True):
        batch: list[Gpu] = []
        for host_id, gpu_facts in by_host_gpus.items():
            for fact in gpu_facts:
                if bool(fact.parent_uuid) != slices:
                    continue
                report.gpus_seen += 1
                parent = rows.get(fact.parent_uuid) if fact.parent_uuid else None
                values = _gpu_values(fact, host_id, parent, now)
                if host_id in counted:
                    del values["foreign"]  # decided per host below, from the count
                row = rows.get(fact.uuid)
                if row is None:
                    row = Gpu(uuid=fact.uuid, pool_id=source.pool_id, **values)
                    batch.append(row)
                    rows[fact.uuid] = row
                    report.created += 1
                elif _apply(row, values):
                    changed.append(row)
                    report.updated += 1
                if fact.utilization_pct is not None or fact.temperature_c is not None:
                    samples.append(GpuSample(gpu=row, at=now, utilization_pct=fact.utilization_pct,
                                             memory_used_mb=fact.memory_used_mb,
                                             temperature_c=fact.temperature_c, power_w=fact.power_w))
        Gpu.objects.bulk_create(batch, batch_size=1000)
        new.extend(batch)

    answered_ids = {hosts[name].pk for name in answered}
    vanished: list[int] = []
    for row in rows.values():
        if row.uuid not in seen_uuids and not row.gone and row.host_id in answered_ids:
            row.gone = True
            changed.append(row)
            report.gone += 1
            if row.leased:
                vanished.append(row.pk)
    changed.extend(_assign_counted_foreign(facts, hosts, rows))
    Gpu.objects.bulk_update({id(r): r for r in changed}.values(), GPU_FIELDS, batch_size=1000)
    GpuSample.objects.bulk_create(samples, batch_size=2000)
    _prune_samples(now)
    return vanished


def _gpu_values(fact: GpuFact, host_id: int, parent: Gpu | None, now: datetime) -> dict[str, object]:
    unhealthy = fact.health == HEALTH_UNHEALTHY
    return {
        "host_id": host_id, "parent": parent, "index": fact.index, "model": fact.model,
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


_TELEMETRY = {"utilization_pct", "memory_used_mb", "temperature_c", "power_w", "telemetry_at"}


def _apply(row: Gpu, values: dict[str, object]) -> bool:
    """Copy values onto row; True when something other than the timestamp changed."""
    dirty = False
    for key, value in values.items():
        if key == "parent":
            parent_id = value.pk if value is not None else None  # type: ignore[attr-defined]
            if row.parent_id != parent_id:
                row.parent_id = parent_id
                dirty = True
            continue
        if getattr(row, key) != value:
            setattr(row, key, value)
            dirty = dirty or key != "telemetry_at"
    return dirty


def _assign_counted_foreign(facts: tuple[HostFact, ...], hosts: dict[str, Host],
                            rows: dict[str, Gpu]) -> list[Gpu]:
    """Kubernetes reports foreign use as a count per node (the device plugin picks devices):
    mark that many of the node's unleased GPUs foreign, keeping earlier picks stable.
    Returns the rows whose flag changed."""
    counts = {hosts[f.name].pk: f.foreign_gpus for f in facts if not f.error and f.foreign_gpus}
    if not counts:
        return []
    per_host: dict[int, list[Gpu]] = {}
    for row in rows.values():
        if row.host_id in counts and not row.gone and not row.leased and not row.parent_id:
            per_host.setdefault(row.host_id, []).append(row)
    flipped = []
    for host_id, candidates in per_host.items():
        candidates.sort(key=lambda r: (not r.foreign, -r.index))
        for i, row in enumerate(candidates):
            want = i < counts[host_id]
            if row.foreign != want:
                row.foreign = want
                flipped.append(row)
    return flipped


def _prune_samples(now: datetime) -> None:
    keep = settings.GPUPOOL["TELEMETRY_HISTORY"] * settings.GPUPOOL["DISCOVERY_INTERVAL_S"]
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
