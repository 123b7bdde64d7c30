"""`pools[].idle_reclaim` and `priority_classes[].idle_reclaim`: parsed with positions, applied
idempotently (absent or null turns it off), exported so that the export applies as no change."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.models import PoolScheduling, PriorityClass
from allocation.policy.idle import IdleReclaim
from tests.config.applying import apply_file as _apply

FILE = """\
pools:
  - {name: train, idle_reclaim: {below_util_pct: 5, for_s: 1800, warn_s: 600}}
  - {name: infer}
priority_classes:
  - {name: default, value: 0}
  - {name: notebook, value: -5, idle_reclaim: {below_util_pct: 2.5, for_s: 600, warn_s: 0}}
"""


def test_the_rules_are_parsed_into_the_specs() -> None:
    cfg = parse_config(FILE, "c.yaml")
    pools = {p.name: p for p in cfg.pools}
    assert pools["train"].idle_reclaim == IdleReclaim(5, 1800, 600)
    assert pools["infer"].idle_reclaim is None
    classes = {c.name: c for c in cfg.priority_classes}
    assert classes["notebook"].idle_reclaim == IdleReclaim(2.5, 600, 0)
    assert classes["default"].idle_reclaim is None


@pytest.mark.parametrize(("text", "message"), [
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 101, for_s: 60, warn_s: 0}}\n",
     "c.yaml:2:46: idle_reclaim.below_util_pct must be within [0, 100], got 101"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: -1, for_s: 60, warn_s: 0}}\n",
     "c.yaml:2:46: idle_reclaim.below_util_pct must be within [0, 100], got -1"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 5, for_s: 0, warn_s: 0}}\n",
     "c.yaml:2:56: idle_reclaim.for_s must be a positive number, got 0"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 5, for_s: 60, warn_s: -1}}\n",
     "c.yaml:2:68: idle_reclaim.warn_s must be ≥ 0, got -1"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 5, for_s: soon, warn_s: 0}}\n",
     "c.yaml:2:56: idle_reclaim.for_s must be a positive number, got 'soon'"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 5, for_s: 60}}\n",
     "c.yaml:2:29: missing required key 'warn_s'"),
    ("pools:\n  - {name: p, idle_reclaim: {below_util_pct: 5, for_s: 60, warn_s: 0, after: 1}}\n",
     "c.yaml:2:78: unknown key 'after' (allowed: below_util_pct, for_s, warn_s)"),
    ("pools:\n  - {name: p, idle_reclaim: 5}\n", "c.yaml:2:29: idle_reclaim must be a mapping of"),
    ("priority_classes:\n  - {name: c, idle_reclaim: {below_util_pct: 5, for_s: -3, warn_s: 0}}\n",
     "c.yaml:2:56: idle_reclaim.for_s must be a positive number, got -3"),
])
def test_bad_values_are_refused_with_the_field_and_its_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_is_idempotent_and_export_round_trips(tmp_path: Path) -> None:
    first = _apply(tmp_path, FILE)
    assert "pool train idle_reclaim" in first
    assert _apply(tmp_path, FILE).strip().endswith("no change")
    assert PoolScheduling.objects.get(pool__name="train").idle_reclaim == IdleReclaim(5, 1800, 600)
    assert not PoolScheduling.objects.filter(pool__name="infer").exists()
    assert PriorityClass.objects.get(name="notebook").idle_reclaim == IdleReclaim(2.5, 600, 0)
    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    pools = {p["name"]: p for p in exported["pools"]}
    assert pools["train"]["idle_reclaim"] == {"below_util_pct": 5, "for_s": 1800, "warn_s": 600}
    assert "idle_reclaim" not in pools["infer"]
    classes = {c["name"]: c for c in exported["priority_classes"]}
    assert classes["notebook"]["idle_reclaim"] == {"below_util_pct": 2.5, "for_s": 600, "warn_s": 0}
    assert "idle_reclaim" not in classes["default"]
    assert _apply(tmp_path, out.getvalue()).strip().endswith("no change")


@pytest.mark.django_db
def test_leaving_it_out_turns_it_off(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    out = _apply(tmp_path, "pools:\n  - {name: train}\npriority_classes:\n  - {name: notebook, value: -5}\n")
    assert "~ pool train idle_reclaim" in out and "~ priority class notebook" in out
    assert PoolScheduling.objects.get(pool__name="train").idle_reclaim is None
    assert PriorityClass.objects.get(name="notebook").idle_reclaim is None


@pytest.mark.django_db
def test_a_refused_file_changes_nothing(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    with pytest.raises(CommandError):
        _apply(tmp_path, "pools:\n  - {name: train, idle_reclaim: {below_util_pct: 1, for_s: 60, warn_s: 0}}\n"
                         "  - {name: p, idle_reclaim: {below_util_pct: 500, for_s: 60, warn_s: 0}}\n")
    assert PoolScheduling.objects.get(pool__name="train").idle_reclaim == IdleReclaim(5, 1800, 600)
