"""`pools[].queue_caps`: parsed with positions (whole numbers ≥ 1 or null; a key left out is its
default), applied idempotently (absent: the defaults), exported only where it differs from the
defaults, so that the export applies as no change."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.models import PoolScheduling
from allocation.policy.admission import DEFAULT_QUEUE_CAPS, QueueCaps
from tests.config.applying import apply_file as _apply

FILE = """\
pools:
  - {name: train, queue_caps: {pending_leases_per_team: 50, pending_gpus_per_team: 200}}
  - {name: infer, queue_caps: {pending_gpus_per_team: 16}}
  - {name: batch, queue_caps: {pending_leases_per_team: null}}
  - {name: plain}
"""


def test_the_caps_are_parsed_and_a_key_left_out_keeps_its_default() -> None:
    pools = {p.name: p.queue_caps for p in parse_config(FILE, "c.yaml").pools}
    assert pools == {"train": QueueCaps(50, 200), "infer": QueueCaps(1000, 16), "batch": QueueCaps(None, None),
                     "plain": DEFAULT_QUEUE_CAPS}
    assert QueueCaps(1000, None) == DEFAULT_QUEUE_CAPS


@pytest.mark.parametrize(("caps", "message"), [
    ("{pending_leases_per_team: 0}", "c.yaml:2:53: queue_caps.pending_leases_per_team must be an integer ≥ 1 or null, "
                                     "got 0"),
    ("{pending_gpus_per_team: -4}", "c.yaml:2:51: queue_caps.pending_gpus_per_team must be an integer ≥ 1 or null, "
                                    "got -4"),
    ("{pending_leases_per_team: 2.5}", "queue_caps.pending_leases_per_team must be an integer ≥ 1 or null, got 2.5"),
    ("{pending_leases_per_team: many}", "queue_caps.pending_leases_per_team must be an integer ≥ 1 or null, "
                                        "got 'many'"),
    ("{pending_leases_per_team: true}", "queue_caps.pending_leases_per_team must be an integer ≥ 1 or null, got True"),
    ("{pending_gpus_per_team: 3000000000}", "queue_caps.pending_gpus_per_team must be at most 2147483647"),
    ("{pending_leases: 5}", "c.yaml:2:44: unknown key 'pending_leases' (allowed: pending_gpus_per_team, "
                            "pending_leases_per_team)"),
    ("100", "c.yaml:2:27: queue_caps must be a mapping of pending_leases_per_team, pending_gpus_per_team"),
])
def test_bad_caps_are_refused_with_the_field_and_its_position(caps: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(f"pools:\n  - {{name: p, queue_caps: {caps}}}\n", "c.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_is_idempotent_and_export_round_trips(tmp_path: Path) -> None:
    first = _apply(tmp_path, FILE)
    assert "pool train queue_caps" in first
    assert _apply(tmp_path, FILE).strip().endswith("no change")
    caps = {row.pool.name: row.queue_caps for row in PoolScheduling.objects.select_related("pool")}
    assert caps == {"train": QueueCaps(50, 200), "infer": QueueCaps(1000, 16), "batch": QueueCaps(None, None)}
    out = StringIO()
    call_command("export", stdout=out)
    pools = {p["name"]: p for p in yaml.safe_load(out.getvalue())["pools"]}
    assert pools["train"]["queue_caps"] == {"pending_leases_per_team": 50, "pending_gpus_per_team": 200}
    assert pools["batch"]["queue_caps"] == {"pending_leases_per_team": None, "pending_gpus_per_team": None}
    assert "queue_caps" not in pools["plain"]
    assert _apply(tmp_path, out.getvalue()).strip().endswith("no change")


@pytest.mark.django_db
def test_leaving_it_out_restores_the_defaults(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    out = _apply(tmp_path, "pools:\n  - {name: train}\n")
    assert "~ pool train queue_caps" in out
    assert PoolScheduling.objects.get(pool__name="train").queue_caps == DEFAULT_QUEUE_CAPS


@pytest.mark.django_db
def test_a_refused_file_changes_nothing(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    with pytest.raises(CommandError):
        _apply(tmp_path, "pools:\n  - {name: train, queue_caps: {pending_leases_per_team: 5}}\n"
                         "  - {name: p, queue_caps: {pending_leases_per_team: 0}}\n")
    assert PoolScheduling.objects.get(pool__name="train").queue_caps == QueueCaps(50, 200)
