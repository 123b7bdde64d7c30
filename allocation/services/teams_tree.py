"""The team tree's rules on writes outside `apply` (allocation/policy/tree_rules.py holds them): a
quota's new guarantee must keep, in its pool, its children's guarantees within it and its
siblings' and its own within its parent's."""

from __future__ import annotations

from allocation.models import Quota, Team
from allocation.policy.tree_rules import tree_errors
from core.errors import DomainError


def quota_tree_check(*, quota: Quota, guaranteed: int) -> None:
    """Raise DomainError (code `invalid_quota`, `guaranteed` named in `details`) when giving
    `quota` this guarantee would break the tree's guarantee rule in its pool. A flat team (no
    parent, no children) costs one query."""
    team = quota.team
    related = {team.pk, *Team.objects.filter(parent_id=team.pk).values_list("pk", flat=True)}
    if team.parent_id is not None:
        related.add(team.parent_id)
        related.update(Team.objects.filter(parent_id=team.parent_id).values_list("pk", flat=True))
    if related == {team.pk}:
        return
    rows = Team.objects.filter(pk__in=related).values_list("name", "parent__name")
    parents = {name: parent if parent is not None else None for name, parent in rows}
    guarantees = {(name, quota.pool.name): g for name, g in Quota.objects.filter(
        team_id__in=related, pool_id=quota.pool_id).values_list("team__name", "guaranteed")}
    guarantees[(team.name, quota.pool.name)] = guaranteed
    known = set(parents) | {p for p in parents.values() if p is not None}
    problems = [p for p in tree_errors(parents, set(), guarantees, known=known) if p.key == "guaranteed"]
    if problems:
        message = problems[0].message
        raise DomainError(message, code="invalid_quota", details={"guaranteed": [message]})
