"""Binding leases to workloads: start (bind), stop (unbind), watch (observe).

Connectors do the remote work; this module turns their results into lease transitions. Every
function is idempotent, so Celery may retry it or run it twice on two workers.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.base import (
    BIND_ENDED,
    BIND_FAILED,
    BIND_GONE,
    BIND_SUCCEEDED,
    AgentError,
    BindingStatus,
    BindRequest,
)
from allocation.choices import END_STATES, HOLDING_STATES, LeaseState
from allocation.leases import lease_end, lease_free_gpus, transition
from allocation.models import Lease
from allocation.triggers import request_pass
from inventory.discovery import source_connector

logger = logging.getLogger(__name__)
S = LeaseState
ACTOR = "system:binder"


class TransientBindError(Exception):
    """Raised for errors worth a retry (the task retries with backoff)."""


def _lease(lease_id: Any) -> Lease | None:
    return (Lease.objects.select_related("host__source", "priority_class")
            .filter(pk=lease_id).first())


def lease_bind(lease_id: Any, *, final_attempt: bool = False) -> str:
    """Start the workload of a granted lease. Returns what happened, in a word."""
    lease = _lease(lease_id)
    if lease is None or lease.state != S.GRANTED or not lease.binding_spec:
        return "skipped"
    if lease.host is None:
        return _fail(lease, "lease has no host to bind on")
    uuids = tuple(lease.gpus.filter(lease_links__active=True, lease_links__lease=lease)
                  .order_by("index").values_list("uuid", flat=True))
    request = BindRequest(lease_id=str(lease.pk), host_name=lease.host.name,
                          host_address=lease.host.address or lease.host.name, gpu_uuids=uuids,
                          spec=lease.binding_spec, grace_s=lease.priority_class.grace_s)
    try:
        status = source_connector(lease.host.source).bind(request)
    except AgentError as exc:
        if exc.permanent or final_attempt:
            return _fail(lease, f"binding failed: {exc.message}")
        Lease.objects.filter(pk=lease.pk, state=S.GRANTED).update(
            reason=f"binding retrying after error: {exc.message}")
        raise TransientBindError(exc.message) from exc
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        lease.binding_status = status.to_dict()
        if lease.state == S.GRANTED:
            kind = lease.binding_spec.get("kind", "workload")
            transition(lease, S.BOUND, actor=ACTOR, reason=f"{kind} started on {request.host_name}",
                       extra={"handle": dict(status.handle)}).save()
            lease.save()
            return "bound"
        if lease.state == S.BOUND:
            # Another worker bound it meanwhile (a retried task racing the first run): the
            # connector's bind is idempotent, so what it started is this very workload.
            return "skipped"
        # The lease ended while we were starting it: stop what we just started.
        lease.save(update_fields=["binding_status"])
    transaction.on_commit(lambda: lease_unbind(lease.pk))
    return "ended-meanwhile"


def _fail(lease: Lease, reason: str) -> str:
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.state in HOLDING_STATES:
            lease_end(lease, S.FAILED, actor=ACTOR, reason=reason)
    request_pass(lease.pool_id)
    return "failed"


def lease_unbind(lease_id: Any, *, final_attempt: bool = False) -> str:
    """Stop the workload of an ended lease (notice, grace, kill) and free its GPUs."""
    lease = _lease(lease_id)
    if lease is None or lease.state not in END_STATES or lease.ending_since is None:
        return "skipped"
    handle = lease.binding_status.get("handle")
    if handle and lease.host is not None:
        try:
            source_connector(lease.host.source).unbind(handle, grace_s=lease.priority_class.grace_s)
        except AgentError as exc:
            if not (exc.permanent or final_attempt):
                raise TransientBindError(exc.message) from exc
            # The host cannot be reached for good: free the GPUs but say so plainly.
            Lease.objects.filter(pk=lease.pk).update(
                reason=f"{lease.reason}; stopping the workload failed: {exc.message}")
    status = {**lease.binding_status, "state": "stopped", "stopped_at": timezone.now().isoformat()}
    Lease.objects.filter(pk=lease.pk).update(binding_status=status)
    lease_free_gpus([lease.pk])
    request_pass(lease.pool_id)
    return "unbound"


def lease_observe(lease: Lease) -> str:
    """Check a bound workload; one that ended on its own ends the lease."""
    handle = lease.binding_status.get("handle")
    if lease.state != S.BOUND or not handle or lease.host is None:
        return "skipped"
    try:
        status = source_connector(lease.host.source).observe(handle)
    except AgentError as exc:
        Lease.objects.filter(pk=lease.pk).update(
            binding_status={**lease.binding_status, "observe_error": exc.message})
        return "error"
    if status.state not in BIND_ENDED:
        if status.to_dict() != {k: lease.binding_status.get(k) for k in status.to_dict()}:
            Lease.objects.filter(pk=lease.pk).update(binding_status=status.to_dict())
        return status.state
    target, reason = _ended_reason(lease, status)
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease.pk)
        if lease.state != S.BOUND:
            return "skipped"
        lease.binding_status = {**status.to_dict(), "state": status.state}
        lease_end(lease, target, actor=ACTOR, reason=reason, keep_gpus=False)
    # The workload is already gone: nothing to stop, free the GPUs now.
    lease_free_gpus([lease.pk])
    request_pass(lease.pool_id)
    return target


def _ended_reason(lease: Lease, status: BindingStatus) -> tuple[str, str]:
    kind = lease.binding_spec.get("kind", "workload")
    if status.state == BIND_SUCCEEDED:
        return S.RELEASED, status.reason or f"{kind} finished (exit code {status.exit_code or 0})"
    if status.state == BIND_GONE:
        return S.RELEASED, status.reason or f"{kind} removed outside gpupool"
    if status.state == BIND_FAILED and status.exit_code is not None:
        return S.RELEASED, status.reason or f"{kind} exited with code {status.exit_code}"
    return S.FAILED, status.reason or f"{kind} failed"


def bindings_observe() -> dict[str, int]:
    """Observe every bound lease; re-request unbinds that seem stuck."""
    counts: dict[str, int] = {}
    for lease in Lease.objects.filter(state=S.BOUND).select_related("host__source"):
        outcome = lease_observe(lease)
        counts[outcome] = counts.get(outcome, 0) + 1
    now = timezone.now()
    stuck = Lease.objects.filter(state__in=END_STATES, ending_since__isnull=False,
                                 binding_status__has_key="handle").select_related("priority_class")
    from allocation.triggers import request_unbind

    for lease in stuck:
        ending_since = lease.ending_since
        if ending_since is not None and (now - ending_since).total_seconds() > lease.priority_class.grace_s + 30:
            request_unbind(lease.pk)
    return counts


__all__ = ["BIND_FAILED", "TransientBindError", "bindings_observe", "lease_bind", "lease_observe",
           "lease_unbind"]
