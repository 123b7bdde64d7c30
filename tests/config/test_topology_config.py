"""`topology:` (the levels above hosts, host label keys outermost first): parsed with positions,
applied idempotently, exported, and the export applies as no change."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from allocation.config import ConfigError, parse_config
from allocation.models import SchedulerSettings
from tests.config.applying import apply_file as _apply

FILE = "topology: [topology.kubernetes.io/zone, block, rack]\npools:\n  - {name: train}\n"


def test_levels_are_parsed_outermost_first() -> None:
    assert parse_config(FILE, "c.yaml").topology == ["topology.kubernetes.io/zone", "block", "rack"]
    assert parse_config("pools: []\n", "c.yaml").topology is None


@pytest.mark.parametrize(("text", "message"), [
    ("topology: rack\n", "c.yaml:1:11: topology must be a list of host label keys"),
    ("topology: [rack, rack]\n", "c.yaml:1:18: topology level 'rack' is listed twice"),
    ("topology: [nvlink]\n", "'nvlink' is a built-in level"),
    ("topology: [host, rack]\n", "'host' is a built-in level"),
    ("topology: [3]\n", "a topology level must be a host label key"),
    ("topology: ['']\n", "a topology level must be a host label key"),
])
def test_bad_levels_are_refused_with_their_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_is_idempotent_and_export_round_trips(tmp_path: Path) -> None:
    first = _apply(tmp_path, FILE)
    assert "~ topology: none -> topology.kubernetes.io/zone, block, rack" in first
    assert SchedulerSettings.current().topology == ["topology.kubernetes.io/zone", "block", "rack"]
    assert _apply(tmp_path, FILE).strip().endswith("no change")
    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["topology"] == ["topology.kubernetes.io/zone", "block", "rack"]
    assert _apply(tmp_path, out.getvalue()).strip().endswith("no change")
    assert "~ topology:" in _apply(tmp_path, "topology: []\n")
    assert SchedulerSettings.current().topology == []
