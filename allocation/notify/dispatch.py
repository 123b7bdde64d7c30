"""Committed facts → deliveries: who hears of what. Reads the lease events not yet notified (the
outbox rows after the dispatcher's cursor, `NotificationCursor`) and the other facts not yet
dispatched (`NotificationEvent`), turns each into an `Event`, writes one `NotificationDelivery` per
target that hears of it, and moves the cursor and marks the facts, all in one transaction. Also
finds the leases about to expire.

Never twice: one dispatcher at a time (an advisory try-lock: a second returns at once), the cursor
moves with the deliveries, and the database refuses a second delivery of one event to one target
(`notification_delivery_once`) whatever happens. Never before commit: it reads committed rows only.

Nothing skipped: outbox ids are taken before their transactions commit, so a cursor on ids alone
would pass over a row whose transaction commits late. The cursor follows (writing transaction,
id) instead, and a row is read only once every transaction older than its own has ended: then no
row can still appear before it. The outbox rows themselves are never written here: the relay is
their only writer (allocation.outbox), so the two never wait for each other's row locks, and an
event costs one row version less.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from allocation.choices import HOLDING_STATES, LeaseState
from allocation.models import Lease, Notification, NotificationDelivery, NotificationEvent, Team
from allocation.notify import render
from allocation.notify.cursor import after_cursor, cursor_move
from allocation.notify.render import Event
from allocation.notify_vocabulary import BUDGET, EXPIRING, GRANTED, IDLE, LOST, PREEMPTED
from core.db import EVENT_LOCKS, db_now, lock_sql
from inventory.models import Pool

BATCH = 500  # events per dispatch transaction
_LOCK = (EVENT_LOCKS << 48) | 1  # the relay of lease events holds key 0 of the same namespace
_LEASE_EVENTS: dict[str, str] = {LeaseState.GRANTED: GRANTED, LeaseState.PREEMPTED: PREEMPTED,
                                 LeaseState.LOST: LOST}
_RELATED = ("team", "pool", "user", "host", "priority_class")


@dataclass(frozen=True)
class Target:
    """An enabled notification and, for a user's subscription, the teams the user is in."""

    row: Notification
    member_of: frozenset[int] = frozenset()

    def hears(self, event: Event) -> bool:
        """Configured targets hear of every team's events (or of `teams`); a user's subscription
        of the user's own leases and of the budgets of the user's teams. `lease.granted` only after
        a wait longer than the target's `granted_after_s`."""
        row = self.row
        if event.name not in row.events:
            return False
        if row.user_id is None:
            heard = not row.teams or event.team in row.teams
        elif event.name == BUDGET:
            heard = event.team_id in self.member_of
        else:
            heard = event.user_id == row.user_id
        return heard and (event.name != GRANTED or (event.waited_s or 0.0) > row.granted_after_s)


def load_targets() -> list[Target]:
    """Every enabled target (two queries)."""
    rows = list(Notification.objects.filter(enabled=True).select_related("user"))
    users = {row.user_id for row in rows if row.user_id is not None}
    teams: dict[int, set[int]] = defaultdict(set)
    for user_id, team_id in Team.members.through.objects.filter(user_id__in=users).values_list("user_id", "team_id"):
        teams[user_id].add(team_id)
    return [Target(row, frozenset(teams.get(row.user_id, ())) if row.user_id else frozenset()) for row in rows]


def notifications_dispatch(*, limit: int = BATCH) -> int:
    """Derive the deliveries of every fact not yet dispatched; returns how many deliveries were
    written. 0 at once when another dispatcher runs (it does this work)."""
    total = 0
    while True:
        written, read = _dispatch_batch(limit)
        total += written
        if read < limit:
            return total


