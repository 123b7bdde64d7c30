"""Many lease requests in one transaction (`POST leases/batch/`), each judged as the single create
judges it (allocation.services.leases): the same resolution, capacity and placement checks, budgets,
Idempotency-Key semantics (a key per item) and queue caps, but written set-based.

Cost for N items: one query of the items' earlier Idempotency-Keys, one judgement per distinct
request (requests that differ only in TTL, binding command or key are judged once), one lock per
(pool, team) queue the items fall in (taken in key order, so two batches never deadlock) and one
count of those queues, then three INSERTs whatever N (the leases, ON CONFLICT DO NOTHING; their
audit events; their outbox rows), and one pass request per pool after the commit.

Per item, the outcome is the single create's: created (201), replayed (200: an earlier lease of
this key and body, also an earlier item of this batch), or its error (the DomainError the single
create would raise). With `atomic`, any error rolls the whole batch back (nothing is written).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from allocation.choices import LeaseState
from allocation.models import AuditEvent, Lease
from allocation.outbox import announce, change_of
from allocation.policy.admission import queue_full
from allocation.selectors import with_gpus, with_names
from allocation.services.leases import _fingerprint, judge, lease_request, new_lease
from allocation.services.queue_caps import refused
from allocation.triggers import request_pass
from core.db import QUEUE_LOCKS, advisory_key
from core.db.bulk import bulk_insert_instances
from core.errors import Conflict, DomainError

MAX_ITEMS = 1_000


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch: the fields of the single create's body (validated) and its key."""

    fields: dict[str, Any]
    idempotency_key: str = ""


@dataclass
class ItemResult:
    """`lease` and `created` (True: new; False: a replay), or `error`."""

    lease: Lease | None = None
    created: bool = False
    error: DomainError | None = None


class _Aborted(Exception):
    """Raised inside the transaction to roll an atomic batch back."""


@dataclass
class _Pending:
    """An item on its way to being written."""

    index: int
    lease: Lease
    event: AuditEvent
    request: dict[str, Any]
    caps: Any


def lease_create_batch(*, user: Any, items: Sequence[BatchItem], atomic: bool = False) -> list[ItemResult]:
    """Create the leases of `items` in one transaction; one result per item, in order. With
    `atomic`, an error in any item writes nothing (the other items' results still say what they
    would have been: those would-be-created carry no lease)."""
    results: list[ItemResult] = []
    try:
        with transaction.atomic():
            results = _create(user, items)
            if atomic and any(r.error is not None for r in results):
                raise _Aborted
    except _Aborted:
        for r in results:
            if r.error is None and r.created:
                r.lease, r.created = None, False
    return results


def _create(user: Any, items: Sequence[BatchItem]) -> list[ItemResult]:
    results = [ItemResult() for _ in items]
    requests = [lease_request(**{"pool": i.fields["pool"], **_request_fields(i.fields)}) for i in items]
    prints = [_fingerprint(r) for r in requests]
    earlier = _earlier(user, [i.idempotency_key for i in items if i.idempotency_key])
    first_of_key: dict[str, int] = {}
    repeats: dict[int, int] = {}  # an item → the earlier item of this batch with its key and body
    judged: dict[str, Any] = {}
    pending: list[_Pending] = []
    for index, (item, request, print_) in enumerate(zip(items, requests, prints, strict=True)):
        key = item.idempotency_key
        if key and (key in earlier or key in first_of_key):
            # An earlier lease of this key (or an earlier item of this batch) answers, as the
            # single create's replay, even if the request would be refused today.
            if (earlier[key].request_fingerprint if key in earlier else prints[first_of_key[key]]) != print_:
                results[index].error = Conflict("this Idempotency-Key was used with a different request body",
                                                code="idempotency_key_reused")
            elif key in earlier:
                results[index].lease = earlier[key]
            else:
                repeats[index] = first_of_key[key]
            continue
        if key:
            first_of_key[key] = index
        try:
            resolved, demoted = _judge(judged, user, request)
        except DomainError as exc:
            results[index].error = exc
            continue
        lease, event, resolved = new_lease(user, resolved, demoted, request, print_, key)
        pending.append(_Pending(index, lease, event, request, resolved.queue_caps))
    _write(user, _admit(pending, results), results)
    for index, first in repeats.items():  # a replay of the item that came first, or its error
        results[index] = ItemResult(lease=results[first].lease, error=results[first].error)
    return results


def _request_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The single create's keyword arguments with its defaults (what LeaseCreateSerializer gives)."""
    defaults: dict[str, Any] = {"team": None, "priority_class": None, "model": "", "min_memory_mb": 0,
                                "min_driver_version": "", "min_cuda_version": "", "ttl_seconds": None,
                                "same_host": True, "requeue_on_loss": False, "binding": None, "selector": None,
                                "topology": None}
    return {name: fields.get(name, default) for name, default in defaults.items()} | {"gpus": fields["gpus"]}


