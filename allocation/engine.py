"""The scheduling engine: snapshot → pure policy → apply, per pool, in one transaction.

Each pool's pass holds a per-pool lock (a PostgreSQL transaction-level advisory lock; SQLite's
IMMEDIATE transactions already serialise writers), so several workers may run passes at once
without granting a GPU twice; the partial unique index on LeaseGpu is the last line of defence.
The snapshot costs a constant number of queries per pool, whatever the number of GPUs or leases.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from allocation.events import LeaseChange, announce
from allocation.leases import audit, bulk_audit, lease_end, transition
from allocation.ledger import half_life_s, team_usage_views
from allocation.models import Lease, LeaseGpu, PriorityClass, Quota
from allocation.policy import get_policy
from allocation.policy.types import (
    Decisions,
    GpuView,
    PriorityClassView,
    QuotaView,
    RequestView,
    RunningView,
    Snapshot,
)
from allocation.triggers import clear_pass_flag, request_bind, request_unbind
from inventory.bulk import bulk_update_fast
from inventory.choices import GpuState, Health, HostState
from inventory.models import Gpu, Pool

logger = logging.getLogger(__name__)
S = LeaseState


@dataclass
class PassReport:
    pool: str
    granted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    pending: int = 0
    seconds: float = 0.0
    freed_now: int = 0  # preempted leases whose GPUs were freed within the pass


PENDING_FIELDS = ("pk", "team_id", "team__name", "priority_class__value", "created_at", "gpu_count", "model",
                  "min_memory_mb", "same_host", "min_driver_version", "min_cuda_version", "ttl_seconds",
                  "reason", "queue_position", "estimated_start", "binding_spec")


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def lock_pool(pool_id: int) -> None:
    """Take the pool's scheduling lock for the rest of the current transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            # One bigint key per pool, in a namespace of our own ("gp" in the high bits).
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [(0x6770 << 48) | pool_id])


