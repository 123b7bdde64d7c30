"""Idle reclaim, acting: warn granted leases whose GPUs sat idle, clear the warning when their
utilisation rises, reclaim them (`preempted`, cause `idle`) once the warning has stood its time.
The rule itself is `allocation.policy.idle` (pure); this module reads what it needs in bulk and
writes what it decided.

Cost of one check, whatever the number of leases: one read of the rules, one locking read of the
candidate leases, one of their GPUs, one of the GPUs' samples in the longest window a rule needs,
then at most one UPDATE for the warnings, one for the cleared ones, `leases_end` (constant
statements) for the reclaimed ones, and one INSERT of every audit event.

Safe to run twice and on several workers: the candidate leases are locked FOR UPDATE SKIP LOCKED
in one transaction, so a second check (or a user releasing or renewing one of them) never waits
for the first and never acts on a lease the first is acting on; a lease warned already is not
warned again, and one ended already is no longer a candidate.

Exemption: an admin renews a lease with `keep=true` (`lease_renew`); it sets `idle_exempt`, which
takes the lease out of idle reclaim for good (and clears a standing warning). Telemetry: samples
are those `inventory.sync` keeps (`SAMPLE_INTERVAL_S` apart, `TELEMETRY_HISTORY` of them): a
`for_s` longer than that history never reclaims, since the window is never covered.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from allocation.audit import AuditRow, audit_rows_insert
from allocation.choices import HOLDING_STATES, LeaseState
from allocation.lease_states import leases_end, stop_pending
from allocation.models import Lease, LeaseGpu, PoolScheduling, PriorityClass
from allocation.notify.record import facts_record, idle_warning_fact
from allocation.policy.idle import (
    GpuTelemetry,
    IdleReclaim,
    IdleState,
    Verdict,
    evaluate,
    reclaim_text,
    rule_for,
    warning_text,
)
from allocation.triggers import request_pass, request_unbind
from core.db import db_now
from core.db.bulk import bulk_update_columns
from inventory.models import GpuSample

ACTOR = "system:idle"
_CANDIDATE_FIELDS = ("pk", "pool_id", "team_id", "priority_class_id", "gpu_count", "granted_at", "warned_at",
                     "idle_exempt")


def max_gap_s() -> float:
    """Samples further apart than this are a gap (allocation.policy.idle): one missed sample is
    tolerated, two are not."""
    return 2.5 * settings.GPUPOOL["SAMPLE_INTERVAL_S"]


def _when(t: float | None) -> str:
    return f"{datetime.fromtimestamp(t, UTC):%Y-%m-%d %H:%M:%S} UTC" if t is not None else "?"


@dataclass
class _Plan:
    """What one check decided: (lease row, rule, state) per action."""

    warn: list[tuple[dict[str, Any], IdleReclaim, IdleState]] = field(default_factory=list)
    clear: list[dict[str, Any]] = field(default_factory=list)
    reclaim: list[tuple[dict[str, Any], IdleReclaim, IdleState]] = field(default_factory=list)


def idle_rules() -> tuple[dict[int, IdleReclaim], dict[int, IdleReclaim]]:
    """(pool id → rule, priority class id → rule), for those that have one."""
    pools = {row.pool_id: row.idle_reclaim for row in PoolScheduling.objects.filter(idle_for_s__isnull=False)}
    classes = {pc.pk: pc.idle_reclaim for pc in PriorityClass.objects.filter(idle_for_s__isnull=False)}
    return ({k: v for k, v in pools.items() if v is not None}, {k: v for k, v in classes.items() if v is not None})


def _telemetry(rows: list[dict[str, Any]], since: datetime) -> dict[Any, list[GpuTelemetry]]:
    """Lease id → its GPUs' telemetry (samples at or after `since`): two queries."""
    links = list(LeaseGpu.objects.filter(lease_id__in=[r["pk"] for r in rows], active=True)
                 .values_list("lease_id", "gpu_id", "gpu__foreign"))
    samples: dict[int, list[tuple[float, float | None]]] = defaultdict(list)
    for gpu_id, at, util in (GpuSample.objects.filter(gpu_id__in={g for _, g, _ in links}, at__gte=since)
                             .order_by().values_list("gpu_id", "at", "utilization_pct")):
        samples[gpu_id].append((at.timestamp(), util))
    out: dict[Any, list[GpuTelemetry]] = defaultdict(list)
    for lease_id, gpu_id, foreign in links:
        out[lease_id].append(GpuTelemetry(samples.get(gpu_id, ()), foreign))
    return out


def _plan(rows: list[dict[str, Any]], rules: tuple[dict[int, IdleReclaim], dict[int, IdleReclaim]],
          now: datetime) -> _Plan:
    plan = _Plan()
    judged = []
    for row in rows:
        rule = None if row["idle_exempt"] else rule_for(rules[1].get(row["priority_class_id"]),
                                                       rules[0].get(row["pool_id"]))
        if rule is None:
            if row["warned_at"] is not None:
                plan.clear.append(row)  # exempted, or the rule was removed, since the warning
            continue
        judged.append((row, rule))
    if not judged:
        return plan
    gap = max_gap_s()
    since = min(max(row["granted_at"], now - timedelta(seconds=rule.for_s + gap)) for row, rule in judged)
    telemetry = _telemetry([row for row, _ in judged], since)
    for row, rule in judged:
        warned = row["warned_at"].timestamp() if row["warned_at"] else None
        state = evaluate(telemetry.get(row["pk"], []), rule, now=now.timestamp(),
                         granted_at=row["granted_at"].timestamp(), warned_at=warned, max_gap_s=gap)
        if state.verdict == Verdict.RECLAIM:
            plan.reclaim.append((row, rule, state))
        elif state.verdict == Verdict.WARN:
            if warned is None:
                plan.warn.append((row, rule, state))
        elif warned is not None:
            plan.clear.append(row)
    return plan


