"""Reconcile: turn one source's discovered facts into Host and Gpu rows.

Source-agnostic: it knows HostFact/GpuFact, never SSH or Kubernetes. All reads and writes are in
bulk (a constant number of queries, whatever the fleet size) and inside one transaction. When a
GPU that a lease holds vanishes, sync does not touch the lease: it sends `gpus_vanished` and the
allocation app decides (the lease becomes `lost`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from agents.base import GPU_ERRORS_LABEL, HEALTH_UNHEALTHY, HOST_OFFLINE, Discovery, GpuFact, HostFact
from agents.host_backoff import HostBackoff
from core.db import SOURCE_LOCKS, advisory_xact_lock, db_now
from core.db.bulk import bulk_update_fast
from inventory.choices import Health, HostState
from inventory.models import Gpu, GpuSample, Host, Source
from inventory.services import gpu_refresh_states
from inventory.signals import gpus_vanished, inventory_changed

HOST_FIELDS = ("address", "reported_state", "driver_version", "cuda_version", "labels", "taints",
               "foreign_gpus", "error", "offline_since", "state", "probe_failures", "next_probe_at")


@dataclass
class SyncReport:
    source: str
    hosts_seen: int = 0
    hosts_failed: int = 0
    hosts_skipped: int = 0  # backing off: not probed this round
    gpus_seen: int = 0
    created: int = 0
    updated: int = 0
    gone: int = 0
    errors: list[str] = field(default_factory=list)


def sync_source(source: Source, discovery: Discovery, *, now: datetime | None = None,
                backoff: HostBackoff | None = None) -> SyncReport:
    """Apply one discovery of `source`. A whole-source failure (`discovery.error`) only records
    the error: hosts then age into `offline` through `hosts_mark_stale`, not at the first blip.
    `now` defaults to the database's clock (core.db.db_now): `last_seen` and `offline_since`
    are compared later by other processes, whose own clocks may be minutes off this one's.
    A host that failed gets one more `probe_failures` and, with a `backoff`, its `next_probe_at`;
    one that answered has both reset. Hosts absent from the discovery (left out while backing off)
    keep their rows as they are."""
    now = now or db_now()
    report = SyncReport(source=source.name)
    if discovery.error:
        Source.objects.filter(pk=source.pk).update(last_error=discovery.error, last_discovery_at=now)
        report.errors.append(discovery.error)
        return report

    with transaction.atomic():
        # Two syncs of one source at once (a beat run and `manage.py discover`, two beats) take
        # turns: the second reads what the first wrote instead of inserting the same rows.
        advisory_xact_lock(SOURCE_LOCKS, source.pk)
        hosts = _sync_hosts(source, discovery.hosts, now, report, backoff)
        vanished = _sync_gpus(source, discovery.hosts, hosts, now, report)
        gpu_refresh_states(Gpu.objects.filter(host__source=source))
        Source.objects.filter(pk=source.pk).update(last_error="", last_discovery_at=now,
                                                   **_telemetry_state(discovery, now))
    if vanished:
        gpus_vanished.send(sender=Source, gpu_ids=vanished, reason=f"GPU no longer reported by source {source.name}")
    if report.created or report.gone or report.updated:
        inventory_changed.send(sender=Source, pool_ids={source.pool_id})
    return report


def _telemetry_state(discovery: Discovery, now: datetime) -> dict[str, Any]:
    """The source's telemetry columns after a discovery: read now, or why not (the last good read
    stays), or neither for a source without separate telemetry."""
    if discovery.telemetry_ok:
        return {"telemetry_error": "", "telemetry_at": now}
    if discovery.telemetry_error:
        return {"telemetry_error": discovery.telemetry_error}
    return {"telemetry_error": "", "telemetry_at": None}


def _sync_hosts(source: Source, facts: tuple[HostFact, ...], now: datetime,
                report: SyncReport, backoff: HostBackoff | None) -> dict[str, Host]:
    existing = {h.name: h for h in Host.objects.filter(source=source)}
    new, changed = [], []
    for fact in facts:
        reported = HOST_OFFLINE if fact.error else fact.state
        host = existing.get(fact.name)
        values = {
            "address": fact.address, "reported_state": reported,
            "labels": dict(fact.labels), "taints": list(fact.taints),
            "foreign_gpus": fact.foreign_gpus, "error": fact.error,
            **_probe_outcome(fact, host, backoff, now),
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


def _probe_outcome(fact: HostFact, host: Host | None, backoff: HostBackoff | None,
                   now: datetime) -> dict[str, Any]:
    """The backoff columns after this probe of the host (`host`: its row, None for a new one)."""
    if not fact.error:
        return {"probe_failures": 0, "next_probe_at": None}
    failures = (host.probe_failures if host is not None else 0) + 1
    if backoff is None:
        return {"probe_failures": failures, "next_probe_at": None}
    delay = backoff.delay_s(failures, random.random())  # spreads probes out; not a secret
    return {"probe_failures": failures, "next_probe_at": now + timedelta(seconds=delay)}


def _derive(host: Host, now: datetime) -> None:
    host.state = Host.derive_state(host.reported_state, host.admin_state)
    host.offline_since = (host.offline_since or now) if host.is_offline else None


STRUCT_FIELDS = ("host_id", "parent_id", "index", "model", "memory_mb", "mig_profile", "shared_replicas",
                 "physical_uuid", "nvlink_island", "health", "health_reason", "foreign", "gone")
TELEMETRY_FIELDS = ("utilization_pct", "memory_used_mb", "temperature_c", "power_w", "telemetry_at")
_TELEMETRY_COMPARED = tuple(k for k in TELEMETRY_FIELDS if k != "telemetry_at")  # a new timestamp alone is no change
_ROW_FIELDS = ("pk", "uuid", "leased", *STRUCT_FIELDS, *TELEMETRY_FIELDS)


_Row = dict[str, Any]  # a GPU row as read by values_list(*_ROW_FIELDS), keyed by field name


def _sync_gpus(source: Source, facts: tuple[HostFact, ...], hosts: dict[str, Host], now: datetime,
               report: SyncReport) -> list[int]:
    """Create, update and mark gone the source's GPUs; return the ids of leased GPUs that vanished.
    Existing rows are read as plain dicts (building 16,000 model instances would cost more than
    the whole comparison), and only rows that differ are written: structural changes and telemetry
    in separate bulk UPDATEs."""
    seen_uuids = {g.uuid for f in facts for g in f.gpus}
    sync = _GpuSync(source=source, hosts=hosts, now=now, report=report, rows=_gpu_rows(source, seen_uuids),
                    counted={hosts[f.name].pk for f in facts if not f.error and f.foreign_gpus},
                    take_samples=_sample_due(source, now))
    # Two phases, parents before slices, so a new slice can point at its new parent's row.
    sync.reconcile_reported(facts, slices=False)
    sync.reconcile_reported(facts, slices=True)
    vanished = sync.mark_unreported(facts, seen_uuids)
    for row in _assign_counted_foreign(sync.counted, facts, hosts, sync.rows):
        sync.struct_changed[row["uuid"]] = row
    sync.write()
    return vanished


def _gpu_rows(source: Source, uuids: set[str]) -> dict[str, _Row]:
    """The source's GPU rows by UUID, plus the rows of reported GPUs that are still on another
    source's host (moved here, rare): they are adopted."""
    rows = {r[1]: dict(zip(_ROW_FIELDS, r, strict=True)) for r in
            Gpu.objects.filter(host__source=source).values_list(*_ROW_FIELDS)}
    unknown = uuids - rows.keys()
    if unknown:
        rows.update((r[1], dict(zip(_ROW_FIELDS, r, strict=True))) for r in
                    Gpu.objects.filter(uuid__in=unknown).values_list(*_ROW_FIELDS))
    return rows


