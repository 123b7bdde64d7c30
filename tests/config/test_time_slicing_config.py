"""`pools[].share_across_teams` and an ssh host's `time_slicing`: parsed with positions,
applied idempotently, exported, and refused whole when wrong."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from inventory.models import Pool, Source
from tests.support.sshd import new_ed25519

_, HOST_KEY = new_ed25519()


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def ssh_source(time_slicing: object) -> str:
    return ("sources:\n  - name: lab\n    kind: ssh\n    pool: ts\n    user: gpu\n"
            "    key_file: /etc/gpupool/id\n"
            f"    hosts:\n      - {{address: 10.0.0.5, host_key: \"{HOST_KEY}\", time_slicing: {time_slicing}}}\n")


@pytest.mark.parametrize(("text", "message"), [
    ("pools:\n  - {name: ts, share_across_teams: yes please}\n",
     "f.yaml:2:36: share_across_teams must be true or false, got 'yes please'"),
    ("pools:\n  - {name: ts, share_across_teams: 1}\n", "share_across_teams must be true or false, got 1"),
    (ssh_source(-2), "hosts[0]: time_slicing must be an integer from 1 to 128 (replicas per GPU), got -2"),
    (ssh_source(0), "time_slicing must be an integer from 1 to 128"),
    (ssh_source(2.5), "time_slicing must be an integer from 1 to 128 (replicas per GPU), got 2.5"),
])
def test_a_bad_setting_is_refused_naming_the_field_and_its_place(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "f.yaml")
    assert message in str(err.value) and "f.yaml:" in str(err.value)


@pytest.mark.django_db
def test_sharing_across_teams_is_applied_once_exported_and_reset_by_a_file_without_it(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text("pools:\n  - {name: ts, share_across_teams: true}\n" + ssh_source(4))
    assert "+ pool ts" in run("apply", "-f", str(path))
    assert Pool.objects.get(name="ts").share_across_teams is True
    assert Source.objects.get(name="lab").config["hosts"][0]["time_slicing"] == 4
    assert run("apply", "-f", str(path)).strip() == f"{path}: no change"
    exported = parse_config(run("export"), "export.yaml")
    assert [(p.name, p.share_across_teams) for p in exported.pools] == [("ts", True)]
    path.write_text("pools:\n  - {name: ts}\n")  # absent: the default, as for every other key
    assert "~ pool ts: share_across_teams True → False" in run("apply", "-f", str(path))


@pytest.mark.django_db
def test_a_refused_file_changes_nothing(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("pools:\n  - {name: ts}\n" + ssh_source(4))
    run("apply", "-f", str(good))
    bad.write_text("pools:\n  - {name: ts, share_across_teams: true}\n" + ssh_source(-1))
    with pytest.raises(CommandError) as err:
        run("apply", "-f", str(bad))
    assert "time_slicing must be an integer" in str(err.value)
    assert Pool.objects.get(name="ts").share_across_teams is False
    assert Source.objects.get(name="lab").config["hosts"][0]["time_slicing"] == 4
