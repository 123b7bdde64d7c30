"""The order teams take turns in within one phase of the fair policy's pass (fair.py): by the
key of each team's next request, (-priority, fair share, created_at, lease_id), the share
(`fairshare.team_share`) worked out again after each grant (water-filling). With a team tree
(Slurm Fair Tree's order) the share part is the shares of the team's departments from the root
down, then its own."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from allocation.policy.fairshare import team_share
from allocation.policy.quota import QuotaBook
from allocation.policy.types import RequestView, Snapshot

Key = tuple[int, float | tuple[float, ...], float, str, str]


class TeamOrder:
    """The fair-share keys of one pool's teams during a pass, cached until their allocations
    change (the pass says so: `changed`, `all_changed`)."""

    def __init__(self, snapshot: Snapshot, quota: QuotaBook, pool: str) -> None:
        self.snapshot = snapshot
        self.quota = quota
        self.pool = pool
        self.tree = quota.tree
        self.shares: dict[str, float] = {}  # per team; dropped when its allocation changes
        self.tree_keys: dict[str, tuple[float, ...]] = {}  # with a tree: share_key per team

    def share(self, team: str) -> float:
        share = self.shares.get(team)
        if share is None:
            view = self.snapshot.teams.get(team)
            weight = view.weight if view is not None else 1.0
            usage = view.decayed_usage if view is not None else 0.0
            if self.tree is not None:  # a department's usage is its subtree's
                usage = self.tree.usage.get(team, usage)
            share = self.shares[team] = team_share(usage, self.quota.committed(team, self.pool),
                                                   weight, self.snapshot.half_life_s)
        return share

    def share_key(self, team: str) -> float | tuple[float, ...]:
        """The fair-share part of a team's key. Flat: its share. With a tree (Slurm Fair Tree's
        order): the shares of its ancestors from the root down, then its own, so siblings
        compare by their own shares only once their departments tie."""
        if self.tree is None:
            return self.share(team)
        key = self.tree_keys.get(team)
        if key is None:  # kept until any share changes: most pops in a pass grant nothing
            key = self.tree_keys[team] = (*(self.share(n) for n in reversed(self.tree.ancestors(team))),
                                          self.share(team))
        return key

    def changed(self, team: str) -> None:
        """`team`'s allocation changed: its share (and its departments') must be worked out again."""
        self.shares.pop(team, None)
        if self.tree is not None:
            for node in self.tree.ancestors(team):
                self.shares.pop(node, None)
            self.tree_keys.clear()  # a department's share is in every key below it

    def all_changed(self) -> None:
        """Allocations of several teams changed (a preemption): every share is worked out again."""
        self.shares.clear()
        self.tree_keys.clear()

    def key(self, req: RequestView) -> Key:
        return (-req.priority, self.share_key(req.team), req.created_at, req.lease_id, req.team)

    def turns(self, queues: dict[str, list[RequestView]]) -> Iterator[RequestView]:
        """The heads of the queues (each a team's, its head last), team by team in fair-share
        order, each popped from its queue. The caller decides each before asking for the next:
        the team's next key is taken after that. With a tree, a team's key is checked again
        when it comes out (its departments' shares move with their other teams' grants) and it
        goes back if it got worse."""
        heap = [self.key(queue[-1]) for queue in queues.values() if queue]
        heapq.heapify(heap)
        while heap:
            key = heapq.heappop(heap)
            queue = queues[key[-1]]
            if self.tree is not None and heap:
                fresh = self.key(queue[-1])
                if fresh > key and fresh > heap[0]:
                    heapq.heappush(heap, fresh)
                    continue
            yield queue.pop()
            if queue:
                heapq.heappush(heap, self.key(queue[-1]))
