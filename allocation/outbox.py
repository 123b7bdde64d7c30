"""The outbox of lease events: how each committed transition reaches the stream (`allocation.events`).

A transactional outbox: each transition writes its event as a `LeaseOutbox` row in the very
transaction that commits it (`announce`, or `outbox_cte` inside a one-statement write), so an event
exists exactly when its change does. After the commit the writer publishes at once (the latency of
a plain publish; `relay_after_write` never waits for another writer's relay); the periodic relay
(`allocation.relay_lease_events`, every second) publishes whatever a crash, a Redis outage or a
failed publish left behind. `relay` publishes the unpublished rows in id order, one relay at a
time (an advisory lock), and records the stream id each got.
Publishing is idempotent in Redis itself: one script adds the entry and remembers "outbox row →
stream id" (`PUBLISHED`), so a relay that dies between the stream write and the record of it gets
the same id back on its retry instead of adding a second entry. Each row is published once, under
one stream id, whatever crashes.

Stream ids are given by Redis when a row is published (not derived from the row's id): a row whose
transaction commits late (a smaller id, committed after a larger one was published) must still be
published, and after everything already published, or a watcher that resumed past it would never
see it. A stream id is therefore a resume point like a Kubernetes resourceVersion: every event
published after it has a greater id. One lease's events are in the order of its transitions (each
transition holds the lease's row, so the next one's outbox row is written, with a greater id, after
the previous one committed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from allocation.events import PUBLISHED, STREAM, STREAM_MAXLEN, LeaseChange, redis_client
from allocation.models import LeaseOutbox
from allocation.notify.cursor import position_sql
from allocation.notify.trigger import delivery_after_commit
from core.db import EVENT_LOCKS
from core.db.bulk import Insert, bulk_insert_columns, bulk_update_columns
from core.db.statements import Statement, insert_sql

logger = logging.getLogger(__name__)

RELAY_BATCH = 1_000  # rows per relay transaction (one script call, one UPDATE)
WRITER_ROUNDS = 4  # relay rounds a writer runs after its commit before leaving the rest to the periodic relay
RETENTION = timedelta(days=1)  # published rows kept this long (for inspection), then pruned
QUIET_S = 1.0  # after a failed publish, writers leave publishing to the periodic relay this long
_RELAY_LOCK = EVENT_LOCKS << 48
_OUTBOX_FIELDS = ("lease_id", "pool_id", "team_id", "state", "created_at")
_script: Any = None
_quiet_until = 0.0
_thread: Any = None  # allocation.outbox_thread.RelayThread, where relay_in_background() was called

# Adds each (outbox id, lease, pool, team, state) to the stream unless that outbox id was published
# already, and returns every row's stream id: atomic in Redis, so an entry is never added without
# its record, and a retry finds the record.
_PUBLISH_LUA = """
local out = {}
for i = 2, #ARGV, 5 do
  local sid = redis.call('HGET', KEYS[2], ARGV[i])
  if not sid then
    sid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'lease', ARGV[i + 1],
                     'pool', ARGV[i + 2], 'team', ARGV[i + 3], 'state', ARGV[i + 4], 'event', ARGV[i])
    redis.call('HSET', KEYS[2], ARGV[i], sid)
  end
  out[#out + 1] = sid
end
return out
"""


# --- writing: in the transaction of the change ----------------------------------------------------

def change_of(lease: Any) -> LeaseChange:
    """The change of one in-memory lease, with the state it is being saved in."""
    return LeaseChange(str(lease.pk), lease.pool_id, lease.team_id, str(lease.state))


def announce(changes: Iterable[LeaseChange]) -> None:
    """Record `changes` in the outbox in the current transaction (one INSERT, none for none), and
    publish them once it commits. Call it inside the transaction that writes the changes."""
    batch = list(changes)
    if not batch:
        return
    bulk_insert_columns(*outbox_insert(batch))
    publish_after_commit()


def outbox_insert(changes: Sequence[LeaseChange]) -> Insert:
    """The INSERT of `announce`, to run with others (core.db.bulk.bulk_insert_together); the
    caller calls `publish_after_commit` when there are changes."""
    now = timezone.now()
    return (LeaseOutbox, _OUTBOX_FIELDS,
            [[c.lease_id for c in changes], [c.pool_id for c in changes], [c.team_id for c in changes],
             [c.state for c in changes], [now] * len(changes)])


def announce_lease(lease: Any) -> None:
    """`announce` for one in-memory lease, with the state it is being saved in."""
    announce([change_of(lease)])


def outbox_cte(change: LeaseChange, *, source: str | None = None) -> tuple[str, Statement]:
    """The outbox row of `change` as a CTE (`lease_event`) of a one-statement write
    (core.db.statements.execute_as_one); with `source`, one row per row of that CTE (none when it
    is empty). The caller calls `publish_after_commit`."""
    row = LeaseOutbox(lease_id=change.lease_id, pool_id=change.pool_id, team_id=change.team_id,
                      state=change.state)
    return "lease_event", insert_sql(row, source=source)


def publish_after_commit() -> None:
    """Publish the outbox once the current transaction commits (once, however many changes it
    records). Nothing is lost if that fails or never happens: the periodic relay publishes it."""
    pending = getattr(connection, "run_on_commit", [])
    if not any(entry[1] is _publish_now for entry in pending):
        transaction.on_commit(_publish_now)
        delivery_after_commit()  # notifications read the same rows (allocation.notify)


def _publish_now() -> None:
    """After a commit: wake the process's relay thread where the web server started one
    (allocation.outbox_thread), else publish here."""
    if _thread is not None:
        _thread.wake()
    else:
        _publish_inline()


def relay_in_background() -> None:
    """From now on this process's writers leave publishing to one relay thread (the web server)."""
    global _thread
    from allocation.outbox_thread import RelayThread

    if _thread is None:
        _thread = RelayThread(_publish_inline)


def stop_relay(timeout: float = 5.0) -> None:
    """End this process's relay thread, if any, after its current round (writers publish inline
    again)."""
    global _thread
    thread, _thread = _thread, None
    if thread is not None:
        thread.stop(timeout)


def _publish_inline() -> None:
    global _quiet_until
    if time.monotonic() < _quiet_until:  # Redis just failed: no 2 s timeout on every request
        return
    import redis

    try:
        relay_after_write()
    except redis.RedisError:
        _quiet_until = time.monotonic() + QUIET_S
        logger.warning("could not publish lease events; the relay will, once Redis answers", exc_info=True)
    except Exception:  # the database failed us: the periodic relay will
        logger.warning("could not publish lease events now; the relay will", exc_info=True)


# --- the relay: outbox → stream, in order, each row once -------------------------------------------

def relay(*, limit: int = RELAY_BATCH) -> int:
    """Publish every unpublished outbox row, oldest first, recording each one's stream id;
    returns how many. One relay runs at a time (an advisory lock): when another holds it, this
    one returns 0 at once and the other publishes what is there. Raises what Redis or the
    database raise: nothing is marked published then, and the next relay publishes it (under
    the same stream id if this one had already added it)."""
    total = 0
    while True:
        published = _relay_batch(limit=limit)
        if published is None:
            return total
        total += published
        if published < limit:
            return total


def relay_after_write(*, limit: int = RELAY_BATCH, rounds: int = WRITER_ROUNDS) -> int:
    """A writer's relay after its commit: never waits for another relay (writers used to queue
    on the lock, ~3 ms each, which serialised concurrent lease writes). Nothing is left behind:
    a writer that finds the lock taken leaves its rows to the holder, and every holder, once it
    has committed and released the lock, looks again for unpublished rows (a lock-free EXISTS on
    the partial index) and goes round while there are any. A row whose writer found the lock
    taken committed before the holder's commit, so the holder's look after it sees the row.
    After `rounds` rounds of others' rows (a write storm) the periodic relay takes over."""
    total = 0
    for _ in range(rounds):
        published = _relay_batch(limit=limit)
        if published is None:  # the holder publishes ours: it looks again after its commit
            return total
        total += published
        if published < limit and not _unpublished_left():
            return total
    return total


def _unpublished_left() -> bool:
    table = connection.ops.quote_name(LeaseOutbox._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE stream_id IS NULL)")
        return bool(cur.fetchone()[0])


def _relay_batch(*, limit: int) -> int | None:
    """One transaction of the relay: None when another relay holds the lock."""
    table = connection.ops.quote_name(LeaseOutbox._meta.db_table)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_RELAY_LOCK])
        if not cur.fetchone()[0]:
            return None
        # A statement of its own, after the lock: its snapshot has every row committed before,
        # the marks of the relay that held the lock included. No row lock: the relay (one at a
        # time) is the only writer of an outbox row once it is written (the notification
        # dispatcher reads after a cursor, allocation.notify.cursor; the prune deletes published
        # rows only). When the dispatcher marked rows too, the two deadlocked.
        cur.execute(f"SELECT id, lease_id, pool_id, team_id, state FROM {table} WHERE stream_id IS NULL "
                    "ORDER BY id LIMIT %s", [limit])
        rows = cur.fetchall()
        if not rows:
            return 0
        stream_ids = publish_rows(rows)
        ids = [row[0] for row in rows]
        bulk_update_columns(LeaseOutbox, ids, ["stream_id"], [stream_ids], same={"published_at": timezone.now()})
        # Once the record is committed, Redis need not remember these rows any more.
        transaction.on_commit(partial(_forget, ids))
    return len(rows)


