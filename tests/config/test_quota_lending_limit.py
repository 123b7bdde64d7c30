"""`quotas[].lending_limit` in `apply -f` and `export`: validated with its position, applied
idempotently with the change reported, exported only when set, refused files change nothing."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.config.apply import config_apply, config_export
from allocation.models import Quota

BASE = "pools:\n  - {name: p}\nteams:\n  - {name: t}\n"


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def write(tmp_path: Path, quota: str, name: str = "q.yaml") -> str:
    path = tmp_path / name
    path.write_text(f"{BASE}quotas:\n  - {quota}\n")
    return str(path)


def test_a_lending_limit_is_read_into_the_quota() -> None:
    cfg = parse_config("quotas:\n  - {team: a, pool: b, guaranteed: 8, lending_limit: 2}\n")
    assert cfg.quotas[0].lending_limit == 2
    assert parse_config("quotas:\n  - {team: a, pool: b, guaranteed: 8}\n").quotas[0].lending_limit is None
    explicit_null = parse_config("quotas:\n  - {team: a, pool: b, guaranteed: 8, lending_limit: null}\n")
    assert explicit_null.quotas[0].lending_limit is None


@pytest.mark.parametrize("quota, message", [
    ("{team: a, pool: b, guaranteed: 4, lending_limit: 5}",
     "f.yaml:2:54: lending_limit 5 is above guaranteed 4: a team lends at most its guarantee"),
    ("{team: a, pool: b, lending_limit: 1}", "lending_limit 1 is above guaranteed 0"),
    ("{team: a, pool: b, guaranteed: 4, lending_limit: -1}",
     "f.yaml:2:54: lending_limit must be an integer ≥ 0 or null, got -1"),
    ("{team: a, pool: b, guaranteed: 4, lending_limit: two}", "lending_limit must be an integer"),
    ("{team: a, pool: b, guaranteed: 4, lending_limit: 1.5}", "lending_limit must be an integer"),
    ("{team: a, pool: b, guaranteed: 4, lending_limit: true}", "lending_limit must be an integer"),
])
def test_a_bad_lending_limit_is_refused_with_its_position(quota: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"quotas:\n  - {quota}\n", "f.yaml")
    assert message in str(err.value)
    assert err.value.errors == [e for e in err.value.errors if "lending_limit" in e]


def test_a_lending_limit_equal_to_the_guarantee_or_zero_is_accepted() -> None:
    text = ("quotas:\n  - {team: a, pool: b, guaranteed: 4, lending_limit: 4}\n"
            "  - {team: c, pool: b, guaranteed: 4, lending_limit: 0}\n")
    assert [q.lending_limit for q in parse_config(text).quotas] == [4, 0]


@pytest.mark.django_db
def test_apply_sets_a_lending_limit_reports_each_change_and_is_idempotent(tmp_path: Path) -> None:
    first = write(tmp_path, "{team: t, pool: p, guaranteed: 8, lending_limit: 2}")
    assert "+ quota t@p: guaranteed 8, limit none, lending limit 2" in run("apply", "-f", first)
    assert Quota.objects.get().lending_limit == 2
    assert run("apply", "-f", first).strip() == f"{first}: no change"

    changed = write(tmp_path, "{team: t, pool: p, guaranteed: 8, lending_limit: 6}", "c.yaml")
    assert "~ quota t@p: lending_limit 2 → 6" in run("apply", "-f", changed)
    cleared = write(tmp_path, "{team: t, pool: p, guaranteed: 8}", "n.yaml")
    assert "~ quota t@p: lending_limit 6 → None" in run("apply", "-f", cleared)
    assert Quota.objects.get().lending_limit is None


@pytest.mark.django_db
def test_lowering_the_guarantee_with_the_lending_limit_in_one_file_applies(tmp_path: Path) -> None:
    run("apply", "-f", write(tmp_path, "{team: t, pool: p, guaranteed: 8, lending_limit: 8}"))
    out = run("apply", "-f", write(tmp_path, "{team: t, pool: p, guaranteed: 2, lending_limit: 1}", "l.yaml"))
    assert "guaranteed 8 → 2" in out and "lending_limit 8 → 1" in out
    assert (Quota.objects.get().guaranteed, Quota.objects.get().lending_limit) == (2, 1)


@pytest.mark.django_db
def test_a_refused_lending_limit_changes_nothing_already_applied(tmp_path: Path) -> None:
    run("apply", "-f", write(tmp_path, "{team: t, pool: p, guaranteed: 8, lending_limit: 2}"))
    bad = write(tmp_path, "{team: t, pool: p, guaranteed: 1, lending_limit: 2}", "bad.yaml")
    with pytest.raises(CommandError) as err:
        run("apply", "-f", bad)
    assert f"{bad}:6:" in str(err.value) and "lending_limit 2 is above guaranteed 1" in str(err.value)
    quota = Quota.objects.get()
    assert (quota.guaranteed, quota.lending_limit) == (8, 2)


@pytest.mark.django_db
def test_export_writes_the_lending_limit_only_when_set_and_round_trips(tmp_path: Path) -> None:
    run("apply", "-f", write(tmp_path, "{team: t, pool: p, guaranteed: 8, limit: 12, lending_limit: 3}"))
    other = tmp_path / "p2.yaml"
    other.write_text("pools:\n  - {name: p2}\nquotas:\n  - {team: t, pool: p2, guaranteed: 4}\n")
    run("apply", "-f", str(other))
    quotas = {q["pool"]: q for q in yaml.safe_load(run("export"))["quotas"]}
    assert quotas["p"] == {"team": "t", "pool": "p", "guaranteed": 8, "limit": 12, "lending_limit": 3}
    assert "lending_limit" not in quotas["p2"]
    cfg = parse_config(yaml.safe_dump(config_export()), "export.yaml")
    assert config_apply(cfg) == []


def test_the_simulator_reads_the_lending_limit_from_the_same_file(tmp_path: Path) -> None:
    from allocation.simulation.replay import load_sim_config, sim_config_from_dict

    path = tmp_path / "sim.yaml"
    path.write_text("quotas:\n  - {team: t, pool: p, guaranteed: 8, lending_limit: 2}\n"
                    "sources:\n  - {name: s, kind: simulated, pool: p, hosts: 1, gpus_per_host: 8}\n")
    assert load_sim_config(path).quotas[("t", "p")].lending_limit == 2
    as_dict = sim_config_from_dict(yaml.safe_load(path.read_text()))
    assert as_dict.quotas[("t", "p")].lending_limit == 2
