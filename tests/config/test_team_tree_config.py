"""`teams[].parent` in `apply -f` and `export`: the tree's rules refused with their positions
(cycles, members on a team with children, children's guarantees above the parent's) or, over
the database, by name (unknown parents); applied all or nothing; export round-trips it."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.config.apply import config_apply, config_export
from allocation.models import Team

TREE = """pools:
  - {name: p}
teams:
  - {name: ml, parent: research, members: [ann]}
  - {name: research}
  - {name: vision, parent: research, weight: 2, members: [bob]}
  - {name: ops, members: [cid]}
quotas:
  - {team: research, pool: p, guaranteed: 8, limit: 12}
  - {team: ml, pool: p, guaranteed: 4}
  - {team: vision, pool: p, guaranteed: 4, limit: 10}
  - {team: ops, pool: p, guaranteed: 2}
"""


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_a_parent_is_read_into_the_team() -> None:
    cfg = parse_config(TREE)
    assert {t.name: t.parent for t in cfg.teams} == {"ml": "research", "research": None,
                                                     "vision": "research", "ops": None}


@pytest.mark.parametrize("text, message", [
    ("teams:\n  - {name: a, parent: a}\n", "f.yaml:2:23: team a cannot be its own parent"),
    ("teams:\n  - {name: a, parent: b}\n  - {name: b, parent: a}\n",
     "f.yaml:2:23: team a is in a cycle of parents (a → b → a)"),
    ("teams:\n  - {name: a, members: [x]}\n  - {name: b, parent: a}\n",
     "f.yaml:2:24: team a has members and child teams (b): members belong to leaf teams only"),
    ("teams:\n  - {name: a}\n  - {name: b, parent: a}\n"
     "quotas:\n  - {team: a, pool: p, guaranteed: 4}\n  - {team: b, pool: p, guaranteed: 6}\n",
     "f.yaml:5:36: the guarantees of team a's children in pool p add up to 6, above its own guarantee 4"),
    ("teams:\n  - {name: a, parent: 7}\n", "f.yaml:2:23: parent must be a non-empty name"),
])
def test_a_broken_tree_is_refused_with_its_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "f.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_export_apply_is_the_identity(tmp_path: Path) -> None:
    path = tmp_path / "tree.yaml"
    path.write_text(TREE)
    out = run("apply", "-f", str(path))
    assert "~ team ml: parent None → 'research'" in out
    assert Team.objects.get(name="vision").parent == Team.objects.get(name="research")
    exported = config_export()
    teams = {t["name"]: t for t in exported["teams"]}
    assert teams["ml"]["parent"] == "research" and "parent" not in teams["ops"]
    assert config_apply(parse_config(yaml.safe_dump(exported), "export.yaml")) == []
    assert config_export() == exported
    assert config_apply(parse_config(TREE)) == []  # applying the file again changes nothing


@pytest.mark.django_db
def test_an_unknown_parent_is_refused_and_nothing_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("teams:\n  - {name: a}\n  - {name: b, parent: nowhere}\n")
    with pytest.raises(CommandError, match="parent 'nowhere' of team b is not a defined team"):
        run("apply", "-f", str(path))
    assert not Team.objects.exists()


@pytest.mark.django_db
def test_a_later_file_may_not_put_a_team_with_members_under_a_parent_of_a_team_with_members(
        tmp_path: Path) -> None:
    first = tmp_path / "one.yaml"
    first.write_text("teams:\n  - {name: a, members: [x]}\n")
    run("apply", "-f", str(first))
    second = tmp_path / "two.yaml"
    second.write_text("teams:\n  - {name: b, parent: a}\n")
    with pytest.raises(CommandError, match="team a has members and child teams"):
        run("apply", "-f", str(second))
    assert not Team.objects.filter(name="b").exists()
    third = tmp_path / "three.yaml"  # a parent defined by an earlier file is fine
    third.write_text("teams:\n  - {name: dept}\n")
    run("apply", "-f", str(third))
    third.write_text("teams:\n  - {name: c, parent: dept}\n")
    run("apply", "-f", str(third))
    assert Team.objects.get(name="c").parent == Team.objects.get(name="dept")


def test_the_simulator_reads_the_tree_from_the_same_file(tmp_path: Path) -> None:
    from allocation.simulation.replay import load_sim_config, sim_config_from_dict

    path = tmp_path / "sim.yaml"
    path.write_text(TREE + "sources:\n  - {name: s, kind: simulated, pool: p, hosts: 1, gpus_per_host: 8}\n")
    assert load_sim_config(path).parents == {"ml": "research", "vision": "research"}
    assert sim_config_from_dict(yaml.safe_load(path.read_text())).parents == {"ml": "research",
                                                                               "vision": "research"}