def _dispatch_batch(limit: int) -> tuple[int, int]:
    """One transaction: (deliveries written, rows read)."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(lock_sql(), [_LOCK])
        locked, now = cur.fetchone()
        if not locked:
            return 0, 0
        # A statement of its own, after the lock: its snapshot has the cursor the last holder moved.
        read = after_cursor(cur, limit)
        rows = [row[:4] for row in read]
        facts = list(NotificationEvent.objects.filter(dispatched_at__isnull=True).order_by("id")[:limit])
        if not rows and not facts:
            return 0, 0
        targets = load_targets()
        written = 0
        if targets:
            events = lease_events(rows) + fact_events(facts)
            written = deliveries_write(events, targets, now)
        if read:
            cursor_move(cur, read[-1], now)
        NotificationEvent.objects.filter(id__in=[f.pk for f in facts]).update(dispatched_at=now)
    return written, max(len(rows), len(facts))


def _leases(ids: Iterable[Any]) -> dict[Any, Lease]:
    return Lease.objects.select_related(*_RELATED).in_bulk(list(set(ids)))


def lease_events(rows: Sequence[tuple[int, Any, str, datetime]]) -> list[Event]:
    """The events of outbox rows (id, lease, state, committed at) that notify: a grant, a
    preemption, a loss. One query for their leases."""
    wanted = [row for row in rows if row[2] in _LEASE_EVENTS]
    leases = _leases(row[1] for row in wanted)
    events = []
    for outbox_id, lease_id, state, at in wanted:
        lease = leases.get(lease_id)
        if lease is None:
            continue  # deleted since (test data, an admin): nobody to tell about it
        name = _LEASE_EVENTS[state]
        event = _lease_event(name, f"lease-event-{outbox_id}", lease, at)
        if name == GRANTED:
            event.waited_s = (at - lease.created_at).total_seconds()
            event.message = render.granted_text(lease, event.waited_s)
            event.extra = {"waited_s": round(event.waited_s, 3)}
        elif name == PREEMPTED:
            event.message, event.extra = render.preempted_extra(lease, at)
        else:
            event.message = render.lost_text(lease)
        events.append(event)
    return events


def _lease_event(name: str, key: str, lease: Lease, at: datetime) -> Event:
    return Event(name, key, at, lease.team.name, lease.team_id, lease.pool.name, "", lease=lease,
                 user_id=lease.user_id)


def fact_events(facts: Sequence[NotificationEvent]) -> list[Event]:
    """The events of budget and idle warnings (one query for their leases, one for names)."""
    leases = _leases(f.lease_id for f in facts if f.lease_id is not None)
    teams = dict(Team.objects.filter(pk__in={f.team_id for f in facts}).values_list("pk", "name"))
    pools = dict(Pool.objects.filter(pk__in={f.pool_id for f in facts}).values_list("pk", "name"))
    events = []
    for fact in facts:
        if fact.event == IDLE:
            lease = leases.get(fact.lease_id)
            if lease is None:
                continue
            event = _lease_event(IDLE, f"{fact.key}", lease, fact.created_at)
            event.message, event.extra = render.idle_text(lease, fact.message), {"idle": fact.data}
        else:
            team = teams.get(fact.team_id or 0, "")
            event = Event(BUDGET, fact.key, fact.created_at, team, fact.team_id, pools.get(fact.pool_id or 0, ""),
                          render.budget_text(team, fact.message), extra={"budget": fact.data})
        events.append(event)
    return events


def deliveries_write(events: Sequence[Event], targets: Sequence[Target], now: datetime) -> int:
    """One delivery per (event, target that hears of it); see `pairs_write`."""
    return pairs_write([(event, target) for event in events for target in targets if target.hears(event)], now)


def pairs_write(pairs: Sequence[tuple[Event, Target]], now: datetime) -> int:
    """One delivery per (event, target), in one INSERT, each due at once; one the database holds
    already (`notification_delivery_once`) is skipped. Returns how many were offered."""
    rows = []
    for event, target in pairs:
        delivery_id = uuid.uuid4()
        rows.append(NotificationDelivery(
            id=delivery_id, notification=target.row, target=str(target.row)[:200], kind=target.row.kind,
            event=event.name, event_key=event.key, lease_id=event.lease.pk if event.lease else None,
            team=event.team, pool=event.pool, payload=event.body(str(delivery_id)),
            occurred_at=event.occurred_at, created_at=now, next_attempt_at=now))
    if rows:
        NotificationDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def expiring_dispatch(*, now: datetime | None = None) -> int:
    """Deliveries of `lease.expiring` for the holding leases whose `expires_at` is within a
    target's `expiring_before_s`: once per lease, target and expiry time (the key names it, so a
    renewal arms it again). A lease whose notice would fall before its grant (its TTL is shorter
    than the notice) is not warned. Returns how many deliveries were written."""
    targets = [t for t in load_targets() if EXPIRING in t.row.events]
    if not targets:
        return 0
    now = now or db_now()
    window = timedelta(seconds=max(t.row.expiring_before_s for t in targets))
    leases = list(Lease.objects.select_related(*_RELATED).filter(
        state__in=HOLDING_STATES, ending_since__isnull=True, expires_at__gt=now, expires_at__lte=now + window))
    if not leases:
        return 0
    events = []
    for lease in leases:
        expires = lease.expires_at
        assert expires is not None  # filtered on
        event = _lease_event(EXPIRING, f"expiring:{lease.pk}:{expires.isoformat()}", lease, now)
        event.message, event.extra = render.expiring_extra(lease, expires, now)
        events.append((expires, lease.granted_at, event))
    sent = set(NotificationDelivery.objects.filter(event_key__in=[e.key for _, _, e in events])
               .values_list("event_key", "notification_id"))
    due = []
    for expires, granted, event in events:
        for target in targets:
            notice = expires - timedelta(seconds=target.row.expiring_before_s)
            if (event.key, target.row.pk) in sent or notice > now:
                continue
            if granted is not None and notice < granted:
                continue  # shorter than the notice: told nothing
            if target.hears(event):
                due.append((event, target))
    return pairs_write(due, now)
