"""Notification targets, the facts that are not lease transitions, and the delivery log (imported by
allocation.models, where Django finds them; written by allocation.notify)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from allocation.notify_vocabulary import DEFAULT_EXPIRING_BEFORE_S, DEFAULT_GRANTED_AFTER_S, EMAIL, WEBHOOK


class Notification(models.Model):
    """Where to tell whom what: one entry of `notifications:` in the configuration (`user` null,
    written only by `apply`), or one user's own subscription (`user` set, written through the API).

    A user's subscription hears of the user's own leases and of the budgets of the user's teams; a
    configured target of every team's, or of those named in `teams` ([] all)."""

    KINDS = [(WEBHOOK, "Webhook (JSON POST)"), (EMAIL, "E-mail")]

    name = models.SlugField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="notifications", help_text="Owner of a subscription; empty: configured.")
    kind = models.CharField(max_length=16, choices=KINDS)
    url = models.CharField(max_length=2000, blank=True, default="")
    to = models.JSONField(default=list, blank=True, help_text="E-mail recipients.")
    events = models.JSONField(default=list)
    teams = models.JSONField(default=list, blank=True, help_text="Team names heard of; empty: all.")
    # The HMAC key, Fernet-encrypted (inventory.secrets), or the name of the environment variable
    # that holds it in the sending worker.
    secret = models.TextField(blank=True, default="")
    secret_env = models.CharField(max_length=128, blank=True, default="")
    granted_after_s = models.FloatField(default=DEFAULT_GRANTED_AFTER_S)
    expiring_before_s = models.FloatField(default=DEFAULT_EXPIRING_BEFORE_S)
    # A receiver that answers 410 Gone is not sent to again until re-enabled.
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["user_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=Q(user__isnull=True), name="notification_config_name"),
            models.UniqueConstraint(fields=["user", "name"], condition=Q(user__isnull=False),
                                    name="notification_user_name"),
        ]

    def __str__(self) -> str:
        return f"{self.user.get_username()}/{self.name}" if self.user_id and self.user else self.name

    @property
    def signed(self) -> bool:
        return bool(self.secret or self.secret_env)


class NotificationEvent(models.Model):
    """A fact worth a notification that is not a lease transition (a budget warning, an idle
    warning), written in the transaction that establishes it; `key` names the fact, so writing it
    twice is refused by the database. Fanned out to deliveries once (`dispatched_at`)."""

    id = models.BigAutoField(primary_key=True)
    event = models.CharField(max_length=32)
    key = models.CharField(max_length=200, unique=True)
    team_id = models.IntegerField(null=True)
    pool_id = models.IntegerField(null=True)
    lease_id = models.UUIDField(null=True)
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["id"], condition=Q(dispatched_at__isnull=True),
                                name="notification_event_due")]

    def __str__(self) -> str:
        return f"{self.event} {self.key}"


class NotificationDelivery(models.Model):
    """One event to one target: its body (rendered once, so every attempt sends the same bytes),
    its attempts and its outcome. The id is the `X-Gpupool-Delivery` header."""

    PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
    STATES = [(PENDING, "Pending"), (DELIVERED, "Delivered"), (FAILED, "Failed (given up)")]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    notification = models.ForeignKey(Notification, on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="deliveries")
    target = models.CharField(max_length=200, help_text="The target's name when the delivery was made.")
    kind = models.CharField(max_length=16)
    event = models.CharField(max_length=32, db_index=True)
    event_key = models.CharField(max_length=200, help_text="The event's own id: one delivery per target.")
    lease_id = models.UUIDField(null=True, blank=True, db_index=True)
    team = models.CharField(max_length=64, blank=True, default="")
    pool = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=STATES, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status = models.IntegerField(null=True, blank=True, help_text="HTTP status of the last attempt.")
    last_error = models.TextField(blank=True, default="")
    occurred_at = models.DateTimeField(help_text="When the event was committed.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "notification deliveries"
        constraints = [models.UniqueConstraint(fields=["event_key", "notification"],
                                               name="notification_delivery_once")]
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(state="pending"),
                                name="notification_delivery_due")]

    def __str__(self) -> str:
        return f"{self.event} → {self.target} ({self.state})"
