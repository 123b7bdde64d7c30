"""`sso:` of the configuration into rows, and back (allocation.config.apply calls these in its one
transaction).

As everywhere in `apply`, what the file names is created or updated and nothing else is deleted
unless `--prune`: a group the file maps is mapped to exactly the teams it lists; groups it does
not name keep their teams; admin groups it lists are added. With `--prune`, groups and admin
groups the file does not name are dropped. A file's `members:` of a team take a member that
single sign-on added over: from then on the config keeps them, whatever the provider's groups say.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from allocation.config import Config
from allocation.models import SsoGroupTeam, SsoMembership, SsoSettings, Team


def sso_reference_errors(cfg: Config, teams: set[str]) -> list[str]:
    """The mapped teams that neither the database nor the file define, each naming its entry."""
    if cfg.sso is None:
        return []
    return [f"sso.teams[{group!r}]: team {name!r} is not defined"
            for group, names in cfg.sso.teams.items() for name in names if name not in teams]


def apply_sso(cfg: Config, teams: dict[str, Team], changes: list[str]) -> None:
    """Write the file's `sso:` (nothing when it has none)."""
    if cfg.sso is None:
        return
    spec = cfg.sso
    row = SsoSettings.current()
    values = {"username_claim": spec.username_claim or row.username_claim,
              "groups_claim": spec.groups_claim or row.groups_claim,
              "admin_groups": sorted(set(row.admin_groups) | set(spec.admins))}
    diffs = [f"{key} {getattr(row, key)!r} → {value!r}" for key, value in values.items()
             if getattr(row, key) != value]
    adding = row._state.adding
    if adding or diffs:
        for key, value in values.items():
            setattr(row, key, value)
        row.save()
    if adding:
        changes.append(f"+ sso: user names from {row.username_claim}, groups from {row.groups_claim}, "
                       f"admin groups {', '.join(row.admin_groups) or 'none'}")
    elif diffs:
        changes.append("~ sso: " + ", ".join(diffs))
    current = _mapping()
    for group, names in spec.teams.items():
        want, have = set(names), current.get(group, set())
        for name in sorted(want - have):
            SsoGroupTeam.objects.create(group=group, team=teams[name])
            changes.append(f"+ sso group {group} → team {name}")
        _unmap(group, have - want, changes)


def prune_sso(cfg: Config) -> list[str]:
    """Drop the group mappings and admin groups the file does not name (all when it has no `sso:`)."""
    changes: list[str] = []
    named = cfg.sso.teams if cfg.sso is not None else {}
    for group, have in _mapping().items():
        if group not in named:
            _unmap(group, have, changes)
    row = SsoSettings.objects.filter(pk=1).first()
    keep = set(cfg.sso.admins) if cfg.sso is not None else set()
    if row is not None and set(row.admin_groups) - keep:
        dropped = sorted(set(row.admin_groups) - keep)
        row.admin_groups = sorted(set(row.admin_groups) & keep)
        row.save()
        changes.append(f"- sso admin groups {', '.join(dropped)}")
    return changes


def adopt_members(team: Team, members: Iterable[str], changes: list[str]) -> None:
    """Members the file names are the file's: single sign-on no longer ends their membership."""
    adopted = SsoMembership.objects.filter(team=team, user__username__in=list(members))
    for name in sorted(adopted.values_list("user__username", flat=True)):
        changes.append(f"~ member {name} of team {team.name}: kept by the config (was from single sign-on)")
    adopted.delete()


def sso_members(team_ids: Iterable[int]) -> dict[int, set[str]]:
    """Per team, the user names whose membership single sign-on made (export leaves them out:
    they are the provider's to give, and come back at the next login)."""
    out: dict[int, set[str]] = {}
    for team_id, name in SsoMembership.objects.filter(team_id__in=list(team_ids)).values_list(
            "team_id", "user__username"):
        out.setdefault(team_id, set()).add(name)
    return out


def export_sso() -> dict[str, Any] | None:
    """`sso:` as the file writes it; None when nothing was ever configured."""
    row = SsoSettings.objects.filter(pk=1).first()
    mapping = _mapping()
    if row is None and not mapping:
        return None
    row = row or SsoSettings.current()
    teams: dict[str, Any] = {group: (sorted(names)[0] if len(names) == 1 else sorted(names))
                             for group, names in sorted(mapping.items())}
    return {"username_claim": row.username_claim, "groups_claim": row.groups_claim, "teams": teams,
            "admins": list(row.admin_groups)}


def _mapping() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for group, name in SsoGroupTeam.objects.values_list("group", "team__name"):
        out.setdefault(group, set()).add(name)
    return out


def _unmap(group: str, names: set[str], changes: list[str]) -> None:
    for name in sorted(names):
        SsoGroupTeam.objects.filter(group=group, team__name=name).delete()
        changes.append(f"- sso group {group} → team {name}")
