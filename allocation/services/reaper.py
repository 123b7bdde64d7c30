"""Ends the leases nobody released: expired past their TTL, lost with a host offline past the
grace (or requeued, with their workload left to a stranded copy), and the GPUs of unbound leases
whose preemption notice ran out. Each decision is made again on the locked row."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction

from allocation.audit import audit
from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from allocation.lease_states import lease_end, lease_free_gpus, stop_pending, transition
from allocation.models import WORKLOAD_MAY_RUN, Lease, LeaseGpu, expired_at
from allocation.triggers import request_pass, request_unbind
from core.db import db_now
from inventory.choices import HostState


def leases_reap(*, now: datetime | None = None) -> dict[str, int]:
    """Periodic housekeeping: expire leases past their TTL, lose leases on hosts offline past the
    grace, free GPUs of unbound leases whose preemption notice ran out. `now` defaults to the
    database's clock, the one every lease's `expires_at` and host's `offline_since` were set by:
    a worker whose own clock runs minutes ahead must not expire leases minutes early."""
    now = now or db_now()
    counts = {"expired": 0, "lost": 0, "freed": 0, "requeued": 0}
    pools: set[int] = set()
    for pk in _expired_ids(now):
        with transaction.atomic():
            # Decided again on the locked row: a renewal committed since the read above moved
            # `expires_at` past `now` and is honoured (tests/allocation/test_reaper_locks.py).
            lease = Lease.objects.select_for_update().get(pk=pk)
            if lease.is_expired(now):
                lease_end(lease, LeaseState.EXPIRED, actor="system:reaper", now=now,
                          reason=f"TTL ran out at {lease.expires_at:%H:%M:%S} UTC without renewal")
                counts["expired"] += 1
                pools.add(lease.pool_id)
                if lease.ending_since:
                    transaction.on_commit(partial(request_unbind, lease.pk))
    grace = timedelta(seconds=settings.GPUPOOL["LOST_GRACE_S"])
    lost = Lease.objects.filter(state__in=HOLDING_STATES, host__state=HostState.OFFLINE,
                                host__offline_since__lte=now - grace).values_list("pk", flat=True)
    counts["lost"], counts["requeued"] = leases_mark_lost(list(lost[:1000]), reason_prefix="host offline",
                                                          now=now, pools=pools)
    counts["freed"] = _free_notice_run_out(now, pools)
    for pool_id in pools:
        request_pass(pool_id)
    return counts


def _expired_ids(now: datetime) -> list[Any]:
    """Leases past their TTL at `now`, read without a lock (each is locked and checked again)."""
    return list(Lease.objects.filter(expired_at(now)).values_list("pk", flat=True)[:1000])


def _notice_candidates(now: datetime) -> list[Any]:
    """Unbound ended leases holding GPUs past their notice at `now`, read without a lock."""
    ending = (Lease.objects.filter(state__in=END_STATES, ending_since__isnull=False, gpu_links__active=True)
              .exclude(WORKLOAD_MAY_RUN).values_list("pk", "ending_since", "priority_class__grace_s").distinct())
    return [pk for pk, since, grace_s in ending if since is not None and since + timedelta(seconds=grace_s) <= now]


def _notice_run_out(lease: Lease, now: datetime) -> bool:
    return (lease.state in END_STATES and lease.ending_since is not None and not lease.has_workload
            and lease.ending_since + timedelta(seconds=lease.priority_class.grace_s) <= now)


def _free_notice_run_out(now: datetime, pools: set[int]) -> int:
    """Unbound leases preempted with notice get their GPUs back once the grace has passed; never
    those with a workload or a bind that may have started one: only a stop frees them
    (allocation.workloads.binding.lease_unbind). Returns how many GPU links were freed. Locked
    first (lease, host, GPU: every writer's order) and decided again on the locked rows, so what
    committed since the unlocked read wins; a lease held elsewhere is left to the next reap."""
    candidates = _notice_candidates(now)
    if not candidates:
        return 0
    with transaction.atomic():
        locked = (Lease.objects.select_for_update(skip_locked=True, of=("self",)).select_related("priority_class")
                  .filter(pk__in=candidates).order_by("pk"))
        due = [lease for lease in locked if _notice_run_out(lease, now)]
        if not due:
            return 0
        pools.update(lease.pool_id for lease in due)
        return lease_free_gpus([lease.pk for lease in due])


def leases_mark_lost(lease_ids: list[Any], *, reason_prefix: str, now: datetime | None = None,
                     pools: set[int] | None = None) -> tuple[int, int]:
    """Leases whose host or GPUs are gone become `lost`; with requeue_on_loss they go back to
    pending to be placed elsewhere (the high-availability path). Returns (lost, requeued).

    A lost lease's pod or process may still run where the host (or cluster) cannot be reached
    from here: its GPUs stay held (they are offline with their host anyway) until the unbind
    task, retried while the host is away, has stopped it, or an admin forgets the host's
    workloads. Freeing them now would hand them out again under a workload that still runs. A
    requeued lease cannot hold GPUs while pending: its old GPUs and the stop of its old workload
    pass to a stranded copy of it (`_strand`), and it binds again under a new generation."""
    now = now or db_now()
    lost = requeued = 0
    for pk in lease_ids:
        with transaction.atomic():
            lease = Lease.objects.select_for_update(of=("self",)).select_related("host").get(pk=pk)
            if not lease.is_holding:
                continue
            host = lease.host.name if lease.host else "its host"
            lease_end(lease, LeaseState.LOST, actor="system:inventory", now=now, keep_gpus=False,
                      reason=f"{reason_prefix}: {host}")
            stranded = None
            if stop_pending(lease):
                stranded = _strand(lease, now) if lease.requeue_on_loss else lease
                transaction.on_commit(partial(request_unbind, stranded.pk))
            elif lease.ending_since is not None:
                lease_free_gpus([lease.pk])
            lost += 1
            if pools is not None:
                pools.add(lease.pool_id)
            if lease.requeue_on_loss:
                generation = int(lease.binding_status.get("generation") or 0)
                note = f"; its old workload is being stopped as lease {stranded.pk}" if stranded else ""
                transition(lease, LeaseState.PENDING, actor="system:inventory", now=now,
                           reason=f"requeued after loss of {host}{note}").save()
                # A later bind is a new generation, named apart (pod, lease directory) from every
                # earlier one: also when nothing ran this time, or a second requeue would fall
                # back to the first name, which that workload's stranded copy may still hold.
                lease.binding_status = {"generation": generation + 1}
                lease.save()
                # The GPUs it held are in the audit trail; their links would stop the same GPU
                # being granted to it again when its host comes back (lease_gpu_unique).
                LeaseGpu.objects.filter(lease_id=lease.pk, active=False).delete()
                requeued += 1
    return lost, requeued


def _strand(lease: Lease, now: datetime) -> Lease:
    """A copy of a lost lease about to be requeued that holds what the lease cannot while pending:
    its GPUs (the active links move to it) and the stop of its workload (the handle, or the bind
    mark). It is `lost` with `ending_since` set, like any lease whose workload is being stopped,
    never granted (no fair-share or meter time of its own: the lease's was closed with its end),
    and it is listed with the team's leases, so the GPUs it holds are accounted for."""
    gpus = LeaseGpu.objects.filter(lease_id=lease.pk, active=True)
    host = lease.host.name if lease.host else "its host"
    generation = int(lease.binding_status.get("generation") or 0)
    twin = Lease(team_id=lease.team_id, user_id=lease.user_id, pool_id=lease.pool_id,
                 priority_class_id=lease.priority_class_id, gpu_count=max(1, gpus.count()),
                 model=lease.model, same_host=lease.same_host, ttl_seconds=lease.ttl_seconds,
                 host_id=lease.host_id, state=LeaseState.LOST, created_at=now, ended_at=now, ending_since=now,
                 binding_kind=lease.binding_kind, binding_spec=lease.binding_spec,
                 binding_status={**lease.binding_status, "state": "stopping",
                                 "binding_of": {"lease": str(lease.pk), "generation": generation}},
                 reason=f"the workload of lease {lease.pk}, left on {host} when the lease was requeued: "
                        "its GPUs stay held until it is stopped")
    twin.save(force_insert=True)
    gpus.update(lease_id=twin.pk)
    audit(actor="system:inventory", action="lease.stranded", obj=twin, lease=twin, at=now,
          message=twin.reason, data={"lease": str(lease.pk), "generation": generation}).save()
    return twin
