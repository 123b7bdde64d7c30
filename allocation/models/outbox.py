"""The outbox of lease events (imported by allocation.models, where Django finds it).

Every lease transition writes one `LeaseOutbox` row in the transaction that commits it, so the
event exists exactly when the change does: a crash after the commit cannot lose it, a rollback
takes it back. The relay (`allocation.outbox.relay`) publishes the rows to the Redis stream in id
order and records the stream id each one got (`stream_id`): once published, a row is never
published again, and a retry after a crash between the stream write and that record gets the same
stream id back instead of a second entry. Published rows are pruned after a day.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


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
    # When the notifications of this event were derived (allocation.notify.dispatch); null: not yet.
    # Apart from `stream_id`: notifications need no Redis, and a relay waits on no notification.
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The relay's scan: only what is still to publish, in id order.
            models.Index(fields=["id"], condition=Q(stream_id__isnull=True), name="lease_outbox_unpublished"),
            # The prune: published rows by age.
            models.Index(fields=["published_at"], condition=Q(published_at__isnull=False),
                         name="lease_outbox_published_at"),
            # The notification dispatcher's scan: what is still to notify, in id order.
            models.Index(fields=["id"], condition=Q(notified_at__isnull=True), name="lease_outbox_unnotified"),
        ]

    def __str__(self) -> str:
        return f"event {self.pk}: lease {self.lease_id} {self.state} ({self.stream_id or 'unpublished'})"
