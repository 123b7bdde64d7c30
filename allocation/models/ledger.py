"""The fair-share ledger's rows (imported by allocation.models, where Django finds it); what they
mean and how they are written and read is allocation.ledger."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class UsageLedger(models.Model):
    """Fair-share ledger per team: decayed GPU-seconds of leases that have ended, as of `as_of`,
    in a few rows (`stripe`, allocation.ledger.STRIPES) a team whose sum is the team's: a release
    adds to its lease's stripe, so releases of one team do not queue on one row. Running leases
    are added at snapshot time (from `GrantLedger` less `ended_*` here: allocation.running_usage);
    `manage.py rebuild_ledger` recomputes it from lease rows."""

    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="ledgers", db_index=False)
    stripe = models.PositiveSmallIntegerField(default=0)
    closed_usage = models.FloatField(default=0.0)
    as_of = models.DateTimeField(default=timezone.now)
    # The leases that stopped running, kept by a trigger on the lease table (migration allocation
    # 0027) in their own stripe: their GPUs, and their grant weights decayed to `as_of` alike.
    ended_gpus = models.BigIntegerField(default=0, db_default=0, editable=False)
    ended_weight = models.FloatField(default=0.0, db_default=0.0, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "stripe"], name="usage_ledger_team_stripe")]

    def __str__(self) -> str:
        return f"{self.team_id}: {self.closed_usage:.0f} GPU-s"


class GrantLedger(models.Model):
    """The leases that started running, per team and pool, kept by a trigger on the lease table
    (migration allocation 0027): their GPUs, and Σ gpus · 2^(−(as_of − granted_at)/h), their grant
    weights decayed to `as_of`. Less the ledger's `ended_*`, a team's running usage at t is
    h/ln2 · (gpus − weight · 2^(−(t − as_of)/h)) (allocation.running_usage). A row per pool because
    only that pool's pass grants there (under the pool's lock): passes of other pools never wait on
    it. `pool_id` is no foreign key: the sums of ended leases' grants must outlive a pool."""

    team = models.ForeignKey("allocation.Team", on_delete=models.CASCADE, related_name="+", db_index=False)
    pool_id = models.IntegerField()
    gpus = models.BigIntegerField(default=0)
    weight = models.FloatField(default=0.0)
    as_of = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "pool_id"], name="grant_ledger_team_pool")]

    def __str__(self) -> str:
        return f"{self.team_id} in pool {self.pool_id}: {self.gpus} GPUs granted"
