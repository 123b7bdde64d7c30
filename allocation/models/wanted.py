"""Passes wanted and not yet run (imported by allocation.models, where Django finds it).

A pass trigger is a Celery message (`allocation.triggers.request_pass`). When it cannot be sent
(the broker is down, or a Sentinel failover is under way), or when the pass finds its pool busy
with another pass (`allocation.engine.handoff`), the wish is kept here, so that it outlives the
outage or reaches the pass holding the pool: the first worker to hear the broker again runs it
(`allocation.engine.run_wanted_passes`), rather than the next periodic pass, up to
PASS_INTERVAL_S later.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PassWanted(models.Model):
    """One wish for a pass of `pool`. A row a wish, inserted and never updated: recording one
    never waits, not even on a pass that is deleting (claiming) the pool's earlier wishes, which
    one row per pool, upserted, did (33 ms a wish in bench_kueue_baseline). A pass claims every
    wish of its pool it can see; one pass serves them all."""

    id = models.BigAutoField(primary_key=True)
    pool = models.ForeignKey("inventory.Pool", on_delete=models.CASCADE, related_name="+")
    wanted_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"pass wanted for pool {self.pool_id} since {self.wanted_at:%H:%M:%S}"
