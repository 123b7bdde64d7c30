"""Applying a pass's decisions in set-based statements, from what the pass already read.

Grants: one UPDATE of the lease rows (only those still pending: a lease cancelled meanwhile is
left alone and gets nothing), one statement inserting their GPU links (the partial unique index
refuses a GPU in two active leases) and their meters, one UPDATE of the GPU rows, and their audit
events in the pass's one INSERT of audit events and outbox rows. Preemptions: one locking read of
the victims, then `leases_end` (constant statements whatever their number). Queue explanations:
one UPDATE of the rows whose explanation changed, bounded as `write_explanations` says. Nothing
is written for what did not change, so a pass that changes nothing writes nothing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from allocation.audit import AuditRow
from allocation.choices import LeaseState
from allocation.engine.lease_reads import PendingRow, version_sql
from allocation.engine.snapshot import PoolRead, remember_written
from allocation.events import LeaseChange
from allocation.lease_states import leases_end, stop_pending, transition_row
from allocation.models import Lease, LeaseGpu, LeaseUsage, PoolScheduling
from allocation.policy.types import Decisions, Grant, RunningView
from core.db.bulk import bulk_insert_together, bulk_set, bulk_update_columns, bulk_update_returning
from inventory.choices import GpuState
from inventory.models import Gpu, Pool

ACTOR = "system:scheduler"

# Queue explanations beyond the head of a pool's queue are rewritten at most once per interval
# (per pool, per worker process): a grant shifts every position behind it, so rewriting them all
# on every pass would cost O(queue) writes per pass. The head and every new lease's first
# explanation are always written at once. Every 10 s: at 2 s, the Kueue baseline (a pass a second
# a pool, 20 grants a pass) rewrote 765 explanations a pass where the head is 100: the tail had
# always moved by more than the slack, and a third of a pass's database time went to it.
EXPLAIN_HEAD = 100
EXPLAIN_TAIL_INTERVAL_S = 10.0
# Behind the head, a position or an estimated start that moved by less than 1% (of the position; of
# the time left to the start, and at least a minute) is not rewritten: place 30,000 against 29,996
# tells a user nothing, and a pass that grants a few leases would otherwise rewrite the whole queue
# (40,000 rows: most of a pass's time on a pool of 64,000 GPUs). Each comparison is against the
# stored value, so what a reader sees is never off by more than that.
TAIL_SLACK = 0.01
TAIL_SLACK_MIN_S = 60.0
_tail_written: dict[int, float] = {}  # pool id -> when its tail was last compared (_clock)
_clock = time.monotonic


@dataclass
class Step:
    """What one round of applying did, and what the next round needs to know without a re-read."""

    granted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    changes: list[LeaseChange] = field(default_factory=list)
    audit: list[AuditRow] = field(default_factory=list)
    to_bind: list[str] = field(default_factory=list)
    to_unbind: list[str] = field(default_factory=list)
    started: list[RunningView] = field(default_factory=list)  # views of the leases granted
    freed: set[str] = field(default_factory=set)  # victims whose GPUs were freed at once
    ending: set[str] = field(default_factory=set)  # victims keeping their GPUs until they stop


def apply_decisions(pool: Pool, read: PoolRead, decisions: Decisions, now: datetime) -> Step:
    """Write the grants and preemptions of one round (not the explanations, not the audit rows
    of the grants and preemption notices: the caller writes those once per pass)."""
    step = Step()
    _grant(pool, read, decisions.grants, now, step)
    _preempt(pool, decisions, now, step)
    return step


def _grant(pool: Pool, read: PoolRead, grants: list[Grant], now: datetime, step: Step) -> None:
    if not grants:
        return
    reasons = [f"granted {len(g.gpu_ids)} GPU(s) on {g.host}" + (" (borrowed capacity)" if g.borrowed else "")
               for g in grants]
    expires = [now + timedelta(seconds=read.pending[g.lease_id].ttl_seconds) for g in grants]
    claimed = bulk_update_columns(
        Lease, [g.lease_id for g in grants], ["reason", "expires_at", "borrowed", "host"],
        [reasons, expires, [g.borrowed for g in grants], [_main_host(g, read.gpu_host) for g in grants]],
        same={"state": LeaseState.GRANTED, "granted_at": now, "pending_code": "", "queue_position": None,
              "estimated_start": None},
        only_if={"state": LeaseState.PENDING})
    links: tuple[list[str], list[int]] = ([], [])
    meters: list[tuple[str, int, str, float]] = []
    for grant, reason, expires_at in zip(grants, reasons, expires, strict=True):
        if grant.lease_id not in claimed:  # cancelled since the snapshot: it gets nothing
            continue
        row = read.pending[grant.lease_id]
        step.audit.append(transition_row(grant.lease_id, LeaseState.PENDING, LeaseState.GRANTED, actor=ACTOR,
                                         reason=reason, now=now,
                                         extra={"gpus": list(grant.gpu_ids), "borrowed": grant.borrowed}))
        step.changes.append(LeaseChange(grant.lease_id, pool.pk, row.team_id, LeaseState.GRANTED))
        step.granted.append(grant.lease_id)
        step.started.append(RunningView(grant.lease_id, row.team, pool.name, tuple(sorted(grant.gpu_ids)),
                                        row.priority, row.preemptible, now.timestamp(), grant.borrowed,
                                        row.min_runtime_s, expires_at.timestamp(), False))
        links[0].extend([grant.lease_id] * len(grant.gpu_ids))
        links[1].extend(grant.gpu_ids)
        meters.append(_meter(grant, row.team_id, read.gpu_meter))
        if row.has_binding:
            step.to_bind.append(grant.lease_id)
    # The links, and the meter that starts with the grant (allocation.models.usage): one statement.
    lease_ids, teams, models, equivs = (list(c) for c in zip(*meters, strict=True)) if meters else ([], [], [], [])
    bulk_insert_together([
        (LeaseUsage, ["lease", "team", "pool", "model", "gpu_equiv", "started_at"],
         [lease_ids, teams, [pool.pk] * len(meters), models, equivs, [now] * len(meters)]),
        (LeaseGpu, ["lease", "gpu", "active"], [links[0], links[1], [True] * len(links[1])])])
    # Granted GPUs were schedulable (present, healthy, on a ready host): they are now leased.
    bulk_set(Gpu, links[1], leased=True, state=GpuState.LEASED)


def _main_host(grant: Grant, gpu_host: dict[int, int]) -> int:
    """The host holding most of the grant's GPUs (the first of them on a tie): where its
    workload starts, and the only one for a same-host lease."""
    hosts = [gpu_host[gpu_id] for gpu_id in grant.gpu_ids]
    return max(dict.fromkeys(hosts), key=hosts.count) if len(set(hosts)) > 1 else hosts[0]


def _meter(grant: Grant, team_id: int, gpu_meter: dict[int, tuple[str, float]]) -> tuple[str, int, str, float]:
    """(lease id, team id, model, GPU-equivalents) of a grant; a GPU the read did not weigh
    counts as a whole one."""
    kinds = [gpu_meter.get(gpu_id, ("", 1.0)) for gpu_id in grant.gpu_ids]
    return grant.lease_id, team_id, kinds[0][0], sum(weight for _, weight in kinds)


def _preempt(pool: Pool, decisions: Decisions, now: datetime, step: Step) -> None:
    if not decisions.preemptions:
        return
    victims = {str(v.pk): v for v in Lease.objects.select_for_update(of=("self",)).select_related(
        "priority_class", "team").filter(pk__in=[p.lease_id for p in decisions.preemptions])}
    chosen = []
    for pre in decisions.preemptions:
        victim = victims.pop(pre.lease_id, None)  # popped: a lease is preempted once
        if victim is None or not victim.is_holding:
            continue
        victim.preempted_by_id = pre.by_lease_id
        chosen.append((victim, pre))
    # A bound workload gets its notice and grace (the unbind task frees the GPUs after it);
    # a lease with nothing running on it is ended at once.
    leases_end([v for v, _ in chosen], LeaseState.PREEMPTED, actor=ACTOR, now=now, fields=("preempted_by",),
               reasons=[f"preempted for lease {p.by_lease_id}: {p.reason}" for _, p in chosen], announce=False)
    for victim, pre in chosen:
        (step.ending if victim.ending_since is not None else step.freed).add(pre.lease_id)
        step.audit.append(AuditRow(now, ACTOR, "lease.preempt", "lease", pre.lease_id, pre.lease_id, pre.reason,
                                   {"victim": pre.lease_id, "by": pre.by_lease_id, "victim_team": victim.team.name,
                                    "grace_s": victim.priority_class.grace_s, "cause": pre.kind}))
        step.changes.append(LeaseChange(pre.lease_id, pool.pk, victim.team_id, LeaseState.PREEMPTED))
        step.preempted.append(pre.lease_id)
        if stop_pending(victim):  # a workload, or a bind that may have started one
            step.to_unbind.append(pre.lease_id)
    if any(pre.kind == "fair_share" for _, pre in chosen):
        # The pool's minimum interval between fair-share preemptions counts from here, for
        # every worker's later passes.
        PoolScheduling.objects.update_or_create(pool=pool, defaults={"last_fair_share_preemption_at": now})


def after(read: PoolRead, step: Step) -> PoolRead:
    """The pool as the next round sees it, from what this round wrote (no re-read): granted
    leases run, victims freed at once are gone, the others are ending."""
    granted = set(step.granted)
    running = [replace(r, ending=True) if r.lease_id in step.ending else r
               for r in read.snapshot.running if r.lease_id not in step.freed]
    snapshot = replace(read.snapshot, running=(*running, *step.started),
                       pending=tuple(p for p in read.snapshot.pending if p.lease_id not in granted))
    return PoolRead(snapshot, {k: v for k, v in read.pending.items() if k not in granted}, read.gpu_host,
                    read.gpu_meter)


def _moved(row: PendingRow, code: str, reason: str, position: int, est: datetime | None, now: datetime) -> bool:
    """Whether a tail lease's explanation changed by more than the slack (TAIL_SLACK)."""
    if (row.pending_code, row.reason) != (code, reason) or (row.estimated_start is None) != (est is None):
        return True
    assert row.queue_position is not None  # a tail row has one
    if abs(position - row.queue_position) >= max(1.0, TAIL_SLACK * row.queue_position):
        return True
    if est is None or row.estimated_start is None:
        return False
    ahead = max((row.estimated_start - now).total_seconds(), 0.0)
    return abs((est - row.estimated_start).total_seconds()) >= max(TAIL_SLACK_MIN_S, TAIL_SLACK * ahead)


