"""The team tree (departments over teams, any depth), as the policy reads it.

`TeamView.parent` names a team's parent; teams without one are roots. Members and leases belong
to leaf teams; a parent (department) holds what its descendants hold. A flat snapshot (no team
names a parent) has no tree: `Tree.of` returns None and every caller keeps the flat code path,
so flat configurations decide exactly as before.

What the tree adds to a pass (README.md, "Hierarchy"):
- counts roll up: a node's held, leaving and promised GPUs are its descendants' sum
  (`QuotaBook.add`), so a node's quota (guarantee, limit, lending limit) reads like a team's;
- `tier`: the level whose guarantee a grant stays within, so idle guarantees are lent to
  siblings before cousins and before other departments;
- `share_path`: the fair-share key from the root down (Slurm Fair Tree's order);
- `distance`: how far apart two teams are, so reclaim takes from the farthest borrowers first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from allocation.policy.types import TeamView


@dataclass(eq=False)
class Tree:
    """Parents and ancestors of every team named in the snapshot. `chain[t]` is t's ancestors,
    nearest first (t itself not included); `depth[t]` = len(chain[t])."""

    parent: dict[str, str]
    chain: dict[str, tuple[str, ...]]
    children: dict[str, list[str]]
    # Tiers: 0 within the team's own guarantee; 1 .. top-1 within an ancestor's guarantee, the
    # deepest ancestors first; `top`: beyond every guarantee. A flat tree has top 1.
    top: int
    usage: dict[str, float] = field(default_factory=dict)  # decayed usage of each node's subtree

    @classmethod
    def of(cls, teams: Mapping[str, TeamView], *, force: bool = False) -> Tree | None:
        """The tree of `teams`; None when no team names a parent (flat), unless `force` (tests:
        the tree code path on a one-level tree must decide as the flat one)."""
        parent = {name: view.parent for name, view in teams.items() if view.parent}
        if not parent and not force:
            return None
        chain: dict[str, tuple[str, ...]] = {}
        for name in teams:
            up: list[str] = []
            node = parent.get(name)
            while node is not None and node not in up and node != name:  # a cycle stops here
                up.append(node)
                node = parent.get(node)
            chain[name] = tuple(up)
        children: dict[str, list[str]] = {}
        for name, up_name in sorted(parent.items()):
            children.setdefault(up_name, []).append(name)
        top = max((len(up) for up in chain.values()), default=0) + 1
        usage: dict[str, float] = {}
        for name, view in teams.items():
            usage[name] = usage.get(name, 0.0) + view.decayed_usage
            for node in chain[name]:
                usage[node] = usage.get(node, 0.0) + view.decayed_usage
        return cls(parent, chain, children, top, usage)

    def ancestors(self, team: str) -> tuple[str, ...]:
        """`team`'s ancestors, nearest first; () for a root or a team the snapshot does not name."""
        return self.chain.get(team, ())

    def is_parent(self, team: str) -> bool:
        return team in self.children

    def tier_of(self, team: str, level: int) -> int:
        """The pass phase of a grant that first stays within the guarantee of `team`'s ancestor
        at `level` (0: the team itself; len(ancestors): none, beyond every guarantee)."""
        up = self.ancestors(team)
        if level == 0:
            return 0
        if level >= len(up) + 1:
            return self.top
        # The ancestor at `level` sits at depth len(up) - level from the root (root: 0); the
        # deeper it is, the more local the lending, the earlier its phase.
        return self.top - 1 - (len(up) - level)

    def distance(self, a: str, b: str) -> int:
        """Edges from `a` up to the nearest common ancestor; teams in different roots are
        farthest (depth + 1). 0 for the same team."""
        if a == b:
            return 0
        up_b = set(self.ancestors(b))
        for steps, node in enumerate(self.ancestors(a), start=1):
            if node in up_b:
                return steps
        return len(self.ancestors(a)) + 1

    def outside(self, team: str, node: str) -> bool:
        """Whether `team` is outside `node`'s subtree."""
        return team != node and node not in self.ancestors(team)
