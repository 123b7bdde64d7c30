"""`manage.py apply -f`: idempotent, refuses bad files with positions, never half-applies."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.models import Quota, Team
from inventory.models import Pool, Source

REPO = Path(__file__).resolve().parents[2]
DEMO = str(REPO / "examples" / "demo.yaml")


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_applying_the_demo_twice_reports_no_change_the_second_time() -> None:
    first = run("apply", "-f", DEMO)
    assert "+ pool training" in first and "+ quota vision@training" in first
    second = run("apply", "-f", DEMO)
    assert second.strip() == f"{DEMO}: no change"
    assert Team.objects.get(name="vision").weight == 2
    assert Quota.objects.get(team__name="vision", pool__name="training").limit == 24


@pytest.mark.django_db
def test_a_changed_value_is_reported_as_a_diff(tmp_path: Path) -> None:
    run("apply", "-f", DEMO)
    changed = tmp_path / "c.yaml"
    changed.write_text("quotas:\n  - {team: vision, pool: training, guaranteed: 8, limit: 32}\n")
    out = run("apply", "-f", str(changed))
    assert "~ quota vision@training: limit 24 → 32" in out


@pytest.mark.django_db
def test_an_unknown_key_is_refused_with_its_position_and_nothing_changes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  - {name: p1}\nteams:\n  - {name: t1, wieght: 2}\n")
    with pytest.raises(CommandError) as err:
        run("apply", "-f", str(bad))
    assert f"{bad}:4:" in str(err.value) and "unknown key 'wieght'" in str(err.value)
    assert not Pool.objects.exists() and not Team.objects.exists()


@pytest.mark.django_db
def test_a_quota_naming_a_missing_team_is_refused_and_the_database_is_unchanged(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  - {name: p1}\nquotas:\n  - {team: ghosts, pool: p1, guaranteed: 1}\n")
    with pytest.raises(CommandError) as err:
        run("apply", "-f", str(bad))
    assert "team 'ghosts' is not defined" in str(err.value)
    assert not Pool.objects.exists()


@pytest.mark.django_db
def test_a_later_file_may_refer_to_a_pool_of_an_earlier_one(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("pools:\n  - {name: shared}\n")
    (tmp_path / "b.yaml").write_text(
        "teams:\n  - {name: t}\nquotas:\n  - {team: t, pool: shared, guaranteed: 2, limit: 4}\n")
    run("apply", "-f", str(tmp_path / "a.yaml"))
    run("apply", "-f", str(tmp_path / "b.yaml"))
    assert Quota.objects.get(team__name="t").pool.name == "shared"


@pytest.mark.parametrize("text, message", [
    ("quotas:\n  - {team: a, pool: b, guaranteed: -1}\n", "guaranteed must be an integer ≥ 0"),
    ("quotas:\n  - {team: a, pool: b, guaranteed: 4, limit: 2}\n", "limit 2 is below guaranteed 4"),
    ("teams:\n  - {name: a, weight: 0}\n", "weight must be a positive number"),
    ("teams:\n  - {name: a, weight: lots}\n", "weight must be a positive number"),
    ("priority_classes:\n  - {name: x, value: 1.5}\n", "value must be an integer"),
    ("sources:\n  - {name: s, kind: nope, pool: p}\n", "unknown source kind 'nope'"),
    ("sources:\n  - {name: s, kind: simulated, pool: p, hosts: -2}\n", "'hosts' must be a positive integer"),
    ("pools: [\n", "not valid YAML"),
    ("bogus: 1\n", "unknown key 'bogus'"),
])
def test_bad_numbers_and_shapes_are_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "f.yaml")
    assert message in str(err.value)
    assert "f.yaml:" in str(err.value)


@pytest.mark.django_db
def test_export_prints_what_apply_reads_and_round_trips() -> None:
    run("apply", "-f", DEMO)
    exported = run("export")
    cfg = parse_config(exported, "export.yaml")
    assert {t.name for t in cfg.teams} == {"vision", "nlp", "research"}
    assert {s.name for s in cfg.sources} == {"demo", "demo-a100"}
    from allocation.config.apply import config_apply

    assert config_apply(cfg) == []
    assert Source.objects.get(name="demo").config["gpus_per_host"] == 8
