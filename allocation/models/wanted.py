"""Passes wanted and not yet asked for (imported by allocation.models, where Django finds it).

A pass trigger is a Celery message (`allocation.triggers.request_pass`). When it cannot be sent
(the broker is down, or a Sentinel failover is under way), the wish is kept here instead, one row
per pool, so that it outlives the outage: the first worker to hear the broker again runs it
(`allocation.engine.run_wanted_passes`), rather than the next periodic pass, up to
PASS_INTERVAL_S later.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PassWanted(models.Model):
    """A pool whose scheduling pass was asked for while the broker could not take the message.
    One row per pool at most (the insert is an upsert): however many requests failed, one pass
    serves them all."""

    pool = models.OneToOneField("inventory.Pool", primary_key=True, on_delete=models.CASCADE,
                                related_name="+")
    wanted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"pass wanted for pool {self.pool_id} since {self.wanted_at:%H:%M:%S}"
