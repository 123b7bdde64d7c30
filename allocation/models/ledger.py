"""The fair-share ledger's rows (imported by allocation.models, where Django finds it); what they
mean and how they are written and read is allocation.ledger."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class UsageLedger(models.Model):
    """Fair-share ledger per team: decayed GPU-seconds of leases that have ended, as of `as_of`,
    in a few rows (`stripe`, allocation.ledger.STRIPES) a team whose sum is the team's: a release
    adds to its lease's stripe, so releases of one team do not queue on one row. Running leases
    are added at snapshot time; `manage.py rebuild_ledger` recomputes it from lease rows."""

    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="ledgers", db_index=False)
    stripe = models.PositiveSmallIntegerField(default=0)
    closed_usage = models.FloatField(default=0.0)
    as_of = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "stripe"], name="usage_ledger_team_stripe")]

    def __str__(self) -> str:
        return f"{self.team_id}: {self.closed_usage:.0f} GPU-s"
