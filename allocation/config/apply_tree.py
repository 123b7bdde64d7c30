"""The team tree on apply and export: `teams[].parent` checked over the database and the file
together (allocation/policy/tree_rules.py), then set once every team of the file exists (a
file may name a child before its parent)."""

from __future__ import annotations

from typing import Any

from django.db.models import Count

from allocation.config.specs import Config
from allocation.models import Quota, Team
from allocation.policy.tree_rules import tree_errors


def tree_reference_errors(cfg: Config) -> list[str]:
    """The tree's broken rules once the file is applied over the database: unknown parents,
    cycles, members on a team with children, children's guarantees above their parent's."""
    rows = list(Team.objects.annotate(n=Count("members")).values_list("name", "parent__name", "n"))
    parents: dict[str, str | None] = {name: parent for name, parent, _ in rows}
    with_members = {name for name, _, n in rows if n}
    for spec in cfg.teams:
        parents[spec.name] = spec.parent
        if spec.members:
            with_members.add(spec.name)
    guaranteed = {(team, pool): g for team, pool, g in
                  Quota.objects.values_list("team__name", "pool__name", "guaranteed")}
    guaranteed.update({(q.team, q.pool): q.guaranteed for q in cfg.quotas})
    return [p.message for p in tree_errors(parents, with_members, guaranteed)]


def apply_parents(cfg: Config, teams: dict[str, Team], changes: list[str]) -> None:
    """Set the parent of each team the file names (no `parent`: a root)."""
    for spec in cfg.teams:
        team = teams[spec.name]
        parent = teams[spec.parent] if spec.parent is not None else None
        if team.parent_id != (parent.pk if parent is not None else None):
            old = team.parent.name if team.parent is not None else None
            team.parent = parent
            team.save(update_fields=["parent"])
            changes.append(f"~ team {spec.name}: parent {old!r} → {spec.parent!r}")


def team_export(team: Team, members: list[str]) -> dict[str, Any]:
    """One `teams:` entry; `parent` only where the team has one (flat files stay as they were)."""
    item: dict[str, Any] = {"name": team.name, "weight": team.weight, "members": members}
    if team.parent is not None:
        item["parent"] = team.parent.name
    return item
