"""Celery tasks of allocation: thin, idempotent, retried with backoff; the logic is in services."""

from __future__ import annotations

import logging

from allocation.binding import TransientBindError, bindings_observe, lease_bind, lease_unbind
from allocation.engine import run_pass
from allocation.services.leases import leases_reap
from core.tasks import gpupool_task

logger = logging.getLogger(__name__)
RETRY = {"max_retries": 6, "retry_backoff": 2, "retry_backoff_max": 60, "retry_jitter": True}


@gpupool_task(name="allocation.schedule_pass")
def schedule_pass(pool_id: int | None = None) -> None:
    for report in run_pass(None if pool_id is None else [pool_id]):
        if report.granted or report.preempted:
            logger.info("pass %s: granted %d, preempted %d, pending %d in %.3fs", report.pool,
                        len(report.granted), len(report.preempted), report.pending, report.seconds)


@gpupool_task(name="allocation.reap_leases")
def reap_leases() -> None:
    leases_reap()


@gpupool_task(name="allocation.observe_bindings", soft_time_limit=240, time_limit=270)
def observe_bindings() -> None:
    bindings_observe()


@gpupool_task(name="allocation.bind_lease", bind=True, soft_time_limit=240, time_limit=270)
def bind_lease(self, lease_id: str) -> None:  # type: ignore[no-untyped-def]
    try:
        lease_bind(lease_id, final_attempt=self.request.retries >= RETRY["max_retries"])
    except TransientBindError as exc:
        raise self.retry(exc=exc, countdown=min(2 ** self.request.retries, 60),
                         max_retries=RETRY["max_retries"]) from exc


@gpupool_task(name="allocation.unbind_lease", bind=True, soft_time_limit=900, time_limit=960)
def unbind_lease(self, lease_id: str) -> None:  # type: ignore[no-untyped-def]
    try:
        lease_unbind(lease_id, final_attempt=self.request.retries >= RETRY["max_retries"])
    except TransientBindError as exc:
        raise self.retry(exc=exc, countdown=min(2 ** self.request.retries, 60),
                         max_retries=RETRY["max_retries"]) from exc
