"""Totals over a snapshot's running leases: GPUs held, and GPUs per (team, pool) held and
leaving. Kept per GPU layout and updated by difference from the previous snapshot, matched by
the identity of the (frozen) RunningView objects: the simulator changes a few leases per pass,
so it pays for those only. A caller that builds new views every pass (the engine) gets a plain
recount. The totals do not depend on order, so the result is the same either way."""

from __future__ import annotations

from collections import defaultdict

from allocation.policy.types import RunningView

Key = tuple[str, str]


class RunningTotals:
    def __init__(self) -> None:
        self.views: dict[str, RunningView] = {}
        self.held: set[int] = set()
        self.per_key: defaultdict[Key, int] = defaultdict(int)
        self.leaving: defaultdict[Key, int] = defaultdict(int)
        self.per_pool: defaultdict[str, int] = defaultdict(int)  # leases per pool
        self.ending: defaultdict[str, int] = defaultdict(int)  # GPUs of ending leases per pool
        # Preemptible leases not ending, per pool (for preemption's quick bounds).
        self.preemptible: defaultdict[str, dict[str, RunningView]] = defaultdict(dict)
        self.generation = 0  # bumped by every update
        self.changed: set[int] | None = None  # GPUs that changed hands in it; None: all

    def _apply(self, run: RunningView, sign: int) -> None:
        n = len(run.gpu_ids) * sign
        key = (run.team, run.pool)
        self.per_key[key] += n
        if run.ending:
            self.leaving[key] += n
            self.ending[run.pool] += n
        elif run.preemptible:
            if sign > 0:
                self.preemptible[run.pool][run.lease_id] = run
            else:
                self.preemptible[run.pool].pop(run.lease_id, None)
        self.per_pool[run.pool] += sign
        if self.changed is not None:
            self.changed.update(run.gpu_ids)
        if sign > 0:
            self.held.update(run.gpu_ids)
        else:
            self.held.difference_update(run.gpu_ids)

    def _recount(self, running: tuple[RunningView, ...]) -> None:
        self.changed = None
        self.views.clear()
        self.held.clear()
        self.per_key.clear()
        self.leaving.clear()
        self.per_pool.clear()
        self.ending.clear()
        self.preemptible.clear()
        for run in running:
            self._apply(run, 1)
            self.views[run.lease_id] = run

    def update(self, running: tuple[RunningView, ...]) -> bool:
        """Bring the totals to `running`. False when they cannot describe it (a lease id twice):
        the caller must then count by itself."""
        self.generation += 1
        self.changed = set()
        views = self.views
        changed = [run for run in running if views.get(run.lease_id) is not run]
        if len(changed) * 2 > len(running) + 16:
            self._recount(running)
        else:
            # Everything that goes is taken out before anything comes in: a GPU may pass from
            # a lease that ended to one that started.
            new_ids = sum(1 for run in changed if run.lease_id not in views)
            gone = []
            if len(views) + new_ids != len(running):
                keep = {run.lease_id for run in running}
                gone = [lid for lid in views if lid not in keep]
            for lease_id in gone:
                self._apply(views.pop(lease_id), -1)
            for run in changed:
                old = views.get(run.lease_id)
                if old is not None:
                    self._apply(old, -1)
            for run in changed:
                self._apply(run, 1)
                views[run.lease_id] = run
        if len(views) != len(running):
            self._recount(())
            return False
        return True
