"""`budgets:` and `prices:`: parsed with positions, references checked, applied idempotently,
exported so that the export applies as no change, pruned only with --prune."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from allocation.config import ConfigError, parse_config
from allocation.config.specs import BudgetSpec, PriceSpec
from allocation.models import Budget, Price
from tests.config.applying import apply_file as _apply

FILE = """\
pools: [{name: train}, {name: infer}]
teams: [{name: vision}, {name: nlp}]
budgets:
  - {team: vision, gpu_hours: 1000, period: month, action: block_new}
  - {team: vision, pool: train, gpu_hours: 200.5, period: week, action: lower_priority}
  - {team: nlp, gpu_hours: 5000, period: quarter}
prices:
  - {model: H100, per_gpu_hour: 2.5}
  - {model: "NVIDIA A100-SXM4-80GB", per_gpu_hour: 1.1}
"""


def test_budgets_and_prices_are_parsed_into_the_specs() -> None:
    cfg = parse_config(FILE, "c.yaml")
    assert cfg.budgets == [BudgetSpec("vision", None, 1000.0, "month", "block_new"),
                           BudgetSpec("vision", "train", 200.5, "week", "lower_priority"),
                           BudgetSpec("nlp", None, 5000.0, "quarter", "warn")]
    assert cfg.prices == [PriceSpec("H100", 2.5), PriceSpec("NVIDIA A100-SXM4-80GB", 1.1)]


@pytest.mark.parametrize(("text", "message"), [
    ("budgets:\n  - {team: a, gpu_hours: 0, period: month}\n",
     "c.yaml:2:26: gpu_hours must be a positive number, got 0"),
    ("budgets:\n  - {team: a, gpu_hours: 5, period: year}\n",
     "c.yaml:2:37: period must be one of week, month, quarter, got 'year'"),
    ("budgets:\n  - {team: a, gpu_hours: 5, period: week, action: stop}\n",
     "c.yaml:2:51: action must be one of warn, block_new, lower_priority, got 'stop'"),
    ("budgets:\n  - {team: a, period: week}\n", "c.yaml:2:5: missing required key 'gpu_hours'"),
    ("budgets:\n  - {team: a, gpu_hours: 5, period: week, hours: 3}\n",
     "c.yaml:2:50: unknown key 'hours' (allowed: action, gpu_hours, period, pool, team)"),
    ("budgets:\n  - {team: 'a b', gpu_hours: 5, period: week}\n", "c.yaml:2:12: team must be a non-empty name"),
    ("budgets:\n  - {team: a, gpu_hours: 5, period: week}\n  - {team: a, gpu_hours: 6, period: week}\n",
     "c.yaml:3:5: duplicate budget for team/pool/period ('a', None, 'week')"),
    ("budgets: {team: a}\n", "c.yaml:1:10: 'budgets' must be a list"),
    ("prices:\n  - {model: H100, per_gpu_hour: -1}\n", "c.yaml:2:33: per_gpu_hour must be ≥ 0, got -1"),
    ("prices:\n  - {model: H100, per_gpu_hour: cheap}\n", "c.yaml:2:33: per_gpu_hour must be a number, got 'cheap'"),
    ("prices:\n  - {model: '', per_gpu_hour: 1}\n", "c.yaml:2:13: model must be a non-empty string"),
    ("prices:\n  - {model: H100, per_gpu_hour: 1}\n  - {model: h100, per_gpu_hour: 2}\n",
     "c.yaml:3:5: duplicate price for model 'h100'"),
])
def test_bad_entries_are_refused_with_the_field_and_its_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_is_idempotent_and_export_round_trips(tmp_path: Path) -> None:
    first = _apply(tmp_path, FILE)
    assert "+ budget vision@*/month: 1000 GPU-hours, block_new" in first
    assert "+ budget vision@train/week: 200.5 GPU-hours, lower_priority" in first
    assert "+ price H100: 2.5 per GPU-hour" in first
    assert _apply(tmp_path, FILE).strip().endswith("no change")
    assert Budget.objects.count() == 3 and Price.objects.count() == 2
    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["budgets"] == [
        {"team": "nlp", "gpu_hours": 5000, "period": "quarter", "action": "warn"},
        {"team": "vision", "gpu_hours": 1000, "period": "month", "action": "block_new"},
        {"team": "vision", "pool": "train", "gpu_hours": 200.5, "period": "week", "action": "lower_priority"},
    ]  # by team, then pool (all pools first)
    assert exported["prices"] == [{"model": "H100", "per_gpu_hour": 2.5},
                                  {"model": "NVIDIA A100-SXM4-80GB", "per_gpu_hour": 1.1}]
    assert _apply(tmp_path, out.getvalue()).strip().endswith("no change")


@pytest.mark.django_db
def test_a_changed_limit_is_an_update_and_re_arms_the_warnings(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    Budget.objects.filter(team__name="nlp").update(warned_pct=80)
    out = _apply(tmp_path, FILE.replace("5000", "6000").replace("2.5", "3"))
    assert "~ budget nlp@*/quarter: gpu_hours 5000.0 → 6000.0" in out
    assert "~ price H100: 2.5 → 3 per GPU-hour" in out
    assert Budget.objects.get(team__name="nlp").warned_pct == 0


@pytest.mark.django_db
def test_unknown_teams_and_pools_are_refused_and_nothing_changes(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as err:
        _apply(tmp_path, "budgets:\n  - {team: ghost, pool: nowhere, gpu_hours: 5, period: week}\n")
    assert "team 'ghost' is not defined" in str(err.value) and "pool 'nowhere' is not defined" in str(err.value)
    assert not Budget.objects.exists()


@pytest.mark.django_db
def test_only_prune_deletes_what_the_file_leaves_out(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    smaller = ("budgets:\n  - {team: nlp, gpu_hours: 5000, period: quarter}\n"
               "prices:\n  - {model: H100, per_gpu_hour: 2.5}\n")
    assert _apply(tmp_path, smaller).strip().endswith("no change")
    out = _apply(tmp_path, smaller, "--prune")
    assert "- budget vision@*/month" in out and "- price NVIDIA A100-SXM4-80GB" in out
    assert Budget.objects.count() == 1 and list(Price.objects.values_list("model", flat=True)) == ["H100"]
