"""The lease state machine: every transition of a lease goes through this module.

    pending → granted → bound → released | expired | preempted | failed | lost
    pending → released (cancelled) | failed (refused)        lost → pending (requeue_on_loss)

A lease that ends while its workload still runs keeps its GPUs (LeaseGpu.active) until the
workload is confirmed stopped (`lease_free_gpus`), so a GPU is never handed out while a preempted
process is still in its grace period. Each transition writes an AuditEvent with actor and reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from allocation.audit import AuditRow, audit, bulk_audit
from allocation.choices import END_STATES, LeaseState
from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.outbox import announce as announce_changes
from allocation.outbox import announce_lease, change_of, outbox_cte, publish_after_commit
from allocation.policy.codes import PendingCode
from core.db.bulk import bulk_update_fast
from core.db.statements import Statement, execute_as_one, insert_sql, update_sql
from core.errors import Conflict
from inventory.models import Gpu, Host
from inventory.services import gpu_state_sql

TRANSITIONS: dict[str, frozenset[str]] = {
    LeaseState.PENDING: frozenset({LeaseState.GRANTED, LeaseState.RELEASED, LeaseState.FAILED}),
    LeaseState.GRANTED: frozenset({LeaseState.BOUND, *END_STATES}),
    LeaseState.BOUND: frozenset(END_STATES),
    LeaseState.LOST: frozenset({LeaseState.PENDING}),
    LeaseState.RELEASED: frozenset(),
    LeaseState.EXPIRED: frozenset(),
    LeaseState.PREEMPTED: frozenset(),
    LeaseState.FAILED: frozenset(),
}


class IllegalTransition(Conflict):
    code = "illegal_transition"


def check_transition(current: str, target: str) -> None:
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(f"a {current} lease cannot become {target}")


def _transition_data(previous: str, target: str, extra: dict[str, Any] | None) -> dict[str, Any]:
    return {"from": previous, "to": target, **(extra or {})}


def transition(lease: Lease, target: str, *, actor: str, reason: str = "",
               now: datetime | None = None, extra: dict[str, Any] | None = None,
               announce: bool = True) -> AuditEvent:
    """Move one in-memory lease to `target` (caller saves it, in the transaction this runs in);
    returns the unsaved audit event. Its event is written to the outbox now, in that transaction,
    and watchers hear of it once it commits; a caller moving many leases at once passes
    `announce=False` and announces them in one batch (`outbox.announce`).

    Raises IllegalTransition for a move the state machine does not allow.
    """
    check_transition(lease.state, target)
    now = now or timezone.now()
    previous = lease.state
    lease.state = target
    lease.reason = reason
    # A pending lease carries why it waits as a code too; a pass writes its own after this one.
    lease.pending_code = PendingCode.NEXT_PASS if target == LeaseState.PENDING else ""
    if target in END_STATES:
        lease.ended_at = lease.end_time(now)
        lease.queue_position = None
        lease.estimated_start = None
    if target == LeaseState.PENDING:
        lease.granted_at = lease.expires_at = lease.ended_at = None
        lease.host = None
        lease.ending_since = None
    if announce:
        announce_lease(lease)
    return audit(actor=actor, action=f"lease.{target}", obj=lease, lease=lease, at=now,
                 message=reason, data=_transition_data(previous, target, extra))


def transition_row(lease_id: str, current: str, target: str, *, actor: str, reason: str,
                   now: datetime, extra: dict[str, Any] | None = None) -> AuditRow:
    """The audit event `transition` writes, for a lease known only by id and state: the caller
    writes the lease row itself (set-based) and announces the change.

    Raises IllegalTransition for a move the state machine does not allow."""
    check_transition(current, target)
    return AuditRow(now, actor, f"lease.{target}", "lease", lease_id, lease_id, reason,
                    _transition_data(current, target, extra))


def stop_pending(lease: Lease) -> bool:
    """After an end: whether the unbind task must stop a workload before the GPUs come back."""
    return lease.ending_since is not None and lease.has_workload


def _end(lease: Lease, target: str, *, actor: str, reason: str, now: datetime,
         keep_gpus: bool | None, workload_gone: bool = False) -> tuple[AuditEvent, bool]:
    """`lease_end` in memory: returns the audit event and whether the lease keeps its GPUs (the
    caller writes the lease's event with its own statements)."""
    has_workload = lease.has_workload and not workload_gone
    event = transition(lease, target, actor=actor, reason=reason, now=now, announce=False)
    hold = has_workload if keep_gpus is None else keep_gpus or has_workload
    if hold:
        lease.ending_since = now
        if has_workload:
            lease.binding_status = {**lease.binding_status, "state": "stopping"}
    return event, hold


def lease_end(lease: Lease, target: str, *, actor: str, reason: str,
              now: datetime | None = None, keep_gpus: bool | None = None,
              announce: bool = True, workload_gone: bool = False) -> None:
    """End a holding (or pending) lease, in the caller's transaction.

    GPUs are freed at once unless a workload is bound or being bound (then the unbind task frees
    them once it has stopped it, however many attempts that takes: allocation.workloads.stopping) or
    `keep_gpus` is forced (a preemption notice on an unbound lease:
    the reaper frees them after the grace period). `announce=False`: the caller announces it.
    Everything it writes (the lease's END_FIELDS, its audit event, its outbox event, the fair-share
    ledger, the GPU-hour meter, the freed links and GPUs) is one statement; a caller that changed
    another field of the lease saves it itself. A `now` before the lease's grant
    counts as the grant's time (`Lease.end_time`). `workload_gone`: its workload is known to have ended
    (observed): nothing to stop, the GPUs are freed with the end."""
    now = lease.end_time(now or timezone.now())
    event, hold = _end(lease, target, actor=actor, reason=reason, now=now, keep_gpus=keep_gpus,
                       workload_gone=workload_gone)
    from allocation.economy.metering import meter_close_sql
    from allocation.ledger import ledger_close_sql, ledger_stripe

    if not hold:
        lease.ending_since = None  # what lease_free_gpus writes, here with the row itself
    # What an end changes (END_FIELDS), as leases_end writes it: the other columns are as the
    # caller's locked read found them. Each written column is a parameter psycopg2 adapts while
    # holding the GIL; the whole row was 36 of them, JSON documents among them (py-spy --gil: the
    # statement's execute was 40% of a release's end in a Kueue run).
    ctes = [("ended_lease", update_sql(lease, END_FIELDS)), ("end_event", insert_sql(event))]
    if announce:
        ctes.append(outbox_cte(change_of(lease)))
    if lease.granted_at is not None:
        ctes.append(("ledger", ledger_close_sql(team_id=lease.team_id, gpus=lease.gpu_count,
                                                granted_at=lease.granted_at, ended_at=now,
                                                stripe=ledger_stripe(lease.pk))))
        ctes.append(("meter", meter_close_sql(lease.pk, now)))
    if not hold:
        ctes += _free_gpus_ctes([lease.pk], clear_ending=False)
    execute_as_one(ctes, generic=True)  # one plan a session (its generic plan: test_release_plan)
    if announce:
        publish_after_commit()


# What ending a lease writes on its row (`transition` to an end state, then `_end`).
END_FIELDS = ("state", "reason", "pending_code", "ended_at", "queue_position", "estimated_start", "ending_since",
              "binding_status")


def leases_end(leases: Sequence[Lease], target: str, *, actor: str, reasons: Sequence[str],
               now: datetime, fields: Sequence[str] = (), announce: bool = True) -> int:
    """`lease_end` for many leases (instances, locked by the caller) in a constant number of
    statements: one UPDATE of the lease rows (END_FIELDS plus the caller's own `fields`), one
    INSERT of the audit events, the ledger, one UPDATE closing their meters, one release of
    every GPU no workload holds, and (`announce`) one INSERT of their outbox events. Returns how
    many leases kept their GPUs (a workload still running). Nothing for none."""
    if not leases:
        return 0
    events, free, kept = [], [], 0
    for lease, reason in zip(leases, reasons, strict=True):
        event, hold = _end(lease, target, actor=actor, reason=reason, now=now, keep_gpus=None)
        events.append(event)
        kept += hold
        if not hold:
            free.append(lease.pk)
    from allocation.economy.metering import meter_close
    from allocation.ledger import ledger_close_many

    # Each closed at its own end (`Lease.end_time`: never before its grant); the meter clamps the
    # shared `now` to each row's start (its grant) itself.
    ran = [(lease, granted) for lease in leases if (granted := lease.granted_at) is not None]
    ledger_close_many([(lease.team_id, lease.gpu_count, granted, lease.end_time(now)) for lease, granted in ran],
                      leases=[(lease.team_id, lease.pk) for lease, _ in ran])
    meter_close([lease.pk for lease, _ in ran], now)
    bulk_update_fast(Lease, leases, [*END_FIELDS, *fields])
    bulk_audit(events)
    if free:
        lease_free_gpus(free)
    if announce:
        announce_changes([change_of(lease) for lease in leases])
    return kept


def _free_gpus_ctes(lease_ids: Sequence[Any], *, clear_ending: bool = True) -> list[tuple[str, Statement]]:
    """lease_free_gpus as CTEs: links deactivated, GPUs unleased with their state derived again
    (the rule of inventory.services.gpu_state_sql), `ending_since` cleared. The
    CTE `freed_links` returns the GPU ids."""
    ids = [Lease._meta.pk.get_db_prep_value(pk, connection) for pk in lease_ids]
    links, gpus, hosts = LeaseGpu._meta.db_table, Gpu._meta.db_table, Host._meta.db_table
    # Lock order, as every writer keeps it: lease (the caller's), host, GPU. `host_locks`
    # share-locks the hosts first, so freeing waits for a cordon in flight instead of deadlocking
    # with it; and the freed GPUs' state comes from the locked host rows, which are the committed
    # versions, not from this statement's snapshot (a cordon committing meanwhile would read as
    # ready: `free`). Its count is a one-time filter of `locked_gpus`: a count reads, and so locks,
    # every host row before any GPU row is locked (an EXISTS stopped at the first host: a lease on
    # two hosts then locked its GPUs while waiting for the second host's cordon, a deadlock).
    # Every row is found by key, `= ANY(ARRAY(...))`: a plan that cannot turn into a scan of the
    # whole GPU table whatever the statistics say (on tables never analysed, a join estimated
    # 300 links a lease and a release read every GPU of the fleet twice).
    gpu_state = gpu_state_sql(gpu="g", host_state="(SELECT hl.state FROM host_locks AS hl WHERE hl.id = g.host_id)",
                              leased="false")
    lease_gpus = f"SELECT lg.gpu_id FROM {links} AS lg WHERE lg.active AND lg.lease_id = ANY(%s)"
    ctes: list[tuple[str, Statement]] = [
        ("freed_links", (f"UPDATE {links} SET active = false WHERE active AND lease_id = ANY(%s) RETURNING gpu_id",
                         [ids])),
        ("host_locks", (f"SELECT h.id, h.state FROM {hosts} AS h WHERE h.id = ANY(ARRAY("
                        f"SELECT g.host_id FROM {gpus} AS g WHERE g.id = ANY(ARRAY({lease_gpus})))) "
                        "ORDER BY h.id FOR SHARE", [ids])),
        # GPU rows locked in id order, as every multi-row GPU writer does (core.db.bulk.bulk_set).
        ("locked_gpus", (f"SELECT id FROM {gpus} WHERE id = ANY(ARRAY(SELECT gpu_id FROM freed_links)) "
                         "AND (SELECT count(*) FROM host_locks) > 0 ORDER BY id FOR UPDATE", [])),
        ("freed_gpus", (f"UPDATE {gpus} AS g SET leased = false, state = {gpu_state} "
                        "WHERE g.id = ANY(ARRAY(SELECT id FROM locked_gpus))", [])),
    ]
    if clear_ending:
        ctes.append(("cleared", (f"UPDATE {Lease._meta.db_table} SET ending_since = NULL WHERE id = ANY(%s)",
                                 [ids])))
    return ctes


def lease_free_gpus(lease_ids: Sequence[Any]) -> int:
    """Deactivate the GPU links of ended leases and mark their GPUs free again (one statement);
    returns how many links were freed."""
    return int(execute_as_one(_free_gpus_ctes(lease_ids), ("SELECT count(*) FROM freed_links", []))[0][0])