@dataclass(slots=True)
class _GpuSync:
    """One source's GPU reconciliation: the existing rows (updated in place as facts are applied)
    and what is to be written."""

    source: Source
    hosts: dict[str, Host]
    now: datetime
    report: SyncReport
    rows: dict[str, _Row]
    counted: set[int]  # hosts that report foreign use as a count: decided per host, not per GPU
    take_samples: bool
    struct_changed: dict[str, _Row] = field(default_factory=dict)
    telemetry_changed: dict[str, _Row] = field(default_factory=dict)
    samples: list[GpuSample] = field(default_factory=list)
    # Physical GPUs with a leased time-sliced replica (processes on them are ours).
    leased_physical: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.leased_physical = {r["physical_uuid"] for r in self.rows.values()
                                if r["leased"] and r["physical_uuid"]}

    def reconcile_reported(self, facts: tuple[HostFact, ...], *, slices: bool) -> None:
        """Apply the reported whole GPUs (or MIG slices) of the hosts that answered: new ones are
        inserted, known ones compared."""
        batch: list[Gpu] = []
        for fact_host in facts:
            if fact_host.error:
                continue  # an unreachable host keeps its GPUs as they were (shown offline)
            host_id = self.hosts[fact_host.name].pk
            for fact in fact_host.gpus:
                if bool(fact.parent_uuid) == slices:
                    self._reconcile(fact, host_id, batch)
        Gpu.objects.bulk_create(batch, batch_size=1000)
        for gpu in batch:
            self.rows[gpu.uuid]["pk"] = gpu.pk

    def _reconcile(self, fact: GpuFact, host_id: int, batch: list[Gpu]) -> None:
        """One reported GPU: a new row goes to `batch`; a known row takes the reported values and
        is queued for the write its change needs, and its telemetry for a sample when one is due."""
        self.report.gpus_seen += 1
        rows = self.rows
        parent = rows.get(fact.parent_uuid) if fact.parent_uuid else None
        values = _gpu_values(fact, host_id, parent["pk"] if parent else None, self.now)
        if host_id in self.counted:
            del values["foreign"]  # decided per host afterwards, from the count
        elif fact.physical_uuid and fact.physical_uuid in self.leased_physical:
            # nvidia-smi sees processes per physical GPU, so every replica of it shows the
            # process of a lease on one of them: that is our use, not someone else's.
            values["foreign"] = False
        row = rows.get(fact.uuid)
        if row is None:
            batch.append(Gpu(uuid=fact.uuid, pool_id=self.source.pool_id, **values))
            rows[fact.uuid] = {"pk": None, "uuid": fact.uuid, "leased": False, "foreign": False, **values}
            self.report.created += 1
            return
        if any(row[k] != values[k] for k in STRUCT_FIELDS if k in values):
            row.update(values)
            self.struct_changed[fact.uuid] = row
            self.report.updated += 1
        elif any(row[k] != values[k] for k in _TELEMETRY_COMPARED):
            row.update(values)
            self.telemetry_changed[fact.uuid] = row
        if self.take_samples and (fact.utilization_pct is not None or fact.temperature_c is not None):
            self.samples.append(GpuSample(gpu_id=row["pk"], at=self.now, utilization_pct=fact.utilization_pct,
                                          memory_used_mb=fact.memory_used_mb,
                                          temperature_c=fact.temperature_c, power_w=fact.power_w))

    def mark_unreported(self, facts: tuple[HostFact, ...], seen_uuids: set[str]) -> list[int]:
        """GPUs of hosts that answered without them: unhealthy where the host says some GPU could
        not be read, else gone. Returns the ids of those a lease holds."""
        answered = {self.hosts[f.name].pk for f in facts if not f.error}
        # A host that says some GPU could not be read (fell off the bus): its missing GPUs are
        # broken hardware still in the box, so unhealthy with the host's words, not gone.
        broken = {self.hosts[f.name].pk: f.labels[GPU_ERRORS_LABEL] for f in facts
                  if not f.error and f.labels.get(GPU_ERRORS_LABEL)}
        vanished: list[int] = []
        for uuid, row in self.rows.items():
            if uuid in seen_uuids or row["gone"]:
                continue
            host_id = row["host_id"]
            if host_id in broken:
                if not self._mark_unhealthy(row, broken[host_id]):
                    continue  # unhealthy already
            elif host_id in answered:
                self._mark_gone(row)
            else:
                continue  # its host did not answer: kept as it was
            if row["leased"]:
                vanished.append(row["pk"])
        return vanished

    def _mark_unhealthy(self, row: _Row, reason: str) -> bool:
        """Returns whether the row changed: False when it is unhealthy already."""
        if row["health"] == Health.UNHEALTHY:
            return False
        row.update(health=Health.UNHEALTHY, health_reason=reason[:255])
        self.struct_changed[row["uuid"]] = row
        self.report.updated += 1
        return True

    def _mark_gone(self, row: _Row) -> None:
        row["gone"] = True
        self.struct_changed[row["uuid"]] = row
        self.report.gone += 1

    def write(self) -> None:
        """The queued UPDATEs (a row whose structure changed is written whole) and samples."""
        bulk_update_fast(Gpu, self.struct_changed.values(), (*STRUCT_FIELDS, *TELEMETRY_FIELDS))
        bulk_update_fast(Gpu, [r for u, r in self.telemetry_changed.items() if u not in self.struct_changed],
                         TELEMETRY_FIELDS)
        if self.take_samples:
            GpuSample.objects.bulk_create([s for s in self.samples if s.gpu_id], batch_size=2000)
            Source.objects.filter(pk=self.source.pk).update(last_sample_at=self.now)
            _prune_samples(self.now)


