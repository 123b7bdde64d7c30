"""Usage up the team tree: a department's GPU-hours are its descendants'.

`group_by=department` groups the teams' rows under their top-level department (a team with no
parent is its own); `team=DEPARTMENT` covers the department and every team below it
(`team_subtree_ids`, the report's scope). The subtree reads live here, beside the usage reports
(a read the budgets' refresh and the dashboard's tree selector share), not in
allocation.selectors: the meter's writers import the economy package, so it may not import
the selectors (an import cycle)."""

from __future__ import annotations

from dataclasses import replace

from allocation.economy.usage import UsageReport, UsageRow
from allocation.models import Team


def roots_of_teams() -> dict[str, str]:
    """Team name -> the name of its top-level department (itself for a root). One query."""
    parent = dict(Team.objects.values_list("name", "parent__name"))
    roots = {}
    for name in parent:
        node, seen = name, {name}
        while parent.get(node) is not None and parent[node] not in seen:
            node = parent[node]
            seen.add(node)
        roots[name] = node
    return roots


def by_department(report: UsageReport) -> UsageReport:
    """`report` (grouped by team) regrouped by top-level department, rows sorted by key."""
    roots = roots_of_teams()
    groups: dict[str, UsageRow] = {}
    for row in report.rows:
        key = roots.get(row.key, row.key)
        got = groups.get(key)
        if got is None:
            groups[key] = replace(row, key=key)
            continue
        groups[key] = UsageRow(key, round(got.gpu_hours + row.gpu_hours, 6),
                               _add(got.cost, row.cost), _add(got.unpriced_gpu_hours, row.unpriced_gpu_hours),
                               round(got.idle_gpu_hours + row.idle_gpu_hours, 6))
    return replace(report, group_by="department", rows=tuple(groups[k] for k in sorted(groups)))


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else round((a or 0.0) + (b or 0.0), 6)


def team_subtree_ids(team: Team | int) -> list[int]:
    """The ids of `team` and of every team below it (a leaf: itself only). One query."""
    team_id = team if isinstance(team, int) else team.pk
    return sorted(team_subtrees().get(team_id, {team_id}))


def team_subtrees() -> dict[int, set[int]]:
    """Team id -> the ids of the team and every team below it, for every team. One query."""
    parent: dict[int, int | None] = dict(Team.objects.values_list("pk", "parent_id"))
    out: dict[int, set[int]] = {pk: {pk} for pk in parent}
    for pk in parent:
        node: int | None = parent[pk]
        seen = {pk}
        while node is not None and node not in seen:
            out[node].add(pk)
            seen.add(node)
            node = parent.get(node)
    return out


def ancestor_ids(team_id: int) -> list[int]:
    """The ids of the departments above `team_id`, nearest first (up to four levels, in one
    query); [] for a root."""
    row = Team.objects.filter(pk=team_id).values_list(
        "parent_id", "parent__parent_id", "parent__parent__parent_id", "parent__parent__parent__parent_id").first()
    return [pk for pk in (row or ()) if pk is not None]
