"""The team tree for pages and reports: departments over teams, with what each node holds,
is guaranteed, may hold at most and borrows, per pool, rolled up its subtree.

Four queries whatever the size of the tree (teams, quotas, GPUs held, GPUs pending). A flat
team list is a forest of leaves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Sum

from allocation.choices import LeaseState
from allocation.models import Lease, Quota, Team
from allocation.selectors import team_gpus_held
from core.roles import is_pool_admin
from inventory.models import Pool


@dataclass
class PoolStanding:
    """One node in one pool. `held`, `pending` and `leases_borrowed` are its subtree's sums;
    `guaranteed` and `limit` its own quota (0 and None without one); `borrowed` is what the
    subtree holds above the node's own guarantee."""

    pool: str
    held: int = 0
    pending: int = 0
    guaranteed: int = 0
    limit: int | None = None
    lending_limit: int | None = None
    leases_borrowed: int = 0  # GPUs of the subtree's leases granted as borrowed

    @property
    def borrowed(self) -> int:
        return max(0, self.held - self.guaranteed)


@dataclass
class TeamNode:
    id: int
    name: str
    weight: float
    parent: str | None
    depth: int = 0
    children: list[TeamNode] = field(default_factory=list)
    pools: dict[str, PoolStanding] = field(default_factory=dict)  # by pool name, sorted

    @property
    def is_department(self) -> bool:
        return bool(self.children)

    def walk(self) -> Iterator[TeamNode]:
        """This node, then its descendants, depth first, children by name."""
        yield self
        for child in self.children:
            yield from child.walk()


def team_tree(*, user: Any = None) -> list[TeamNode]:
    """The roots of the team tree, by name, each with its subtree. `user`: a pool admin (or
    None) sees every team; anyone else the teams they are a member of and the departments above
    them (not their sibling teams)."""
    rows = list(Team.objects.order_by("name").values_list("pk", "name", "weight", "parent__name"))
    nodes = {name: TeamNode(pk, name, weight, parent) for pk, name, weight, parent in rows}
    by_id = {node.id: node for node in nodes.values()}
    for node in nodes.values():
        if node.parent is not None and node.parent in nodes:
            nodes[node.parent].children.append(node)
    _standings(nodes, by_id)
    roots = [n for n in nodes.values() if n.parent is None or n.parent not in nodes]
    for root in roots:
        _set_depth(root, 0)
    if user is None or is_pool_admin(user):
        return roots
    mine = set(Team.objects.filter(members=user).values_list("name", flat=True))
    visible = set()
    for name in mine:
        up: TeamNode | None = nodes.get(name)
        while up is not None and up.name not in visible:
            visible.add(up.name)
            up = nodes.get(up.parent) if up.parent is not None else None
    return [_prune(root, visible) for root in roots if root.name in visible]


def flatten(roots: Iterable[TeamNode]) -> list[TeamNode]:
    """Every node, depth first (for a table indented by `depth`)."""
    return [node for root in roots for node in root.walk()]


def _standings(nodes: dict[str, TeamNode], by_id: dict[int, TeamNode]) -> None:
    pools: dict[int, str] = {}
    for quota in Quota.objects.select_related("pool").order_by("pool__name"):
        node = by_id.get(quota.team_id)
        pools[quota.pool_id] = quota.pool.name
        if node is not None:
            node.pools[quota.pool.name] = PoolStanding(quota.pool.name, guaranteed=quota.guaranteed,
                                                       limit=quota.limit, lending_limit=quota.lending_limit)
    pending = (Lease.objects.filter(state=LeaseState.PENDING).values_list("team_id", "pool_id", "pool__name")
               .annotate(n=Sum("gpu_count")).order_by())
    for team_id, pool_id, pool_name, n in pending:
        pools[pool_id] = pool_name
        for node in _up(nodes, by_id.get(team_id)):
            _at(node, pool_name).pending += n or 0
    held = team_gpus_held()
    missing = {pool_id for _, pool_id in held} - set(pools)
    pools.update(dict(Pool.objects.filter(pk__in=missing).values_list("pk", "name")))
    for (team_id, pool_id), in_pool in held.items():
        for node in _up(nodes, by_id.get(team_id)):
            standing = _at(node, pools[pool_id])
            standing.held += in_pool.gpus
            standing.leases_borrowed += in_pool.borrowed
    for node in nodes.values():
        node.pools = dict(sorted(node.pools.items()))


def _up(nodes: dict[str, TeamNode], node: TeamNode | None) -> Iterator[TeamNode]:
    seen: set[str] = set()
    while node is not None and node.name not in seen:
        seen.add(node.name)
        yield node
        node = nodes.get(node.parent) if node.parent is not None else None


def _at(node: TeamNode, pool: str) -> PoolStanding:
    standing = node.pools.get(pool)
    if standing is None:
        standing = node.pools[pool] = PoolStanding(pool)
    return standing


def _set_depth(node: TeamNode, depth: int, seen: set[str] | None = None) -> None:
    seen = set() if seen is None else seen
    if node.name in seen:
        return
    seen.add(node.name)
    node.depth = depth
    for child in node.children:
        _set_depth(child, depth + 1, seen)


def _prune(node: TeamNode, visible: set[str]) -> TeamNode:
    node.children = [_prune(c, visible) for c in node.children if c.name in visible]
    return node
