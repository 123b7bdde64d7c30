"""The `sso:` section: how single sign-on's claims become gpupool users, team members and pool
admins (docs/sso.md). Pure, like every check of the file; whether the teams exist is checked by
allocation.config.apply against the database and the file.

```yaml
sso:
  username_claim: preferred_username   # or email; names the user at the first login
  groups_claim: groups                 # a dotted name reaches into nested claims
  teams: {ml-vision: vision, ml-all: [vision, nlp]}   # provider group → team(s)
  admins: [gpu-admins]                 # members of these groups are pool admins
```
"""

from __future__ import annotations

from typing import Any

from allocation.config.positions import Checker
from allocation.config.specs import Config, SsoSpec

KEYS = {"username_claim", "groups_claim", "teams", "admins"}
MAX_CLAIM = 200
MAX_GROUP = 255


def check_sso(chk: Checker, value: Any, cfg: Config) -> None:
    """Record `sso:` in `cfg.sso`, or its problems in `chk`, each naming the entry at fault."""
    if value is None:
        return
    if not isinstance(value, dict):
        chk.error(("sso",), "sso must be a mapping of " + ", ".join(sorted(KEYS)))
        return
    if not chk.keys(("sso",), value, KEYS, set()):
        return
    errors = len(chk.errors)
    username = _claim(chk, value, "username_claim")
    groups = _claim(chk, value, "groups_claim")
    teams = _teams(chk, value.get("teams", {}))
    admins = _groups(chk, ("sso", "admins"), value.get("admins", []), "sso.admins")
    if len(chk.errors) == errors:
        cfg.sso = SsoSpec(username, groups, teams, admins)


def _claim(chk: Checker, value: dict[str, Any], key: str) -> str | None:
    claim = value.get(key)
    if claim is None:
        return None
    if not isinstance(claim, str) or not claim.strip() or len(claim) > MAX_CLAIM:
        chk.error(("sso", key), f"sso.{key} must be a claim name (a non-empty string of at most {MAX_CLAIM}), "
                                f"got {claim!r}")
        return None
    return claim.strip()


def _teams(chk: Checker, value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict):
        chk.error(("sso", "teams"), "sso.teams must be a mapping of provider group → team name (or list of them)")
        return {}
    teams: dict[str, tuple[str, ...]] = {}
    for group, names in value.items():
        path, entry = ("sso", "teams", group), f"sso.teams[{group!r}]"
        if not _group_ok(chk, path, group, entry):
            continue
        listed = names if isinstance(names, list) else [names]
        if not listed:
            chk.error(path, f"{entry} names no team")
            continue
        good = [chk.name((*path, i) if isinstance(names, list) else path, name, f"{entry}: team name")
                for i, name in enumerate(listed)]
        if all(good):
            teams[group] = tuple(dict.fromkeys(str(name) for name in good))
    return teams


def _groups(chk: Checker, path: tuple[Any, ...], value: Any, entry: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        chk.error(path, f"{entry} must be a list of provider group names")
        return ()
    good = [group for i, group in enumerate(value) if _group_ok(chk, (*path, i), group, f"{entry}[{i}]")]
    return tuple(dict.fromkeys(good))


def _group_ok(chk: Checker, path: tuple[Any, ...], group: Any, entry: str) -> bool:
    if not isinstance(group, str) or not group or len(group) > MAX_GROUP:
        chk.error(path, f"{entry}: a group name must be a non-empty string of at most {MAX_GROUP}, got {group!r}")
        return False
    return True