def estimate_head(pool_id: int) -> int | None:
    """Decided once, before the pass reads its pool: how many pending leases it estimates a start
    for (Snapshot.estimate_head). None (all of them) when the explanations behind the head are due
    (EXPLAIN_TAIL_INTERVAL_S), which write_explanations then writes; else twice the head, so that
    a lease pushed back out of the head (by leases of higher priority) is still written with its
    estimate."""
    due = _clock() - _tail_written.get(pool_id, -math.inf) >= EXPLAIN_TAIL_INTERVAL_S
    return None if due else 2 * EXPLAIN_HEAD


def write_explanations(pool: Pool, read: PoolRead, decisions: Decisions, now: datetime) -> set[str]:
    """Store each pending lease's code, reason, queue position and estimated start where they
    changed, in one UPDATE (only on leases still pending). Returns the ids of the leases written.

    Bounded cost: a lease's first explanation (none stored yet), and any change at the head of
    the queue (old or new position ≤ EXPLAIN_HEAD), are written at once; changes further back
    only when this pool's tail was last compared EXPLAIN_TAIL_INTERVAL_S ago or more (then all of
    them), and only those that moved by more than the slack (TAIL_SLACK). So a pass over a long
    queue that grants one lease writes about EXPLAIN_HEAD rows, not the whole queue; positions
    further back lag by at most the interval, or until the next pass, and are never off by more
    than the slack. Between tail writes the pass estimates starts for the head only
    (estimate_head): a newcomer far back is written with its place and no estimate, which the
    next tail write adds.
    Unchanged explanations are never rewritten."""
    head, tail = [], []
    # Whether changes behind the head are written this pass: decided before the read (estimate_head),
    # so a pass that will not write them neither estimates nor compares them (a queue of 40,000 is
    # 40,000 comparisons), and one whose interval ends while it runs never writes a tail it did not
    # estimate.
    tail_due = read.snapshot.estimate_head is None
    compared = False  # whether a lease behind the head was looked at
    for pend in decisions.pending:
        row = read.pending.get(pend.lease_id)
        if row is None:
            continue
        behind = row.queue_position is not None and min(row.queue_position, pend.queue_position) > EXPLAIN_HEAD
        if behind and not tail_due:
            continue
        compared = compared or behind
        est = datetime.fromtimestamp(pend.estimated_start, tz=now.tzinfo) if pend.estimated_start else None
        if (row.reason, row.queue_position, row.estimated_start, row.pending_code) == (
                pend.reason, pend.queue_position, est, pend.code):
            continue
        change = (pend.lease_id, pend.code, pend.reason, pend.queue_position, est)
        if not behind:
            head.append(change)
        elif _moved(row, pend.code, pend.reason, pend.queue_position, est, now):
            tail.append(change)
    if tail_due and compared:  # written, or nothing behind had moved: not due again for an interval
        _tail_written[pool.pk] = _clock()
    head += tail
    if not head:
        return set()
    keys, codes, reasons, positions, starts = (list(c) for c in zip(*head, strict=True))
    versions = bulk_update_returning(Lease, keys, ["pending_code", "reason", "queue_position", "estimated_start"],
                                     [codes, reasons, positions, starts], only_if={"state": LeaseState.PENDING},
                                     returning=version_sql("t"))
    written = {lease_id: (versions[lease_id], read.pending[lease_id]._replace(
        pending_code=code, reason=reason, queue_position=position, estimated_start=start))
        for lease_id, code, reason, position, start in head if lease_id in versions}
    remember_written(pool.pk, written)
    return set(versions)