def leases_idle_check(*, now: datetime | None = None) -> dict[str, int]:
    """Evaluate every granted or bound lease under an idle reclaim rule (not ending, not exempt)
    and act: warn, clear, reclaim. Returns the counts {"warned", "cleared", "reclaimed"}. `now`
    defaults to the database's clock (core.db.db_now): warnings and samples from other workers
    were stamped by it, and a skewed worker must not reclaim before `warn_s` has passed."""
    now = now or db_now()
    counts = {"warned": 0, "cleared": 0, "reclaimed": 0}
    rules = idle_rules()
    with transaction.atomic():
        wanted = Q(pool_id__in=list(rules[0])) | Q(priority_class_id__in=list(rules[1])) | Q(warned_at__isnull=False)
        rows = list(Lease.objects.select_for_update(skip_locked=True, of=("self",))
                    .filter(wanted, state__in=HOLDING_STATES, ending_since__isnull=True, granted_at__isnull=False)
                    .order_by().values(*_CANDIDATE_FIELDS))
        if not rows:
            return counts
        plan = _plan(rows, rules, now)
        audit: list[AuditRow] = []
        counts["warned"] = _warn(plan.warn, now, audit)
        counts["cleared"] = _clear(plan.clear, now, audit)
        counts["reclaimed"] = _reclaim(plan.reclaim, now, audit)
        audit_rows_insert(audit)
    return counts


def _warn(items: list[tuple[dict[str, Any], IdleReclaim, IdleState]], now: datetime, audit: list[AuditRow]) -> int:
    texts = [warning_text(rule, row["gpu_count"], since=_when(state.idle_since), reclaim_at=_when(state.reclaim_at))
             for row, rule, state in items]
    written = bulk_update_columns(Lease, [row["pk"] for row, _, _ in items], ["warning", "reason"], [texts, texts],
                                  same={"warned_at": now})
    facts = []
    for (row, rule, state), text in zip(items, texts, strict=True):
        lease_id = str(row["pk"])
        if lease_id in written:
            data = {"idle_since": _when(state.idle_since), "reclaim_at": _when(state.reclaim_at),
                    "below_util_pct": rule.below_util_pct, "for_s": rule.for_s, "warn_s": rule.warn_s}
            audit.append(AuditRow(now, ACTOR, "lease.idle_warning", "lease", lease_id, lease_id, text, data))
            facts.append(idle_warning_fact(lease_id=row["pk"], team_id=row["team_id"], pool_id=row["pool_id"],
                                           message=text, data=data, now=now))
    facts_record(facts)
    return len(written)


def _clear(rows: list[dict[str, Any]], now: datetime, audit: list[AuditRow]) -> int:
    reasons = ["idle warning cleared: " + ("exempt from idle reclaim" if row["idle_exempt"]
                                           else "GPU utilisation rose, or idleness can no longer be told")
               for row in rows]
    written = bulk_update_columns(Lease, [row["pk"] for row in rows], ["reason"], [reasons],
                                  same={"warning": "", "warned_at": None})
    for row, reason in zip(rows, reasons, strict=True):
        lease_id = str(row["pk"])
        if lease_id in written:
            audit.append(AuditRow(now, ACTOR, "lease.idle_warning_cleared", "lease", lease_id, lease_id, reason, {}))
    return len(written)


def _reclaim(items: list[tuple[dict[str, Any], IdleReclaim, IdleState]], now: datetime,
             audit: list[AuditRow]) -> int:
    """End the leases as preempted (cause idle): through the state machine, a bound workload with
    its class's grace (the unbind task frees the GPUs after it), an unbound lease at once."""
    if not items:
        return 0
    leases = {lease.pk: lease for lease in Lease.objects.filter(pk__in=[row["pk"] for row, _, _ in items])
              .select_related("priority_class")}
    chosen = [(leases[row["pk"]], rule, state) for row, rule, state in items if row["pk"] in leases]
    for lease, _, _ in chosen:
        lease.warning = ""
    reasons = [reclaim_text(rule, lease.gpu_count, since=_when(state.idle_since)) for lease, rule, state in chosen]
    leases_end([lease for lease, _, _ in chosen], LeaseState.PREEMPTED, actor=ACTOR, reasons=reasons, now=now,
               fields=("warning",))
    for (lease, _, _), reason in zip(chosen, reasons, strict=True):
        lease_id = str(lease.pk)
        audit.append(AuditRow(now, ACTOR, "lease.preempt", "lease", lease_id, lease_id, reason,
                              {"victim": lease_id, "by": None, "grace_s": lease.priority_class.grace_s,
                               "cause": "idle"}))
        if stop_pending(lease):
            transaction.on_commit(partial(request_unbind, lease.pk))
    for pool_id in {lease.pool_id for lease, _, _ in chosen}:
        transaction.on_commit(partial(request_pass, pool_id))
    return len(chosen)
