"""`sso:` in the configuration: parsed with positions (each error names its entry), applied
idempotently and as everywhere in `apply` (what the file names; `--prune` for the rest), exported
so that the export applies as no change, and a team's `members:` taking over a member single
sign-on had added."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, SsoSpec, parse_config
from allocation.models import SsoGroupTeam, SsoMembership, SsoSettings, Team
from tests.config.applying import apply_file

pytestmark = pytest.mark.django_db

FILE = """\
teams:
  - {name: vision}
  - {name: nlp}
sso:
  username_claim: email
  groups_claim: realm_access.roles
  teams:
    ml-vision: vision
    ml-all: [vision, nlp]
  admins: [gpu-admins]
"""


def _mapping() -> set[tuple[str, str]]:
    return set(SsoGroupTeam.objects.values_list("group", "team__name"))


def test_the_section_is_parsed_into_its_spec() -> None:
    assert parse_config(FILE, "c.yaml").sso == SsoSpec(
        "email", "realm_access.roles", {"ml-vision": ("vision",), "ml-all": ("vision", "nlp")}, ("gpu-admins",))
    assert parse_config("teams: []\n", "c.yaml").sso is None


@pytest.mark.parametrize(("text", "message"), [
    ("sso: {teams: {ml-vision: 'vis ion'}}\n",
     "c.yaml:1:26: sso.teams['ml-vision']: team name must be a non-empty name of letters, digits"),
    ("sso:\n  teams:\n    ml-all: [vision, '']\n",
     "c.yaml:3:22: sso.teams['ml-all']: team name must be a non-empty name"),
    ("sso: {teams: {ml-vision: []}}\n", "c.yaml:1:26: sso.teams['ml-vision'] names no team"),
    ("sso: {teams: [ml-vision]}\n", "c.yaml:1:14: sso.teams must be a mapping of provider group → team name"),
    ("sso: {admins: gpu-admins}\n", "c.yaml:1:15: sso.admins must be a list of provider group names"),
    ("sso: {admins: [gpu-admins, '']}\n", "c.yaml:1:28: sso.admins[1]: a group name must be a non-empty string"),
    ("sso: {username_claim: 7}\n", "c.yaml:1:23: sso.username_claim must be a claim name"),
    ("sso: {group_claim: groups}\n", "c.yaml:1:20: unknown key 'group_claim' (allowed: admins, groups_claim, "
                                     "teams, username_claim)"),
    ("sso: [groups]\n", "c.yaml:1:6: sso must be a mapping of admins, groups_claim, teams, username_claim"),
])
def test_bad_values_are_refused_naming_the_entry_and_its_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert message in str(err.value)


def test_a_group_mapped_to_an_undefined_team_is_refused_and_nothing_is_applied(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as err:
        apply_file(tmp_path, "teams: [{name: vision}]\nsso: {teams: {ml-vision: vision, ml-nlp: nlp}}\n")
    assert "sso.teams['ml-nlp']: team 'nlp' is not defined" in str(err.value)
    assert not Team.objects.exists() and not SsoGroupTeam.objects.exists()


def test_applying_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    first = apply_file(tmp_path, FILE)
    assert "+ sso: user names from email, groups from realm_access.roles, admin groups gpu-admins" in first
    assert "+ sso group ml-all → team nlp" in first
    assert _mapping() == {("ml-vision", "vision"), ("ml-all", "vision"), ("ml-all", "nlp")}
    assert apply_file(tmp_path, FILE).strip().endswith("no change")


def test_a_group_the_file_names_gets_exactly_its_teams_and_others_stay_unless_pruned(tmp_path: Path) -> None:
    apply_file(tmp_path, FILE)
    changed = apply_file(tmp_path, "sso: {teams: {ml-all: nlp}, admins: [ops]}\n")
    assert "- sso group ml-all → team vision" in changed
    assert _mapping() == {("ml-vision", "vision"), ("ml-all", "nlp")}  # ml-vision: not named, kept
    assert SsoSettings.current().admin_groups == ["gpu-admins", "ops"]
    assert SsoSettings.current().username_claim == "email"  # not named: kept

    pruned = apply_file(tmp_path, "teams: [{name: vision}, {name: nlp}]\nsso: {teams: {ml-all: nlp}, "
                                  "admins: [ops]}\n", "--prune")
    assert "- sso group ml-vision → team vision" in pruned and "- sso admin groups gpu-admins" in pruned
    assert _mapping() == {("ml-all", "nlp")}


def test_the_export_applies_as_no_change_and_leaves_out_memberships_from_sso(tmp_path: Path,
                                                                             make_user: object) -> None:
    apply_file(tmp_path, FILE + "  # and a member by config\n")
    apply_file(tmp_path, "teams: [{name: vision, members: [carol]}]\n")
    dave = make_user("dave", teams=("vision",))  # type: ignore[operator]
    SsoMembership.objects.create(user=dave, team=Team.objects.get(name="vision"))  # as a login makes it

    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["sso"] == {"username_claim": "email", "groups_claim": "realm_access.roles",
                               "teams": {"ml-all": ["nlp", "vision"], "ml-vision": "vision"},
                               "admins": ["gpu-admins"]}
    vision = next(t for t in exported["teams"] if t["name"] == "vision")
    assert vision["members"] == ["carol"]  # dave's membership is the provider's to give
    assert apply_file(tmp_path, out.getvalue()).strip().endswith("no change")


def test_a_member_the_file_names_is_the_configs_from_then_on(tmp_path: Path, make_user: object) -> None:
    apply_file(tmp_path, FILE)
    dave = make_user("dave", teams=("vision",))  # type: ignore[operator]
    SsoMembership.objects.create(user=dave, team=Team.objects.get(name="vision"))

    changed = apply_file(tmp_path, "teams: [{name: vision, members: [dave]}]\n")
    assert "~ member dave of team vision: kept by the config (was from single sign-on)" in changed
    assert not SsoMembership.objects.exists()
    assert apply_file(tmp_path, "teams: [{name: vision, members: [dave]}]\n").strip().endswith("no change")
