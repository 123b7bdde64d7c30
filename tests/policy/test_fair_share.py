"""Fair share among teams competing for free capacity, and the decayed-usage ledger."""

from __future__ import annotations

import math

import pytest

from allocation.policy.fair import schedule
from allocation.policy.fairshare import (
    decay,
    entitled_allocation,
    ledger_update,
    rebuild_ledger,
    team_share,
)
from tests.policy.factories import fleet, held_by_team, quotas, req, run, snap

GPUS = fleet(2)
DAY = 86400.0


def _backlog(team: str, n: int = 20) -> list:
    return [req(f"{team}{i}", team, 1, created_at=i) for i in range(n)]


def test_weights_three_to_one_split_sixteen_free_gpus_twelve_to_four() -> None:
    pending = _backlog("a") + _backlog("b")
    d = schedule(snap(GPUS, pending, teams={"a": 3, "b": 1}))
    assert held_by_team(d, pending) == {"a": 12, "b": 4}


def test_equal_weights_split_evenly_whatever_the_arrival_order() -> None:
    pending = [req(f"a{i}", "a", 1, created_at=i) for i in range(20)] + \
        [req(f"b{i}", "b", 1, created_at=100 + i) for i in range(20)]
    d = schedule(snap(GPUS, pending))
    assert held_by_team(d, pending) == {"a": 8, "b": 8}


def test_gpus_already_held_count_towards_the_share() -> None:
    running = [run(f"r{i}", "a", [g.id]) for i, g in enumerate(GPUS[:6])]
    pending = _backlog("a") + _backlog("b")
    d = schedule(snap(GPUS, pending, running))
    assert held_by_team(d, pending) == {"a": 2, "b": 8}  # b catches up to 6, then 8:8


def test_yesterdays_heavy_user_yields_to_a_team_that_used_nothing() -> None:
    half_life = 7 * DAY
    usage = ledger_update(0.0, 0.0, DAY, 16, half_life)  # a held 16 GPUs for a day
    pending = _backlog("a") + _backlog("b")
    d = schedule(snap(GPUS, pending, usage={"a": usage}, half_life_s=half_life))
    split = held_by_team(d, pending)
    assert split["b"] > split.get("a", 0)


def test_guaranteed_requests_go_before_fair_share() -> None:
    pending = _backlog("a") + _backlog("b")
    d = schedule(snap(GPUS, pending, teams={"a": 1, "b": 100}, quota=quotas(("a", 6, None))))
    assert held_by_team(d, pending)["a"] >= 6


def test_decay_halves_per_half_life() -> None:
    assert decay(100.0, 10.0, 10.0) == pytest.approx(50.0)
    assert decay(100.0, 0.0, 10.0) == 100.0
    assert decay(100.0, 5.0, math.inf) == 100.0
    assert decay(100.0, 5.0, 0.0) == 0.0


def test_the_ledger_does_not_depend_on_how_often_it_is_updated() -> None:
    once = ledger_update(10.0, 0.0, 3600.0, 4, DAY)
    stepwise = 10.0
    for k in range(60):
        stepwise = ledger_update(stepwise, k * 60.0, (k + 1) * 60.0, 4, DAY)
    assert stepwise == pytest.approx(once)


def test_the_ledger_rebuilt_from_intervals_matches_the_running_ledger() -> None:
    intervals = [("a", 0.0, 3600.0, 2), ("a", 1800.0, None, 4), ("b", 100.0, 200.0, 8)]
    rebuilt = rebuild_ledger(intervals, 7200.0, DAY)
    a = ledger_update(0.0, 0.0, 1800.0, 2, DAY)
    a = ledger_update(a, 1800.0, 3600.0, 6, DAY)
    a = ledger_update(a, 3600.0, 7200.0, 4, DAY)
    assert rebuilt["a"] == pytest.approx(a)
    b = ledger_update(ledger_update(0.0, 100.0, 200.0, 8, DAY), 200.0, 7200.0, 0, DAY)
    assert rebuilt["b"] == pytest.approx(b)


def test_a_long_held_allocation_weighs_as_much_as_the_present_one() -> None:
    steady = ledger_update(0.0, 0.0, 1000 * DAY, 8, DAY)
    assert team_share(steady, 0, 1.0, DAY) == pytest.approx(8.0)
    assert team_share(0.0, 8, 2.0, DAY) == pytest.approx(4.0)
    assert team_share(0.0, 8, 0.0, DAY) == math.inf


def test_entitlement_water_fills_by_weight_above_guarantees() -> None:
    fair = entitled_allocation(16, {"a": 20, "b": 20}, {}, {}, {"a": 3, "b": 1})
    assert fair == pytest.approx({"a": 12, "b": 4})
    fair = entitled_allocation(16, {"a": 20, "b": 2}, {}, {}, {"a": 1, "b": 1})
    assert fair == pytest.approx({"a": 14, "b": 2})
    fair = entitled_allocation(16, {"a": 20, "b": 20}, {"b": 12}, {"a": None, "b": None},
                               {"a": 1, "b": 1})
    assert fair == pytest.approx({"a": 4, "b": 12})
    fair = entitled_allocation(16, {"a": 20, "b": 20}, {}, {"a": 3}, {"a": 1, "b": 1})
    assert fair == pytest.approx({"a": 3, "b": 13})
