"""Quota book-keeping for one pass: what each team holds, is about to lose, and has been promised.

Three numbers per (team, pool), all in GPUs:
- `held`: GPUs of its running leases, ending ones included (they still occupy the GPUs, so they
  count against the `limit`).
- `leaving`: GPUs of its leases that are ending (grace running, or preempted in this pass). They
  do not count towards the guarantee: the team will not have them for long.
- `promised`: GPUs of its requests that, in this pass, were found to wait for GPUs being freed
  for them (a preemption just started, or ending leases). They count as if granted, so that two
  requests of one team do not both start preemptions for room its limit would not let both use.

A team without a quota row in a pool has guaranteed 0 and no limit.

With a team tree (tree.py) a department's three numbers are its descendants' sums: every change
goes through `add`, which counts it on the team and each of its ancestors, so a department's
quota reads like a team's (`holds`, `committed`, `reclaimable`). Without a tree `add` is the
plain increment it always was.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from allocation.policy.tree import Tree
from allocation.policy.types import QuotaView

Key = tuple[str, str]  # (team, pool)


class QuotaBook:
    def __init__(self, quotas: Mapping[Key, QuotaView], tree: Tree | None = None) -> None:
        self.quotas = quotas
        self.tree = tree
        self.held: defaultdict[Key, int] = defaultdict(int)
        self.leaving: defaultdict[Key, int] = defaultdict(int)
        self.promised: defaultdict[Key, int] = defaultdict(int)

    def add(self, counter: defaultdict[Key, int], team: str, pool: str, gpus: int) -> None:
        """Count `gpus` more in `counter` (held, leaving or promised) for `team` and, with a
        tree, for each of its ancestors."""
        counter[(team, pool)] += gpus
        if self.tree is not None:
            for node in self.tree.ancestors(team):
                counter[(node, pool)] += gpus

    def roll_up(self) -> None:
        """With a tree, add the teams' counts (as the running leases left them) to their
        ancestors'. Call once, after counting the running leases."""
        if self.tree is None:
            return
        for counter in (self.held, self.leaving, self.promised):
            for (team, pool), gpus in list(counter.items()):
                for node in self.tree.ancestors(team):
                    counter[(node, pool)] += gpus

    def tier(self, team: str, pool: str, gpus: int) -> int:
        """The phase of a grant of `gpus` to `team`: 0 within its own guarantee; flat, 1
        beyond it; with a tree, the phase of the nearest ancestor whose guarantee it stays
        within (siblings' idle guarantees before other departments'), `Tree.top` beyond all."""
        if self.within_guarantee(team, pool, gpus):
            return 0
        tree = self.tree
        if tree is None:
            return 1
        for level, node in enumerate(tree.ancestors(team), start=1):
            if self.within_guarantee(node, pool, gpus):
                return tree.tier_of(team, level)
        return tree.top

    def guaranteed(self, team: str, pool: str) -> int:
        quota = self.quotas.get((team, pool))
        return quota.guaranteed if quota is not None else 0

    def limits_in(self, pool: str) -> dict[str, int]:
        """Team -> its limit in the pool, for the teams that have one."""
        return {team: quota.limit for (team, name), quota in self.quotas.items()
                if name == pool and quota.limit is not None}

    def committed(self, team: str, pool: str) -> int:
        """GPUs the team will hold once ending leases are gone and promises are granted."""
        key = (team, pool)
        return self.held[key] - self.leaving[key] + self.promised[key]

    def holds(self, team: str, pool: str) -> int:
        """GPUs that count against the team's limit: held (ending leases included, they still
        hold their GPUs) and promised."""
        key = (team, pool)
        return self.held[key] + self.promised[key]

    def within_guarantee(self, team: str, pool: str, gpus: int) -> bool:
        """Would `gpus` more GPUs keep the team at or below its guaranteed share?"""
        return self.committed(team, pool) + gpus <= self.guaranteed(team, pool)

    def reclaimable(self, team: str, pool: str) -> int:
        """GPUs the team holds above its guarantee (borrowed), not already leaving."""
        return max(0, self.committed(team, pool) - self.guaranteed(team, pool))

    def grant(self, team: str, pool: str, gpus: int) -> bool:
        """Record a grant; returns whether it borrows (takes the team above its guarantee)."""
        borrowed = not self.within_guarantee(team, pool, gpus)
        self.add(self.held, team, pool, gpus)
        return borrowed

    def teams_in(self, pool: str) -> list[str]:
        """The teams holding GPUs in the pool (leaf teams: a department's counts are theirs)."""
        tree = self.tree
        if tree is None:
            return sorted({team for (team, p) in self.held if p == pool})
        return sorted({team for (team, p) in self.held if p == pool and not tree.is_parent(team)})
