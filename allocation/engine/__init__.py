"""The scheduling engine: snapshot → pure policy → apply, per pool, in one transaction.

Each pool's pass holds a per-pool lock (a PostgreSQL transaction-level advisory lock), so several
workers may run passes at once without granting a GPU twice; the partial unique index on LeaseGpu
is the last line of defence.

Cost per pass, whatever the number of GPUs or leases: a fixed number of queries to read the pool
(`snapshot`), then a few set-based statements to write what changed (`apply`): the granted lease
rows, their GPU links and meters, the GPU rows, the preempted leases, every audit event and outbox
row of the pass in one statement, and the queue explanations that changed
(`apply.write_explanations` bounds how many). A pass that changes nothing writes nothing. Every
lease granted or preempted gets its event in the outbox in the pass's transaction; watchers hear
of them once it commits (`outbox.publish_after_commit`), and of the pending leases whose explanation changed too
(`events.announce_explained`: a long poll on one of them answers at once).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from prometheus_client import Histogram

from allocation.audit import audit_insert
from allocation.engine import handoff
from allocation.engine.apply import after, apply_decisions, estimate_head, write_explanations
from allocation.engine.lease_reads import PendingRow
from allocation.engine.snapshot import build_snapshot, read_pool
from allocation.events import announce_explained
from allocation.models import PassWanted
from allocation.outbox import outbox_insert, publish_after_commit
from allocation.policy import get_policy
from allocation.policy.types import Decisions, Snapshot
from allocation.triggers import clear_pass_flag, request_bind, request_unbind, want_pass
from core.db import POOL_LOCKS, advisory_xact_lock, advisory_xact_try_lock
from core.db.bulk import bulk_insert_together
from core.tasks import TASK_METRICS
from inventory.models import Pool

__all__ = ["PassReport", "PendingRow", "build_snapshot", "lock_pool", "run_pass", "run_wanted_passes"]
logger = logging.getLogger(__name__)
ROUNDS = 3
# Passes of one pool run back to back by one task, at most, for wishes made while it ran: past
# that the wish stays in PassWanted for the catch-up, and the worker goes on to other pools.
AGAIN_MAX = 8
# Served where the pass runs: the scheduler worker's metrics port (or /metrics when tasks run eagerly).
PASS_SECONDS = Histogram("gpupool_pass_duration_seconds", "Scheduling pass time per pool (lock held)",
                         ["pool"], registry=TASK_METRICS,
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))


@dataclass
class PassReport:
    pool: str
    granted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    pending: int = 0
    seconds: float = 0.0
    freed_now: int = 0  # preempted leases whose GPUs were freed within the pass


def lock_pool(pool_id: int, *, wait: bool = True) -> datetime | None:
    """Take the pool's scheduling lock for the rest of the current transaction; returns the
    database's clock once it is held (the one clock every grant's `expires_at` counts from), or
    None at once without `wait` when another transaction holds it.

    The rest of the transaction runs without JIT compilation, set by the lock's own statement.
    PostgreSQL compiles a statement whose estimated cost passes jit_above_cost (100,000 by
    default), which a pass's reads over tens of thousands of GPUs or links reach: 25 ms of
    compiling for a 17 ms read of 50 pools' links (bench/bench_scale.py). What runs under this
    lock is short indexed reads and set-based writes: compiling them never pays."""
    if wait:
        return advisory_xact_lock(POOL_LOCKS, pool_id, no_jit=True)
    return advisory_xact_try_lock(POOL_LOCKS, pool_id, no_jit=True)


def run_pass(pool_ids: list[int] | None = None, *, policy: str | None = None,
             hand_over: bool = False) -> list[PassReport]:
    """Run one scheduling pass over the given pools (all pools when None); one report per pool.

    `hand_over` (the scheduler's tasks): a pool whose lock another transaction holds is not
    waited for but handed over to it (`handoff`: it passes the pool again once it commits), and
    a wish for a pass made while this one ran runs one more at once; so a pool may have no
    report, or several."""
    decide = get_policy(policy or settings.GPUPOOL["POLICY"])
    pools = Pool.objects.all() if pool_ids is None else Pool.objects.filter(pk__in=pool_ids)
    reports = []
    for pool in pools:
        if not hand_over:
            report = _timed_pass(pool, decide, wait=True)
            assert report is not None
            reports.append(report)
            continue
        report = _timed_pass(pool, decide, wait=False)
        if report is None:  # busy: leave the wish where the holder looks after its commit
            want_pass(pool.pk)
            report = _timed_pass(pool, decide, wait=False)
        runs = 0
        while report is not None:  # None: whoever holds it now claims the wish, or the catch-up does
            reports.append(report)
            runs += 1
            if runs >= AGAIN_MAX or not handoff.wanted(pool.pk):
                break
            report = _timed_pass(pool, decide, wait=False)
    return reports


def _timed_pass(pool: Pool, decide: Callable[[Snapshot], Decisions], *, wait: bool) -> PassReport | None:
    """One pass of `pool`, its lock taken (waiting for it, or None at once when it is held)."""
    clear_pass_flag(pool.pk)
    started = time.perf_counter()
    # No cyclic garbage collection while the pool is locked: a pass makes tens of thousands of
    # short-lived tuples, enough to set off full collections over every object the process
    # keeps (the views reused between passes among them), a pause of tens of milliseconds
    # at random. Reference counting frees the pass's objects anyway; cycles wait until after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with transaction.atomic():
            # The database's clock, not this worker's: a lease's expires_at is later
            # compared with it by whichever process reaps or renews (core.db.db_now).
            now = lock_pool(pool.pk) if wait else handoff.lock_and_claim(pool.pk)
            if now is None:
                return None
            report = _pass(pool, decide, now)
    finally:
        if collecting:
            gc.enable()
    report.seconds = time.perf_counter() - started
    PASS_SECONDS.labels(pool=pool.name).observe(report.seconds)
    return report


def run_wanted_passes() -> list[PassReport]:
    """Run the passes recorded as wanted while the broker could not take their trigger
    (`allocation.triggers.want_pass`), one per pool; usually none (one read of an empty table).

    Each pool's wishes are claimed in the transaction of its pass (a worker running the same
    claims skips them), so a pass that fails leaves them for the next call, and a pass that
    commits took them away with it."""
    table = connection.ops.quote_name(PassWanted._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"SELECT DISTINCT pool_id FROM {table} ORDER BY pool_id")
        wanted = [int(row[0]) for row in cur.fetchall()]
    reports = []
    for pool_id in wanted:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(handoff.claim_sql() + " RETURNING pool_id", [pool_id])
            if cur.fetchone() is not None:
                reports += run_pass([pool_id])
    return reports


def _pass(pool: Pool, decide: Callable[[Snapshot], Decisions], now: datetime) -> PassReport:
    report = PassReport(pool=pool.name)
    read = read_pool(pool, now, estimate_head=estimate_head(pool.pk))
    decisions: Decisions | None = None
    audit, changes, to_bind, to_unbind = [], [], [], []
    # A preemption of a lease with no running workload frees its GPUs at once; another round in
    # the same transaction then grants them to the request they were taken for. Each round
    # starts from what the previous one wrote, not from a re-read.
    for _round in range(ROUNDS):
        if not read.snapshot.pending:
            break
        decisions = decide(read.snapshot)
        step = apply_decisions(pool, read, decisions, now)
        report.granted += step.granted
        report.preempted += step.preempted
        report.freed_now += len(step.freed)
        audit += step.audit
        changes += step.changes
        to_bind += step.to_bind
        to_unbind += step.to_unbind
        if not step.freed:
            break
        read = after(read, step)
    if decisions is not None:
        explained = write_explanations(pool, read, decisions, now)
        if explained:
            transaction.on_commit(lambda: announce_explained(explained))
        report.pending = len(decisions.pending)
    # The pass's audit events and outbox rows: one statement.
    bulk_insert_together([audit_insert(audit), outbox_insert(changes)])
    if changes:
        publish_after_commit()
    if to_bind or to_unbind:
        transaction.on_commit(lambda: _request_workers(to_bind, to_unbind))
    return report


def _request_workers(to_bind: list[str], to_unbind: list[str]) -> None:
    for lease_id in to_bind:
        request_bind(lease_id)
    for lease_id in to_unbind:
        request_unbind(lease_id)