def build_snapshot(pool: Pool, now: datetime) -> tuple[Snapshot, dict[str, Lease], dict[int, int]]:
    """Read one pool's state in a fixed number of queries. Returns the snapshot and the pending
    lease rows by id (the apply step updates them) and each GPU's host id."""
    parents = set(Gpu.objects.filter(pool=pool, parent__isnull=False).values_list("parent_id", flat=True))
    # GPUs moved into this pool while a lease of another pool still holds them are not free here
    # until that lease ends (capacity moves never take GPUs from under a running lease).
    held_elsewhere = set(LeaseGpu.objects.filter(active=True, gpu__pool=pool).exclude(lease__pool=pool)
                         .values_list("gpu_id", flat=True))
    unavailable = parents | held_elsewhere
    gpu_rows = list(Gpu.objects.filter(pool=pool, gone=False).values_list(
        "pk", "host__name", "host__state", "model", "memory_mb", "host__driver_version",
        "host__cuda_version", "health", "foreign", "mig_profile", "shared_replicas", "host_id"))
    gpu_host = {row[0]: row[-1] for row in gpu_rows}
    gpus = tuple(
        GpuView(id=pk, pool=pool.name, host=host, model=model, memory_mb=mem or 0,
                driver_version=drv, cuda_version=cuda, mig_profile=mig,
                schedulable=(host_state == HostState.READY and health == Health.OK and not foreign
                             and pk not in unavailable),
                time_sliced=replicas > 1)
        for pk, host, host_state, model, mem, drv, cuda, health, foreign, mig, replicas, _ in gpu_rows)

    holding: dict[str, list[int]] = {}
    for lease_id, gpu_id in LeaseGpu.objects.filter(active=True, lease__pool=pool).values_list(
            "lease_id", "gpu_id"):
        holding.setdefault(str(lease_id), []).append(gpu_id)
    running_rows = Lease.objects.filter(pk__in=list(holding)).values_list(
        "pk", "team__name", "state", "priority_class__value", "priority_class__preemptible",
        "priority_class__min_runtime_s", "granted_at", "borrowed", "expires_at")
    running = tuple(
        RunningView(lease_id=str(pk), team=team, pool=pool.name, gpu_ids=tuple(holding[str(pk)]),
                    priority=prio, preemptible=preemptible, granted_at=_ts(granted) or 0.0,
                    borrowed=borrowed, min_runtime_s=min_rt, expected_end=_ts(expires),
                    ending=state in END_STATES)
        for pk, team, state, prio, preemptible, min_rt, granted, borrowed, expires in running_rows)

    # Pending leases as plain tuples: a pass that changes nothing must not build model instances.
    pending_rows = {str(row[0]): row for row in Lease.objects.filter(pool=pool, state=S.PENDING).values_list(
        *PENDING_FIELDS, named=True)}
    pending = tuple(
        RequestView(lease_id=lid, team=r.team__name, pool=pool.name, gpus=r.gpu_count,
                    priority=r.priority_class__value, created_at=r.created_at.timestamp(),
                    model=r.model, min_memory_mb=r.min_memory_mb, same_host=r.same_host,
                    min_driver_version=r.min_driver_version, min_cuda_version=r.min_cuda_version,
                    expected_duration_s=float(r.ttl_seconds))
        for lid, r in pending_rows.items())

    quotas = {(team, pool.name): QuotaView(team=team, pool=pool.name, guaranteed=g, limit=lim)
              for team, g, lim in Quota.objects.filter(pool=pool).values_list(
                  "team__name", "guaranteed", "limit")}
    classes = {pc.name: PriorityClassView(pc.name, pc.value, pc.preemptible, pc.min_runtime_s,
                                          pc.grace_s) for pc in PriorityClass.objects.all()}
    snapshot = Snapshot(now=now.timestamp(), gpus=gpus, teams=team_usage_views(now),
                        quotas=quotas, running=running, pending=pending,
                        priority_classes=classes, half_life_s=half_life_s())
    return snapshot, pending_rows, gpu_host


def run_pass(pool_ids: list[int] | None = None, *, policy: str | None = None) -> list[PassReport]:
    """Run one scheduling pass over the given pools (all pools when None)."""
    decide = get_policy(policy or settings.GPUPOOL["POLICY"])
    pools = Pool.objects.all() if pool_ids is None else Pool.objects.filter(pk__in=pool_ids)
    reports = []
    for pool in pools:
        clear_pass_flag(pool.pk)
        started = time.perf_counter()
        report = PassReport(pool=pool.name)
        with transaction.atomic():
            lock_pool(pool.pk)
            now = timezone.now()
            # A preemption of a lease with no running workload frees its GPUs at once; a second
            # round in the same transaction then grants them to the request they were taken for.
            for _round in range(3):
                snapshot, pending_rows, gpu_host = build_snapshot(pool, now)
                if not snapshot.pending:
                    break
                step = _apply(pool, decide(snapshot), pending_rows, gpu_host, now)
                report.granted += step.granted
                report.preempted += step.preempted
                report.pending = step.pending
                if not step.freed_now:
                    break
        report.seconds = time.perf_counter() - started
        reports.append(report)
    return reports


