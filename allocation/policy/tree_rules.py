"""The team tree's rules (`teams[].parent`: a department, any depth), as every writer checks
them: the config (`parse_config` on the file alone, with positions; `config_apply` on the file
over the database) and the quota service (`allocation.services.teams_tree`). Pure: names in,
problems out.

Rules (CONTRACT "Hierarchy"): a parent must be a defined team; no cycles; members belong to
leaf teams only; in each pool, a parent's guarantee bounds the sum of its children's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeProblem:
    """One broken rule: `team` (or `(team, pool)` for a guarantee) is where it is reported."""

    subject: Any
    key: str  # the entry's key at fault: parent, members or guaranteed
    message: str


def tree_errors(parents: Mapping[str, str | None], with_members: set[str],
                guaranteed: Mapping[tuple[str, str], int], *,
                known: set[str] | None = None) -> list[TreeProblem]:
    """Every broken rule of the tree. `parents`: team -> parent (None: a root); `with_members`:
    teams that have members; `guaranteed`: (team, pool) -> guarantee; `known`: the team names
    a parent may refer to (None: only `parents`' keys)."""
    known = set(parents) if known is None else known
    problems: list[TreeProblem] = []
    for team, parent in sorted(parents.items()):
        if parent is None:
            continue
        if parent == team:
            problems.append(TreeProblem(team, "parent", f"team {team} cannot be its own parent"))
        elif parent not in known:
            problems.append(TreeProblem(team, "parent", f"parent {parent!r} of team {team} is not "
                                                        "a defined team"))
    for team in sorted(_in_cycles(parents)):
        problems.append(TreeProblem(team, "parent", f"team {team} is in a cycle of parents "
                                                    f"({' → '.join(_cycle(parents, team))})"))
    children: dict[str, list[str]] = {}
    for team, parent in parents.items():
        if parent is not None and parent != team:
            children.setdefault(parent, []).append(team)
    for parent in sorted(set(children) & with_members):
        problems.append(TreeProblem(parent, "members", f"team {parent} has members and child teams "
                                    f"({', '.join(sorted(children[parent]))}): members belong to "
                                    "leaf teams only"))
    return problems + _guarantee_errors(children, guaranteed)


def _guarantee_errors(children: Mapping[str, list[str]],
                      guaranteed: Mapping[tuple[str, str], int]) -> list[TreeProblem]:
    """In each pool, a parent's guarantee bounds the sum of its children's."""
    problems = []
    pools = sorted({pool for _, pool in guaranteed})
    for parent in sorted(children):
        for pool in pools:
            own = guaranteed.get((parent, pool))
            total = sum(guaranteed.get((c, pool), 0) for c in children[parent])
            if own is not None and total > own:
                problems.append(TreeProblem((parent, pool), "guaranteed", (
                    f"the guarantees of team {parent}'s children in pool {pool} add up to {total}, "
                    f"above its own guarantee {own}")))
    return problems


def _in_cycles(parents: Mapping[str, str | None]) -> set[str]:
    cyclic: set[str] = set()
    for start in parents:
        seen = [start]
        node = parents.get(start)
        while node is not None and node not in seen:
            seen.append(node)
            node = parents.get(node)
        if node == start and parents.get(start) != start:
            cyclic.add(start)
    return cyclic


def _cycle(parents: Mapping[str, str | None], start: str) -> list[str]:
    path = [start]
    node = parents.get(start)
    while node is not None and node != start:
        path.append(node)
        node = parents.get(node)
    return [*path, start]
