"""`scheduler.fair_share_preemption` and its per-pool overrides under `pools[].scheduler`:
parsed with positions, applied idempotently, exported, and what the engine's passes read."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.utils import timezone

from allocation.config import ConfigError, parse_config
from allocation.engine.snapshot import read_pool
from allocation.models import PoolScheduling, SchedulerSettings
from inventory.models import Pool
from tests.config.applying import apply_file as _apply

FILE = """\
pools:
  - {name: train, scheduler: {fair_share_preemption: true, fair_share_preemption_interval_s: 300}}
  - {name: infer}
scheduler: {fair_share_preemption: false, fair_share_preemption_interval_s: 30}
"""


@pytest.mark.parametrize(("text", "message"), [
    ("pools:\n  - {name: p, scheduler: {fair_share_preemption: yes please}}\n",
     "c.yaml:2:50: fair_share_preemption must be true or false, got 'yes please'"),
    ("pools:\n  - {name: p, scheduler: {fair_share_preemption_interval_s: -5}}\n",
     "c.yaml:2:61: fair_share_preemption_interval_s must be ≥ 0, got -5"),
    ("pools:\n  - {name: p, scheduler: {pass_interval_s: 5}}\n",
     "c.yaml:2:44: unknown key 'pass_interval_s' (allowed: fair_share_preemption, "
     "fair_share_preemption_interval_s)"),
    ("pools:\n  - {name: p, scheduler: [on]}\n", "c.yaml:2:26: scheduler must be a mapping of"),
    ("scheduler: {fair_share_preemption: 1}\n",
     "c.yaml:1:36: fair_share_preemption must be true or false, got 1"),
])
def test_bad_values_are_refused_with_the_field_and_its_position(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "c.yaml")
    assert message in str(err.value)


@pytest.mark.django_db
def test_apply_is_idempotent_and_export_round_trips(tmp_path: Path) -> None:
    first = _apply(tmp_path, FILE)
    assert "+ scheduler settings of pool train" in first
    assert _apply(tmp_path, FILE).strip().endswith("no change")
    row = PoolScheduling.objects.get(pool__name="train")
    assert (row.fair_share_preemption, row.fair_share_preemption_interval_s) == (True, 300)
    assert not PoolScheduling.objects.filter(pool__name="infer").exists()
    out = StringIO()
    call_command("export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    pools = {p["name"]: p for p in exported["pools"]}
    assert pools["train"]["scheduler"] == {"fair_share_preemption": True, "fair_share_preemption_interval_s": 300}
    assert "scheduler" not in pools["infer"]
    assert exported["scheduler"]["fair_share_preemption"] is False
    assert exported["scheduler"]["fair_share_preemption_interval_s"] == 30
    again = tmp_path / "again.yaml"
    again.write_text(out.getvalue())
    assert _apply(tmp_path, out.getvalue()).strip().endswith("no change")


@pytest.mark.django_db
def test_a_key_left_out_of_a_pool_goes_back_to_the_scheduler_section(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    out = _apply(tmp_path, "pools:\n  - {name: train, scheduler: {fair_share_preemption: true}}\n")
    assert "~ pool train scheduler: fair_share_preemption_interval_s 300.0 → None" in out
    snapshot = read_pool(Pool.objects.get(name="train"), timezone.now()).snapshot
    view = snapshot.pools["train"]
    assert view.fair_share_preemption is True
    assert view.fair_share_preemption_interval_s == 30  # the scheduler section's


@pytest.mark.django_db
def test_a_refused_file_changes_nothing(tmp_path: Path) -> None:
    _apply(tmp_path, FILE)
    with pytest.raises(CommandError):
        _apply(tmp_path, "pools:\n  - {name: train, scheduler: {fair_share_preemption: false}}\n"
                         "  - {name: bad name}\n")
    assert PoolScheduling.objects.get(pool__name="train").fair_share_preemption is True


@pytest.mark.django_db
def test_the_engine_reads_the_effective_settings_and_the_last_preemption() -> None:
    train = Pool.objects.create(name="train")
    infer = Pool.objects.create(name="infer")
    SchedulerSettings.objects.create(pk=1, fair_share_preemption=True, fair_share_preemption_interval_s=45)
    last = timezone.now()
    PoolScheduling.objects.create(pool=train, fair_share_preemption=False, last_fair_share_preemption_at=last)
    now = timezone.now()
    train_view = read_pool(train, now).snapshot.pools["train"]
    assert (train_view.fair_share_preemption, train_view.fair_share_preemption_interval_s) == (False, 45)
    assert train_view.last_fair_share_preemption == pytest.approx(last.timestamp())
    infer_view = read_pool(infer, now).snapshot.pools["infer"]
    assert (infer_view.fair_share_preemption, infer_view.last_fair_share_preemption) == (True, None)