def _apply(pool: Pool, decisions: Decisions, pending_rows: dict[str, Any],
           gpu_host: dict[int, int], now: datetime) -> PassReport:
    report = PassReport(pool=pool.name)
    events = []
    links: list[LeaseGpu] = []
    granted_gpu_ids: list[int] = []
    to_bind: list[str] = []
    granted: list[Lease] = []
    changes: list[LeaseChange] = []
    for grant in decisions.grants:
        row = pending_rows[grant.lease_id]
        lease = Lease(pk=row.pk, state=S.PENDING, ttl_seconds=row.ttl_seconds, binding_spec=row.binding_spec)
        granted.append(lease)
        reason = f"granted {len(grant.gpu_ids)} GPU(s) on {grant.host}" + (
            " (borrowed capacity)" if grant.borrowed else "")
        events.append(transition(lease, S.GRANTED, actor="system:scheduler", reason=reason, now=now,
                                 extra={"gpus": list(grant.gpu_ids), "borrowed": grant.borrowed},
                                 announce=False))
        changes.append(LeaseChange(grant.lease_id, pool.pk, row.team_id, S.GRANTED))
        lease.granted_at = now
        lease.expires_at = now + timedelta(seconds=lease.ttl_seconds)
        lease.borrowed = grant.borrowed
        lease.queue_position = None
        lease.estimated_start = None
        lease.host_id = gpu_host[grant.gpu_ids[0]]
        links.extend(LeaseGpu(lease=lease, gpu_id=gid) for gid in grant.gpu_ids)
        granted_gpu_ids.extend(grant.gpu_ids)
        report.granted.append(grant.lease_id)
        if lease.binding_spec:
            to_bind.append(grant.lease_id)
    bulk_update_fast(Lease, granted, ["state", "reason", "granted_at", "expires_at", "borrowed",
                                      "queue_position", "estimated_start", "host"])
    LeaseGpu.objects.bulk_create(links, batch_size=1000)
    if granted_gpu_ids:
        # Granted GPUs were schedulable (present, healthy, on a ready host): they are now leased.
        Gpu.objects.filter(pk__in=granted_gpu_ids).update(leased=True, state=GpuState.LEASED)

    to_unbind = _apply_preemptions(decisions, now, report, events)

    changed = []
    for pend in decisions.pending:
        row = pending_rows.get(pend.lease_id)
        if row is None:
            continue
        est = datetime.fromtimestamp(pend.estimated_start, tz=now.tzinfo) if pend.estimated_start else None
        if (row.reason, row.queue_position, row.estimated_start) != (pend.reason, pend.queue_position, est):
            changed.append({"pk": row.pk, "reason": pend.reason, "queue_position": pend.queue_position,
                            "estimated_start": est})
    bulk_update_fast(Lease, changed, ["reason", "queue_position", "estimated_start"])
    report.pending = len(decisions.pending)
    bulk_audit(events)
    announce(changes)
    for lease_id in to_bind:
        transaction.on_commit(lambda lid=lease_id: request_bind(lid))
    for lease_id in to_unbind:
        transaction.on_commit(lambda lid=lease_id: request_unbind(lid))
    return report


def _apply_preemptions(decisions: Decisions, now: datetime, report: PassReport,
                       events: list) -> list[str]:
    if not decisions.preemptions:
        return []
    victims = {str(v.pk): v for v in Lease.objects.select_for_update(of=("self",)).select_related(
        "priority_class", "team").filter(pk__in=[p.lease_id for p in decisions.preemptions])}
    to_unbind = []
    for pre in decisions.preemptions:
        victim = victims.get(pre.lease_id)
        if victim is None or victim.state not in HOLDING_STATES:
            continue
        victim.preempted_by_id = pre.by_lease_id
        # A bound workload gets its notice and grace (the unbind task frees the GPUs after it);
        # a lease with nothing running on it is ended at once.
        lease_end(victim, S.PREEMPTED, actor="system:scheduler", now=now,
                  reason=f"preempted for lease {pre.by_lease_id}: {pre.reason}")
        if victim.ending_since is None:
            report.freed_now += 1
        events.append(audit(actor="system:scheduler", action="lease.preempt", obj=victim,
                             lease=victim, at=now, message=pre.reason,
                             data={"victim": pre.lease_id, "by": pre.by_lease_id,
                                   "victim_team": victim.team.name,
                                   "grace_s": victim.priority_class.grace_s}))
        report.preempted.append(pre.lease_id)
        if victim.binding_status.get("handle"):
            to_unbind.append(pre.lease_id)
    return to_unbind
