"""Celery tasks of allocation: thin, idempotent, retried with backoff (by the one task decorator);
the logic is in services."""

from __future__ import annotations

import logging
import time

from django.db import transaction

from allocation import running_usage
from allocation.audit import audit
from allocation.engine import run_pass, run_wanted_passes
from allocation.notify.run import notifications_run
from allocation.notify.trigger import clear_delivery_flag
from allocation.outbox import prune, relay
from allocation.selectors.invariants import ledger_check
from allocation.services.budgets import budgets_refresh
from allocation.services.idle import leases_idle_check
from allocation.services.idle_gpus import gpus_idle_check
from allocation.services.reaper import leases_reap
from allocation.triggers import clear_pass_flag, request_every_pass
from allocation.workloads.binding import TransientBindError, bindings_observe, lease_bind, lease_unbind
from core.tasks import final_attempt, gpupool_task

logger = logging.getLogger(__name__)
PRUNE_EVERY_S = 60.0
_next_prune = 0.0


# Acknowledged on receipt, unlike the other tasks: a pass is idempotent and beat runs one every
# PASS_INTERVAL_S over every pool (clearing their trigger flags), so a pass whose worker is
# killed is replaced within seconds by the next periodic one. Acknowledged late, its message
# would wait out the broker's visibility timeout (an hour, sized for the longest task and
# countdown: the Redis transport has one for every queue) and then run a stale pass.
@gpupool_task(name="allocation.schedule_pass", acks_late=False)
def schedule_pass(pool_id: int | None = None) -> None:
    """One pool's pass (handed over when another process is passing it: allocation.engine.handoff);
    without a pool (beat's periodic pass), one task per pool, so the scheduler processes share them."""
    if pool_id is None:
        clear_pass_flag(None)
        request_every_pass()
        return
    for report in run_pass([pool_id], hand_over=True):
        if report.granted or report.preempted:
            logger.info("pass %s: granted %d, preempted %d, pending %d in %.3fs", report.pool,
                        len(report.granted), len(report.preempted), report.pending, report.seconds)


@gpupool_task(name="allocation.relay_lease_events", max_retries=0)
def relay_lease_events() -> None:
    """What Redis being away left behind, caught up every second (beat) and whenever a worker
    reaches the broker again (pool.celery.CatchUpOnConnect): the lease events no writer published
    after its commit, in order, each once (then the old published ones pruned), and the passes
    whose trigger could not be sent."""
    # The passes first: leases wait on them, and their events are published as they commit.
    for report in run_wanted_passes():
        logger.info("wanted pass %s (its trigger was not sent): granted %d, preempted %d, pending %d", report.pool,
                    len(report.granted), len(report.preempted), report.pending)
    published = relay()
    if published:
        logger.info("relayed %d lease event(s) left unpublished", published)
    global _next_prune
    if time.monotonic() >= _next_prune:
        _next_prune = time.monotonic() + PRUNE_EVERY_S
        prune()


# Beat runs one every second, so a run lost with its worker is replaced at once (the late ack's
# redelivery, an hour later, is one more harmless run). Sends are bounded (webhook 3 + 5 s, SMTP
# 10 s; about 20 s a run).
@gpupool_task(name="allocation.deliver_notifications", max_retries=0, soft_time_limit=60, time_limit=90)
def deliver_notifications() -> None:
    """Derive notifications from committed facts and send the due ones (allocation.notify)."""
    clear_delivery_flag()
    counts = notifications_run()
    if any(counts.values()):
        logger.info("notifications: %s", ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v))


@gpupool_task(name="allocation.reap_leases")
def reap_leases() -> None:
    leases_reap()


@gpupool_task(name="allocation.idle_reclaim")
def idle_reclaim() -> None:
    """Idle reclaim's warnings and reclaims, then the flags and meter of allocated but idle GPUs:
    both read the same samples, which come every SAMPLE_INTERVAL_S."""
    counts = leases_idle_check()
    if any(counts.values()):
        logger.info("idle reclaim: warned %(warned)d, cleared %(cleared)d, reclaimed %(reclaimed)d", counts)
    gpus_idle_check()


@gpupool_task(name="allocation.refresh_budgets")
def refresh_budgets() -> None:
    counts = budgets_refresh()
    if counts["warned"]:
        logger.info("budgets: %(budgets)d measured, %(warned)d warnings", counts)


@gpupool_task(name="allocation.observe_bindings", soft_time_limit=240, time_limit=270)
def observe_bindings() -> None:
    bindings_observe()


@gpupool_task(name="allocation.bind_lease", retry_on=(TransientBindError,), soft_time_limit=240, time_limit=270)
def bind_lease(lease_id: str) -> None:
    lease_bind(lease_id, final_attempt=final_attempt())


@gpupool_task(name="allocation.unbind_lease", soft_time_limit=900, time_limit=960)
def unbind_lease(lease_id: str) -> None:
    """One attempt at stopping a lease's workload. A failed attempt is recorded on the lease and
    asks for the next one itself, with backoff, for as long as it takes (allocation.workloads.stopping):
    no Celery retry budget whose last attempt would free GPUs under a running workload."""
    lease_unbind(lease_id)


@gpupool_task(name="allocation.check_ledger", soft_time_limit=120, time_limit=150)
def check_ledger() -> None:
    """Alert on ledger drift: an error in the log and a `ledger.drift` audit event per run that
    finds any (read-only otherwise: safe on any number of workers, twice or not at all). The
    running usage's sums are rebuilt from the lease rows where they drifted or the half-life
    changed since they were computed (passes count the running leases one by one until then)."""
    if running_usage.half_life_changed():
        with transaction.atomic():
            running_usage.rebuild()
        logger.info("running usage's sums rebuilt with the new fair-share half-life")
    report = ledger_check()
    if report.ok:
        return
    counts = {f.check: f.count for f in report.findings}
    logger.error("ledger drift: %s", counts)
    audit(actor="system:check_ledger", action="ledger.drift", obj="ledger",
          message="; ".join(f"{f.count} × {f.meaning}" for f in report.findings),
          data=report.as_dict()).save()
    if "running_usage_sums" in counts:
        with transaction.atomic():
            running_usage.rebuild()
