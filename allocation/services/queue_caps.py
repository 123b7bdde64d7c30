"""A queue no team can flood: a new lease is written only while its team's queue in the pool is
under the pool's caps (`pools[].queue_caps`; the rule: allocation.policy.admission.queue_full).

Atomic across every web process, in the lease's own write: the team's queue lock in the pool (a
PostgreSQL advisory lock, `core.db.QUEUE_LOCKS`) is taken by a statement sent ahead of the
lease's INSERT in the same round trip and transaction (`core.db.statements.execute`), and the
INSERT counts the team's pending leases in the pool and inserts only when one more fits. Taken
before the INSERT starts, the lock makes the count see every lease committed by the creator
before (a lock taken inside the INSERT would not: its snapshot is older than the wait). Two
creators of one team in one pool queue on the lock for the length of one INSERT and commit;
other teams and pools never wait. Nothing else counts as a new lease: a lease requeued after a
host loss goes back to the queue whatever the cap (it was admitted once).

Cost on the create path: no round trip more (the lock rides with the INSERT), the lock, and a
look-up of the queue's bound (allocation.models.queues: never below the queue's size), which says
"under the caps" without counting; only when it does not is the queue counted (an index scan of
the team's pending leases in the pool, at most the cap), and the count becomes the bound.
`bench/bench_lease_create.py` measures it against a create without caps.
"""

from __future__ import annotations

from dataclasses import dataclass

from allocation.choices import LeaseState
from allocation.models import Lease, QueueBound
from allocation.policy import explain
from allocation.policy.admission import QueueCaps, queue_full
from allocation.policy.types import RequestView
from core.db import QUEUE_LOCKS, advisory_key
from core.db.statements import Statement
from core.errors import DomainError

# A cap of None, as the SQL compares it: more than any queue could hold.
_NO_CAP = 2**62


class QueueFull(DomainError):
    """429 `queue_full`: the team's queue in the pool is at a cap; `details` names it, its value
    and what the queue holds now."""

    status = 429
    code = "queue_full"


@dataclass(frozen=True)
class QueueGuard:
    """The statements that admit one new lease to a team's queue: `lock` goes ahead of the
    statement that writes the lease, whose first CTEs are `ctes`: among them `queue` (one row:
    `leases`, `gpus`, the team's pending leases in the pool and the GPUs they ask for, before this
    one, or a bound on them with room for it) and `queue_room` (one row while one more lease fits,
    none when not: insert from it)."""

    lock: Statement
    ctes: tuple[tuple[str, Statement], ...]
    room: str = "queue_room"


def queue_guard(*, pool_id: int, team_id: int, gpus: int, caps: QueueCaps) -> QueueGuard | None:
    """The guard of a new lease of `gpus` GPUs of team `team_id` in pool `pool_id`; None when the
    pool caps nothing (then nothing is counted or locked).

    Its CTEs: `queue_bound`, the queue's bound (allocation.models.queues) when one more lease
    fits under it; else `queue_count` counts the queue (the scan runs only without such a bound:
    a one-time filter) and `queue_counted` makes the count the bound. `queue` is whichever of the
    two answered; the lease trigger adds the new lease to the bound once it is inserted."""
    if caps.pending_leases_per_team is None and caps.pending_gpus_per_team is None:
        return None
    leases = caps.pending_leases_per_team if caps.pending_leases_per_team is not None else _NO_CAP
    most_gpus = caps.pending_gpus_per_team if caps.pending_gpus_per_team is not None else _NO_CAP
    bounds = QueueBound._meta.db_table
    bound = (f"SELECT leases::bigint AS leases, gpus FROM {bounds} WHERE pool_id = %s AND team_id = %s "
             "AND leases + 1 <= %s AND gpus + %s <= %s", [pool_id, team_id, leases, gpus, most_gpus])
    # The state is written out, not a parameter: the statement is prepared, and a generic plan
    # can use the partial index of pending leases (lease_pending_queue) only when its predicate
    # is in the text (with a parameter, a create read 1.7x the pages through (pool, state)).
    count = (f"SELECT count(*) AS leases, COALESCE(sum(gpu_count), 0) AS gpus FROM {Lease._meta.db_table} "
             f"WHERE pool_id = %s AND team_id = %s AND state = '{LeaseState.PENDING.value}' "
             "HAVING NOT EXISTS (SELECT 1 FROM queue_bound)", [pool_id, team_id])
    counted = (f"INSERT INTO {bounds} (pool_id, team_id, leases, gpus) SELECT %s, %s, leases, gpus FROM queue_count "
               "ON CONFLICT (pool_id, team_id) DO UPDATE SET leases = EXCLUDED.leases, gpus = EXCLUDED.gpus",
               [pool_id, team_id])
    queue: Statement = ("SELECT leases, gpus FROM queue_bound UNION ALL SELECT leases, gpus FROM queue_count", [])
    # The SQL twin of admission.queue_full: one more lease, and its GPUs, within the caps.
    room = ("SELECT 1 FROM queue WHERE leases + 1 <= %s AND gpus + %s <= %s", [leases, gpus, most_gpus])
    return QueueGuard(("SELECT pg_advisory_xact_lock(%s)", [advisory_key(QUEUE_LOCKS, pool_id, team_id)]),
                      (("queue_bound", bound), ("queue_count", count), ("queue_counted", counted),
                       ("queue", queue), ("queue_room", room)))


def refused(*, caps: QueueCaps, team: str, pool: str, gpus: int, pending_leases: int,
            pending_gpus: int) -> QueueFull | None:
    """The error for a lease the guard kept out, from the queue it counted; None when the queue
    had room (the lease was kept out by something else: an Idempotency-Key's earlier lease)."""
    cap = queue_full(caps, gpus, pending_leases, pending_gpus)
    if cap is None:
        return None
    limit: int = getattr(caps, cap)
    pending = pending_leases if cap == "pending_leases_per_team" else pending_gpus
    return QueueFull(explain.queue_full(RequestView("", team, pool, gpus), cap, limit, pending), details={
        "cap": cap, "limit": limit, "team": team, "pool": pool,
        "pending_leases": pending_leases, "pending_gpus": pending_gpus, "gpus": gpus})
