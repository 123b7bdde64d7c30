"""The bound on each team's queue in a pool (imported by allocation.models, where Django finds it).

The queue caps (allocation.services.queue_caps) admit a new lease only while its team's pending
leases in the pool are under the pool's caps. Counting them at every create read the whole queue
(a heap page a pending lease: its row is rewritten by every pass's explanations, so no page stays
all-visible): ~220 pages a create in bench_kueue_baseline, a fifth of what PostgreSQL read in the
run. `QueueBound` keeps, per (pool, team), a number never below the queue's true size: a create
under its caps with the bound says so without counting; otherwise it counts, and the exact count
becomes the bound.

Never below, because every way into the pending state bumps it, in the database: a trigger on
the lease table (migration allocation 0023) adds each lease that becomes pending (a create, a
batch create, a requeue after a host loss, any future path), under the queue's advisory lock.
Leaving the queue (a grant, a cancel) does not lower it: the bound only drifts up, until it
reaches a cap and a create counts again (once in hundreds of creates under the default cap of
1,000).
"""

from __future__ import annotations

from django.db import models


class QueueBound(models.Model):
    """At least the pending leases of `team_id` in `pool_id`, and the GPUs they ask for.

    Plain ids, not foreign keys: written on the create path, it must not add key-share locks on
    the team's and pool's rows; a deleted pool's or team's rows are never read again."""

    pool_id = models.IntegerField()
    team_id = models.IntegerField()
    leases = models.IntegerField()
    gpus = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pool_id", "team_id"], name="queue_bound_one_per_queue")]

    def __str__(self) -> str:
        return (f"queue of team {self.team_id} in pool {self.pool_id}: "
                f"at most {self.leases} lease(s), {self.gpus} GPU(s)")
