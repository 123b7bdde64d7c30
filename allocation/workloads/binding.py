"""Binding leases to workloads: start (bind), stop (unbind), watch (observe).

Connectors do the remote work; this module turns their results into lease transitions. Every
function is idempotent, so Celery may retry it or run it twice on two workers.

A lease's GPUs come back only once its workload is known to be over: observed ended, or stopped
by `lease_unbind`, which retries a failed stop with backoff for as long as it takes (the lease
shows `stopping` meanwhile; allocation.workloads.stopping), or forgotten by an admin whose host is gone for
good. Before it asks the host, a bind marks the lease (`binding_status.bind`): from then on an
end keeps the GPUs, since a bind whose reply is lost may have started the workload all the same;
and a bind that failed has what it may have left deleted by name (`Connector.bind_handle`).

Every time written here (an end, a bind mark, a stop attempt and its next one) is the database's
clock (core.db.db_now), never this worker's: another process compares them, and a worker whose
clock runs minutes off would end leases minutes late or judge a bind abandoned too soon.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from django.db import transaction

from agents.base import (
    BIND_ENDED,
    BIND_FAILED,
    BIND_GONE,
    BIND_STARTING,
    BIND_SUCCEEDED,
    AgentError,
    BindingStatus,
    BindRequest,
    Connector,
)
from allocation.audit import audit
from allocation.choices import END_STATES, LeaseState
from allocation.lease_states import lease_end, lease_free_gpus, transition
from allocation.models import Lease
from allocation.triggers import request_pass, request_unbind
from allocation.workloads import stopping
from core.db import db_now
from inventory.discovery import source_connector

logger = logging.getLogger(__name__)
ACTOR = "system:binder"

# What a bind, an unbind and an observation did, in a word (task logs, `bindings_observe` counts,
# the fault tests). An observation of a workload still going reports its binding state; one
# that ended reports the lease's end state.
BindOutcome = Literal["bound", "skipped", "failed", "ended-meanwhile"]
UnbindOutcome = Literal["unbound", "skipped", "in-progress", "waiting", "retrying"]
ObserveOutcome = Literal["skipped", "error", "starting", "running", "released", "failed"]


class TransientBindError(Exception):
    """Raised for errors worth a retry (the task retries with backoff)."""


def _lease(lease_id: Any, *, lock: bool = False) -> Lease | None:
    leases = Lease.objects.select_related("host__source", "priority_class")
    if lock:
        leases = leases.select_for_update(of=("self",))
    return leases.filter(pk=lease_id).first()


def bind_request(lease: Lease) -> BindRequest | None:
    """What the connector needs to start the lease's workload, or to find it again by name. A
    stranded workload (services.leases: a requeued lease's first binding) is named after the lease
    and generation it was started for. None without a host."""
    if lease.host is None:
        return None
    status = lease.binding_status or {}
    origin = status.get("binding_of") or {}
    # The GPUs on its host: a spread lease's workload starts on the host holding most of them, and
    # a pod (or CUDA_VISIBLE_DEVICES) can only use the GPUs of its own node.
    uuids = tuple(lease.gpus.filter(lease_links__active=True, lease_links__lease=lease, host_id=lease.host_id)
                  .order_by("index").values_list("uuid", flat=True))
    return BindRequest(lease_id=str(origin.get("lease") or lease.pk), host_name=lease.host.name,
                       host_address=lease.host.address or lease.host.name, gpu_uuids=uuids,
                       spec=lease.binding_spec, grace_s=lease.priority_class.grace_s,
                       generation=int(origin.get("generation", status.get("generation", 0)) or 0))


def _with_generation(status: dict[str, Any], request: BindRequest) -> dict[str, Any]:
    return {**status, "generation": request.generation} if request.generation else status


def lease_bind(lease_id: Any, *, final_attempt: bool = False) -> BindOutcome:
    """Start the workload of a granted lease. Returns what happened, in a word."""
    lease = _lease(lease_id)
    if lease is None or lease.state != LeaseState.GRANTED or not lease.binding_spec:
        return "skipped"
    request = bind_request(lease)
    if request is None or lease.host is None:
        return _fail(lease, "lease has no host to bind on")
    if not _mark_binding(lease.pk):
        return "skipped"  # it ended (or was bound by another worker) before we asked the host
    connector = source_connector(lease.host.source)
    try:
        status = connector.bind(request)
    except AgentError as exc:
        return _bind_failed(lease.pk, exc, final=exc.permanent or final_attempt, generation=request.generation)
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        current = _generation(lease) == request.generation
        if current and lease.state == LeaseState.BOUND:
            # Another worker bound it meanwhile (a retried task racing the first run): the
            # connector's bind is idempotent, so what it started is this very workload.
            return "skipped"
        if current and lease.state == LeaseState.GRANTED:
            lease.binding_status = _with_generation(status.to_dict(), request)
            kind = lease.binding_spec.get("kind", "workload")
            transition(lease, LeaseState.BOUND, actor=ACTOR, reason=f"{kind} started on {request.host_name}",
                       now=db_now(), extra={"handle": dict(status.handle)}).save()
            lease.save()
            return "bound"
        # The lease ended while we were starting it: it kept its GPUs (the bind mark), or the
        # stranded copy of a requeued lease did; stop what we just started, its handle now known.
        holder = _holder(lease, request.generation)
        if holder is not None:
            stop = holder.binding_status.get("stop")
            holder.binding_status = {**holder.binding_status, **status.to_dict(), "state": "stopping",
                                     **({"stop": stop} if stop else {})}
            holder.save(update_fields=["binding_status"])
    if holder is None or holder.ending_since is None:
        _stop_unheld(connector, status, request)  # its GPUs were freed meanwhile (an admin forgot it)
    else:
        lease_unbind(holder.pk)
    return "ended-meanwhile"


def _generation(lease: Lease) -> int:
    return int((lease.binding_status or {}).get("generation") or 0)


def _holder(lease: Lease, generation: int) -> Lease | None:
    """Who holds the GPUs (and the stop) of binding `generation` of this locked lease once that
    binding is no longer starting: the lease itself if it ended, its stranded copy if it was
    requeued since (a later generation is its own binding, never this one's)."""
    if _generation(lease) == generation:
        return lease if lease.state in END_STATES else None
    return _stranded(lease.pk, generation)


def _stranded(lease_id: Any, generation: int) -> Lease | None:
    """The lease holding the stop of this lease's binding `generation` after a requeue, locked."""
    return (Lease.objects.select_for_update().filter(
        binding_status__binding_of__lease=str(lease_id), state__in=END_STATES)
        .filter(binding_status__binding_of__generation=generation).first())


def _mark_binding(lease_id: Any) -> bool:
    """Mark a granted lease as being bound, before the host is asked; False if it is no longer
    granted (ended, or bound by another worker), and then nothing must be started."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().filter(pk=lease_id).first()
        if lease is None or lease.state != LeaseState.GRANTED:
            return False
        bind = {**(lease.binding_status.get("bind") or {}), "started_at": stopping.iso(db_now()),
                "in_flight": True}
        lease.binding_status = {**lease.binding_status, "bind": bind}
        lease.save(update_fields=["binding_status"])
    return True


def _bind_failed(lease_id: Any, exc: AgentError, *, final: bool, generation: int) -> BindOutcome:
    """A bind raised: retry it (transient, attempts left), or fail the lease; either way the bind
    is no longer in flight. A failed lease keeps its GPUs until what the bind may have left on
    the host (a pod, a process started after the reply was lost) is deleted by name."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        current = _generation(lease) == generation
        if current and lease.state == LeaseState.BOUND:
            return "skipped"  # another worker's bind of the same workload succeeded
        retry = current and lease.state == LeaseState.GRANTED and not final
        fail = current and lease.state == LeaseState.GRANTED and final
        holder = lease if retry or fail else _holder(lease, generation)
        if holder is not None:
            bind = {**(holder.binding_status.get("bind") or {}), "in_flight": False, "error": exc.message}
            holder.binding_status = {**holder.binding_status, "bind": bind}
        if retry:
            lease.reason = f"binding retrying after error: {exc.message}"
            lease.save(update_fields=["binding_status", "reason"])
        elif fail:
            lease_end(lease, LeaseState.FAILED, actor=ACTOR, reason=f"binding failed: {exc.message}", now=db_now())
        elif holder is not None:  # ended meanwhile: its unbind may be waiting for this bind
            holder.save(update_fields=["binding_status"])
    if retry:  # raised after the commit: the mark must say the bind is no longer in flight
        raise TransientBindError(exc.message) from exc
    if holder is not None:
        lease_unbind(holder.pk)
    request_pass(lease.pool_id)
    return "failed" if fail else "ended-meanwhile"


def _fail(lease: Lease, reason: str) -> BindOutcome:
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.state == LeaseState.GRANTED:
            lease_end(lease, LeaseState.FAILED, actor=ACTOR, reason=reason, now=db_now())
    request_pass(lease.pool_id)
    return "failed"


def _stop_unheld(connector: Connector, status: BindingStatus, request: BindRequest) -> None:
    try:
        connector.unbind(status.handle, grace_s=request.grace_s)
    except AgentError as exc:
        logger.error("lease %s: could not stop a workload started after its GPUs were freed: %s",
                     request.lease_id, exc.message)


def lease_unbind(lease_id: Any, *, final_attempt: bool = False) -> UnbindOutcome:
    """Stop the workload of an ended lease (notice, grace, kill) and free its GPUs once it has
    stopped. A failed attempt keeps the GPUs, is recorded on the lease (`stopping`: the error,
    the attempts, the next one) and is retried with backoff: there is no last attempt after
    which the GPUs are freed anyway (`final_attempt` is accepted and ignored). Returns what
    happened, in a word."""
    now = db_now()
    with transaction.atomic():
        lease = _lease(lease_id, lock=True)
        if lease is None or lease.state not in END_STATES or lease.ending_since is None:
            return "skipped"
        status = lease.binding_status or {}
        if stopping.claimed(status, now):
            return "in-progress"  # another worker's attempt: it reports for itself
        bind = status.get("bind") or {}
        started = stopping.parse(bind.get("started_at")) or now
        if not status.get("handle") and bind.get("in_flight") and (
                now - started).total_seconds() < stopping.BIND_ABANDONED_S:
            until = started + timedelta(seconds=stopping.BIND_ABANDONED_S)
            lease.binding_status = stopping.with_wait(status, until, "waiting for the bind in flight to report")
            lease.save(update_fields=["binding_status"])
            return "waiting"  # that bind, reporting to an ended lease, stops what it started
        connector, handle, problem = _stop_target(lease, status)
        if handle is not None or problem:
            lease.binding_status = stopping.with_claim(status, now, lease.priority_class.grace_s)
            lease.save(update_fields=["binding_status"])
    if problem:
        return _stop_failed(lease.pk, problem, permanent=True)
    if handle is None or connector is None:
        return _stopped(lease.pk)  # nothing was (or can have been) started on the host
    try:
        connector.unbind(handle, grace_s=lease.priority_class.grace_s)
    except AgentError as exc:
        return _stop_failed(lease.pk, exc.message, permanent=exc.permanent)
    return _stopped(lease.pk)


def _stop_target(lease: Lease, status: dict[str, Any]) -> tuple[Connector | None, Any, str]:
    """(connector, handle to stop, problem): the bound workload's handle, or the name a bind that
    never reported may have used (`bind_handle`); no handle when nothing can be running; a
    problem (permanent) when the host cannot even be addressed."""
    handle = status.get("handle")
    if not handle and not status.get("bind"):
        return None, None, ""
    if lease.host is None:
        return None, None, "the lease's host is no longer in the inventory"
    try:
        connector = source_connector(lease.host.source)
    except Exception as exc:  # an unknown kind, unreadable secrets: say so, keep the GPUs
        return None, None, f"cannot use source {lease.host.source.name}: {exc}"
    if not handle:
        request = bind_request(lease)
        handle = connector.bind_handle(request) if request is not None else None
    return connector, handle, ""


def _stopped(lease_id: Any) -> UnbindOutcome:
    """The workload is over: free the GPUs (unless an admin forgot it meanwhile: done already)."""
    now = db_now()
    with transaction.atomic():
        lease = Lease.objects.select_for_update().filter(pk=lease_id).first()
        if lease is None or lease.state not in END_STATES or lease.ending_since is None:
            return "skipped"
        status = lease.binding_status or {}
        attempts = int((status.get("stop") or {}).get("attempts") or 0)
        fields = ["binding_status"]
        if status:
            lease.binding_status = stopping.with_stopped(status, now)
        if attempts:
            before = (status.get("stop") or {}).get("reason_before")
            if before is not None:
                lease.reason, fields = before, [*fields, "reason"]
            audit(actor=ACTOR, action="lease.stopped", obj=lease, lease=lease, at=now,
                  message=f"workload stopped after {attempts} failed attempt(s); GPUs freed",
                  data={"attempts": attempts}).save()
        lease.save(update_fields=fields)
        lease_free_gpus([lease.pk])
    request_pass(lease.pool_id)
    return "unbound"


def _stop_failed(lease_id: Any, message: str, *, permanent: bool) -> UnbindOutcome:
    """Record a failed stop on the lease, keep its GPUs, and ask for the next attempt."""
    now = db_now()
    with transaction.atomic():
        lease = Lease.objects.select_for_update().filter(pk=lease_id).first()
        if lease is None or lease.state not in END_STATES or lease.ending_since is None:
            return "skipped"  # forgotten by an admin meanwhile
        status, delay, news = stopping.with_failure(lease.binding_status or {}, now, message, permanent=permanent)
        stop = status["stop"]
        before = stop.setdefault("reason_before", lease.reason)
        retry = ("retried every " if permanent else "next attempt in ") + stopping.describe_delay(delay)
        lease.reason = (f"{before}; its workload could not be stopped yet (attempt {stop['attempts']}: "
                        f"{message}); its GPUs stay held, {retry}")
        lease.binding_status = status
        lease.save(update_fields=["binding_status", "reason"])
        if news:
            audit(actor=ACTOR, action="lease.stop_failed", obj=lease, lease=lease, at=now,
                  message=f"stopping its workload failed: {message}; GPUs held, {retry}",
                  data={"attempts": stop["attempts"], "permanent": permanent, "error": message}).save()
    logger.warning("lease %s: stopping its workload failed (attempt %d): %s; %s", lease_id,
                   stop["attempts"], message, retry)
    transaction.on_commit(partial(request_unbind, lease_id, countdown=delay))
    return "retrying"


def lease_observe(lease: Lease) -> ObserveOutcome:
    """Check a bound workload; one that ended on its own ends the lease."""
    handle = lease.binding_status.get("handle")
    if lease.state != LeaseState.BOUND or not handle or lease.host is None:
        return "skipped"
    try:
        status = source_connector(lease.host.source).observe(handle)
    except AgentError as exc:
        Lease.objects.filter(pk=lease.pk).update(
            binding_status={**lease.binding_status, "observe_error": exc.message})
        return "error"
    if status.state not in BIND_ENDED:
        if status.to_dict() != {k: lease.binding_status.get(k) for k in status.to_dict()}:
            generation = lease.binding_status.get("generation")
            Lease.objects.filter(pk=lease.pk).update(
                binding_status={**status.to_dict(), **({"generation": generation} if generation else {})})
        # Connectors report a workload still going as starting or running (agents.base).
        return "starting" if status.state == BIND_STARTING else "running"
    target, reason = _ended_reason(lease, status)
    # A workload that never started or was refused (a pod Pending past its deadline, rejected by
    # the kubelet) may still be there, and may yet start: it is deleted before the GPUs come back.
    # One that ran and ended (an exit code) or vanished has nothing left to stop, unless users had
    # shells on it (allocation.services.shells): those are ended, and their keys taken out, first.
    stop_first = target == "failed" and status.state != BIND_GONE
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.state != LeaseState.BOUND:
            return "skipped"
        stop_first = stop_first or lease.shell_keys.exists()
        generation = lease.binding_status.get("generation")
        lease.binding_status = {**status.to_dict(), "state": status.state,
                                **({"generation": generation} if generation else {})}
        lease_end(lease, target, actor=ACTOR, reason=reason, workload_gone=not stop_first, now=db_now())
    if stop_first:
        lease_unbind(lease.pk)
    request_pass(lease.pool_id)
    return target


def _ended_reason(lease: Lease, status: BindingStatus) -> tuple[Literal["released", "failed"], str]:
    kind = lease.binding_spec.get("kind", "workload")
    if status.state == BIND_SUCCEEDED:
        return "released", status.reason or f"{kind} finished (exit code {status.exit_code or 0})"
    if status.state == BIND_GONE:
        return "released", status.reason or f"{kind} removed outside gpupool"
    if status.state == BIND_FAILED and status.exit_code is not None:
        return "released", status.reason or f"{kind} exited with code {status.exit_code}"
    return "failed", status.reason or f"{kind} failed"


def bindings_observe() -> dict[str, int]:
    """Observe every bound lease; ask again for stops that are due (allocation.workloads.stopping.stop_due:
    a retry whose message was lost, a host back after failed attempts)."""
    counts: dict[str, int] = {}
    for lease in Lease.objects.filter(state=LeaseState.BOUND).select_related("host__source"):
        outcome = lease_observe(lease)
        counts[outcome] = counts.get(outcome, 0) + 1
    now = db_now()
    for lease in stopping.pending_stops().select_related("priority_class", "host"):
        host = lease.host
        seen = host.last_seen if host is not None and not host.is_offline else None
        if stopping.stop_due(lease, now, host_seen_at=seen):
            request_unbind(lease.pk)
            counts["stop_requested"] = counts.get("stop_requested", 0) + 1
    return counts


__all__ = ["BIND_FAILED", "BindOutcome", "ObserveOutcome", "TransientBindError", "UnbindOutcome", "bind_request",
           "bindings_observe", "lease_bind", "lease_observe", "lease_unbind"]