def _sample_due(source: Source, now: datetime) -> bool:
    every = settings.GPUPOOL["SAMPLE_INTERVAL_S"]
    last = Source.objects.filter(pk=source.pk).values_list("last_sample_at", flat=True).first()
    return last is None or (now - last).total_seconds() >= every


def _gpu_values(fact: GpuFact, host_id: int, parent_id: int | None, now: datetime) -> dict[str, object]:
    unhealthy = fact.health == HEALTH_UNHEALTHY
    return {
        "host_id": host_id, "parent_id": parent_id, "index": fact.index, "model": fact.model,
        "memory_mb": fact.memory_mb, "mig_profile": fact.mig_profile,
        "shared_replicas": max(1, fact.shared_replicas), "physical_uuid": fact.physical_uuid[:128],
        "nvlink_island": fact.nvlink_island[:128],
        "health": Health.UNHEALTHY if unhealthy else Health.OK,
        "health_reason": fact.health_reason[:255] if unhealthy else "",
        # A process on a GPU that no lease of ours holds is someone else's work.
        "foreign": bool(fact.processes), "gone": False,
        "utilization_pct": fact.utilization_pct, "memory_used_mb": fact.memory_used_mb,
        "temperature_c": fact.temperature_c, "power_w": fact.power_w,
        "telemetry_at": now if fact.utilization_pct is not None else None,
    }


def _assign_counted_foreign(counted: set[int], facts: tuple[HostFact, ...], hosts: dict[str, Host],
                            rows: dict[str, _Row]) -> list[_Row]:
    """Kubernetes reports foreign use as a count per node (the device plugin picks devices):
    mark that many of the node's unleased GPUs foreign, keeping earlier picks stable.
    Returns the rows whose flag changed."""
    if not counted:
        return []
    counts = {hosts[f.name].pk: f.foreign_gpus for f in facts if not f.error and f.foreign_gpus}
    per_host: dict[int, list[_Row]] = {}
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
    """Hosts not heard from within N discovery intervals of their source go offline (by the
    database's clock, which stamped `last_seen`)."""
    now = now or db_now()
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
