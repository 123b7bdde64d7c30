"""The team tree in the team JSON: `parent`, `children` and `path` (root first), beside
allocation/api/team_serializers.py's TeamSerializer (kept there as it was)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from allocation.api.team_serializers import TeamSerializer
from allocation.models import Team


class TeamTreeSerializer(TeamSerializer):
    # A field named like Field.parent (the enclosing serializer): DRF's metaclass moves declared
    # fields off the class, so only the type checker minds.
    parent: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(  # type: ignore[assignment]
        slug_field="name", read_only=True, allow_null=True,
        help_text="The department above the team; null for a root.")
    children: serializers.ListField = serializers.ListField(
        child=serializers.CharField(), source="child_names", read_only=True,
        help_text="Names of the teams directly below it (a department); [] for a leaf team.")
    path: serializers.ListField = serializers.ListField(
        child=serializers.CharField(), source="tree_path", read_only=True,
        help_text="Team names from the root down to this team, itself included.")

    class Meta(TeamSerializer.Meta):
        fields = [*TeamSerializer.Meta.fields, "parent", "children", "path"]


def set_tree_fields(teams: list[Team]) -> None:
    """Set `child_names` and `tree_path` on each team: one query for the whole tree."""
    parent_of: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for name, parent in Team.objects.order_by("name").values_list("name", "parent__name"):
        parent_of[name] = parent
        if parent is not None:
            children.setdefault(parent, []).append(name)
    for team in teams:
        path: list[str] = [team.name]
        node: Any = parent_of.get(team.name)
        while node is not None and node not in path:
            path.append(node)
            node = parent_of.get(node)
        team.tree_path = path[::-1]
        team.child_names = children.get(team.name, [])
