"""Advance reservations (allocation.services.reservations admits them; imported by
allocation.models, where Django finds them)."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from allocation.choices import ReservationState


class Reservation(models.Model):
    """An advance reservation: `gpus` GPUs of `model` (as a lease's `model`: "" any) in `pool`
    kept for `team` over [start, end). Admitted under the pool's scheduling lock
    (`allocation.services.reservations`); the policy holds the GPUs (allocation/policy/reservations.py)."""

    pool = models.ForeignKey("inventory.Pool", on_delete=models.PROTECT, related_name="reservations")
    team = models.ForeignKey("allocation.Team", on_delete=models.PROTECT, related_name="reservations")
    gpus = models.PositiveIntegerField()
    model = models.CharField(max_length=255, blank=True, default="")
    start = models.DateTimeField()
    end = models.DateTimeField()
    state = models.CharField(max_length=16, choices=ReservationState.choices,
                             default=ReservationState.ACTIVE)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="reservations")
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["start", "id"]
        indexes = [models.Index(fields=["pool", "state", "end"])]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="reservation_gpus_positive"),
            models.CheckConstraint(condition=Q(end__gt=F("start")), name="reservation_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"reservation {self.pk}: {self.gpus} GPUs of {self.pool_id} for {self.team_id}"

    def current_state(self, now: datetime | None = None) -> str:
        """`ended` for an active reservation whose end has passed; else the stored state."""
        if self.state == ReservationState.ACTIVE and self.end <= (now or timezone.now()):
            return ReservationState.ENDED
        return self.state