def publish_rows(rows: Sequence[tuple[int, Any, int, int, str]]) -> list[str]:
    """Add outbox rows (id, lease, pool, team, state) to the stream, each unless it was already
    (then its first stream id is returned again); their stream ids, in order."""
    global _script
    if _script is None:
        _script = redis_client().register_script(_PUBLISH_LUA)
    args: list[Any] = [STREAM_MAXLEN]
    for outbox_id, lease_id, pool_id, team_id, state in rows:
        args += [outbox_id, str(lease_id), pool_id, team_id, state]
    return [sid.decode() if isinstance(sid, bytes) else str(sid)
            for sid in _script(keys=[STREAM, PUBLISHED], args=args)]


def _forget(ids: Sequence[int]) -> None:
    try:
        redis_client().hdel(PUBLISHED, *ids)
    except Exception:  # left behind: `prune` removes them with their rows
        logger.info("could not forget %d published lease event(s) in Redis", len(ids), exc_info=True)


def prune(*, older_than: timedelta = RETENTION, limit: int = 10_000) -> int:
    """Delete up to `limit` rows published longer than `older_than` ago and notified (at or before
    the notification cursor), and Redis' record of them in case it was left; returns how many."""
    table = connection.ops.quote_name(LeaseOutbox._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE published_at < %s "
                    f"AND (xact, id) <= {position_sql()} ORDER BY published_at LIMIT %s) RETURNING id",
                    [timezone.now() - older_than, limit])
        ids = [int(row[0]) for row in cur.fetchall()]
    if ids:
        _forget(ids)
    return len(ids)
