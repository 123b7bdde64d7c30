"""What the gates read of the team tree (tree.py), precomputed once per pool and pass.

Only built when the snapshot has a tree: a flat pool's gates never look here.
- `limits`: per team, the limits of the team and of each ancestor that has one in the pool,
  the team's own first: a department's limit caps the sum its descendants hold.
- `kept`: the lending limit at each level. A node whose lending limit is below its guarantee
  keeps `guaranteed − holds − lending limit` of its idle guarantee from teams outside its
  subtree; a subtree keeps the most of its own rule and its children's together (never both:
  the GPUs a team keeps back are part of its department's idle guarantee). What is kept from a
  requester is the sum over the subtrees beside its chain (its ancestors' other children and
  the other roots); flat, that is the other teams' own rules, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from allocation.policy.quota import QuotaBook
from allocation.policy.tree import Tree
from allocation.policy.types import QuotaView


@dataclass(slots=True)
class TreeLimits:
    tree: Tree
    own: Mapping[str, int]  # node -> its limit in the pool, for nodes that have one
    chains: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def of(self, team: str) -> tuple[tuple[str, int], ...]:
        """(node, limit) for `team` and its ancestors that have a limit, the team first."""
        chain = self.chains.get(team)
        if chain is None:
            nodes = (team, *self.tree.ancestors(team))
            chain = self.chains[team] = tuple((n, self.own[n]) for n in nodes if n in self.own)
        return chain


@dataclass(slots=True)
class TreeLending:
    """The lending-limit rule over a tree in one pool: `unlent` node -> (guaranteed, lending
    limit); `relevant`: those nodes and their ancestors, the only ones that can keep anything;
    `tops`: the relevant roots."""

    tree: Tree
    pool: str
    unlent: Mapping[str, tuple[int, int]]
    relevant: frozenset[str]
    tops: tuple[str, ...]

    @classmethod
    def of(cls, tree: Tree, pool: str, in_pool: list[QuotaView]) -> TreeLending:
        unlent = {q.team: (q.guaranteed, q.lending_limit) for q in in_pool
                  if q.lending_limit is not None and q.lending_limit < q.guaranteed}
        relevant = set(unlent)
        for node in unlent:
            relevant.update(tree.ancestors(node))
        tops = tuple(sorted(n for n in relevant if not tree.ancestors(n)))
        return cls(tree, pool, unlent, frozenset(relevant), tops)

    def keep(self, node: str, quota: QuotaBook, out: list[tuple[str, int, int, int]]) -> int:
        """What `node`'s subtree keeps back from outsiders now; the nodes whose own rule
        counted are added to `out` as (node, kept, guaranteed, lending limit)."""
        below: list[tuple[str, int, int, int]] = []
        children = sum(self.keep(c, quota, below) for c in self.tree.children.get(node, ())
                       if c in self.relevant)
        rule = self.unlent.get(node)
        own = 0
        if rule is not None:
            holds = quota.holds(node, self.pool)
            own = max(0, rule[0] - rule[1] - holds)
        if own > children:
            assert rule is not None
            out.append((node, own, rule[0], rule[1]))
            return own
        out.extend(below)
        return children

    def kept_from(self, team: str, quota: QuotaBook) -> list[tuple[str, int, int, int]]:
        """The nodes keeping idle guarantee back from `team`, with what each keeps."""
        chain = {team, *self.tree.ancestors(team)}
        out: list[tuple[str, int, int, int]] = []
        for node in (*self.tops, *(c for n in chain for c in self.tree.children.get(n, ()))):
            if node in self.relevant and node not in chain:
                self.keep(node, quota, out)
        return [k for k in out if k[1] > 0]


def capacity_quota(tree: Tree | None, in_pool: list[QuotaView]) -> int:
    """ΣG for the lending rule: flat, every guarantee; with a tree, those of the topmost nodes
    holding a quota in the pool (a department's guarantee already bounds its children's)."""
    if tree is None:
        return sum(q.guaranteed for q in in_pool)
    holders = {q.team for q in in_pool}
    return sum(q.guaranteed for q in in_pool
               if not any(n in holders for n in tree.ancestors(q.team)))
