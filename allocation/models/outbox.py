"""The outbox of lease events (imported by allocation.models, where Django finds it).

Every lease transition writes one `LeaseOutbox` row in the transaction that commits it, so the
event exists exactly when the change does: a crash after the commit cannot lose it, a rollback
takes it back. The relay (`allocation.outbox.relay`) publishes the rows to the Redis stream in id
order and records the stream id each one got (`stream_id`): once published, a row is never
published again, and a retry after a crash between the stream write and that record gets the same
stream id back instead of a second entry. Published rows are pruned after a day, once notified.

Notifications read the same rows in the order their transactions finished, after a position
(`NotificationCursor`), never marking a row: the relay is the only writer of an outbox row, so
nothing contends with it for the row's lock, and an event costs one write less.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.db.expressions import CurrentTransaction


class LeaseOutbox(models.Model):
    """One committed lease change, waiting to be published (`stream_id` null) or published.

    Plain ids, not foreign keys: the row is a log entry, not a relation; it must never hold up a
    lease's deletion nor take a lock on the rows it names."""

    id = models.BigAutoField(primary_key=True)
    lease_id = models.UUIDField()
    pool_id = models.IntegerField()
    team_id = models.IntegerField()
    state = models.CharField(max_length=16)
    created_at = models.DateTimeField(default=timezone.now)
    stream_id = models.CharField(max_length=40, null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    # The writing transaction's id, filled in by the database: the notification dispatcher reads
    # rows in (xact, id) order once every transaction before theirs has ended (allocation.notify.cursor).
    xact = models.BigIntegerField(db_default=CurrentTransaction(), editable=False)

    class Meta:
        indexes = [
            # The relay's scan: only what is still to publish, in id order.
            models.Index(fields=["id"], condition=Q(stream_id__isnull=True), name="lease_outbox_unpublished"),
            # The prune: published rows by age.
            models.Index(fields=["published_at"], condition=Q(published_at__isnull=False),
                         name="lease_outbox_published_at"),
            # The notification dispatcher's scan: after its cursor, in the order transactions ended.
            models.Index(fields=["xact", "id"], name="lease_outbox_xact"),
        ]

    def __str__(self) -> str:
        return f"event {self.pk}: lease {self.lease_id} {self.state} ({self.stream_id or 'unpublished'})"


class NotificationCursor(models.Model):
    """How far the notification dispatcher has read the outbox: every row at or before
    (`xact`, `outbox_id`) in (transaction, id) order is notified. One row (id 1), moved with the
    deliveries it wrote, in their transaction."""

    id = models.SmallIntegerField(primary_key=True, default=1)
    xact = models.BigIntegerField(default=0)
    outbox_id = models.BigIntegerField(default=0)
    moved_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"notified up to transaction {self.xact}, event {self.outbox_id}"