def _judge(judged: dict[str, Any], user: Any, request: dict[str, Any]) -> Any:
    """`leases.judge`, once per distinct judgement: what it reads of a request is its pool, team,
    priority class, size, model, memory, host spreading, workload kind and selector."""
    key = json.dumps([request["pool"], request["team"], request["priority_class"], request["gpus"],
                      request["model"], request["min_memory_mb"], request["same_host"],
                      (request["binding"] or {}).get("kind", ""), request.get("selector")],
                     sort_keys=True, default=str)
    found = judged.get(key)
    if found is None:
        try:
            found = judged[key] = judge(user, request["pool"], request)
        except DomainError as exc:
            judged[key] = exc
            raise
    if isinstance(found, DomainError):
        raise found
    return found


def _earlier(user: Any, keys: list[str]) -> dict[str, Lease]:
    """The user's leases made with these Idempotency-Keys, by key (one query; none for no keys)."""
    if not keys:
        return {}
    found = with_gpus(with_names(Lease.objects.filter(user=user, idempotency_key__in=keys)))
    return {lease.idempotency_key: lease for lease in found}


def _admit(pending: list[_Pending], results: list[ItemResult]) -> list[_Pending]:
    """The items the queue caps let in, in order, as the single create's guard would admit them
    one after another: each (pool, team) queue with a cap is locked (its advisory lock, in key
    order) and counted once, then the items take their places."""
    capped = {(p.lease.pool_id, p.lease.team_id): p.caps for p in pending
              if p.caps.pending_leases_per_team is not None or p.caps.pending_gpus_per_team is not None}
    # Every queue written is locked here, in key order, capped or not: the lease trigger that
    # bumps a queue's bound (allocation.models.queues) takes the same lock for each row inserted,
    # in row order, where a bound is kept (a pool may have had caps once).
    queues = _lock_and_count(sorted({(p.lease.pool_id, p.lease.team_id) for p in pending}), sorted(capped))
    if not capped:
        return pending
    admitted = []
    for p in pending:
        queue = (p.lease.pool_id, p.lease.team_id)
        if queue not in capped:
            admitted.append(p)
            continue
        leases, gpus = queues.get(queue, (0, 0))
        if queue_full(p.caps, p.lease.gpu_count, leases, gpus) is not None:
            results[p.index].error = refused(caps=p.caps, team=p.lease.team.name, pool=p.request["pool"],
                                             gpus=p.lease.gpu_count, pending_leases=leases, pending_gpus=gpus)
            continue
        queues[queue] = (leases + 1, gpus + p.lease.gpu_count)
        admitted.append(p)
    return admitted


def _lock_and_count(locked: list[tuple[int, int]], queues: list[tuple[int, int]]
                    ) -> dict[tuple[int, int], tuple[int, int]]:
    """Lock the (pool, team) queues `locked`, then count the pending leases and GPUs of `queues`.
    Two statements: the count's snapshot is taken after the locks are held, so it sees every lease
    committed by the creators that held them before (queue_caps' rule)."""
    keys = sorted(advisory_key(QUEUE_LOCKS, pool, team) for pool, team in locked)
    table = Lease._meta.db_table
    with connection.cursor() as cur:
        cur.execute("SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT unnest(%s::bigint[]) AS k ORDER BY k) AS o",
                    [keys])
        if not queues:
            return {}
        cur.execute(f"SELECT pool_id, team_id, count(*), COALESCE(sum(gpu_count), 0) FROM {table} "
                    "WHERE state = %s AND (pool_id, team_id) IN (SELECT * FROM unnest(%s::int[], %s::int[])) "
                    "GROUP BY pool_id, team_id",
                    [LeaseState.PENDING.value, [q[0] for q in queues], [q[1] for q in queues]])
        return {(pool, team): (int(n), int(gpus)) for pool, team, n, gpus in cur.fetchall()}


def _write(user: Any, admitted: list[_Pending], results: list[ItemResult]) -> None:
    """INSERT the admitted leases (a concurrent request with one of their keys may have won: those
    are answered as the single create's replay), then the audit and outbox rows of those written;
    one pass request per pool once the transaction commits."""
    written = bulk_insert_instances([p.lease for p in admitted], ignore_conflicts=True)
    lost = [p for p in admitted if str(p.lease.pk) not in written]
    if lost:
        winners = _earlier(user, [p.lease.idempotency_key for p in lost])
        for p in lost:
            winner = winners.get(p.lease.idempotency_key)
            if winner is not None and winner.request_fingerprint == p.lease.request_fingerprint:
                results[p.index].lease = winner
            else:
                results[p.index].error = Conflict("this Idempotency-Key was used with a different request body",
                                                  code="idempotency_key_reused")
    done = [p for p in admitted if str(p.lease.pk) in written]
    for p in done:
        results[p.index].lease, results[p.index].created = p.lease, True
    if not done:
        return
    bulk_insert_instances([p.event for p in done])
    announce([change_of(p.lease) for p in done])
    pools = sorted({p.lease.pool_id for p in done})
    transaction.on_commit(lambda: [request_pass(pool) for pool in pools])
