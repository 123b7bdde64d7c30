"""Idle reclaim in `simulate`: the `util_pct` trace column, the live rule replayed, the count in
`preemptions_by_cause["idle"]` (every other key kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocation.policy.idle import IdleReclaim
from allocation.policy.replay import Job
from allocation.policy.types import PoolView, PriorityClassView
from allocation.simulation.replay import (
    TraceError,
    fleet_from_config,
    load_sim_config,
    load_trace,
    sim_config_from_dict,
    simulate,
    write_trace,
)

RULE = IdleReclaim(below_util_pct=5, for_s=600, warn_s=120)
CLASSES = {"default": PriorityClassView("default", 0, grace_s=30)}


def _fleet(gpus: int = 4) -> tuple:
    return fleet_from_config({"sources": [{"name": "sim", "kind": "simulated", "pool": "p",
                                           "hosts": 1, "gpus_per_host": gpus}]})


def _run(jobs: list[Job], *, rule: IdleReclaim | None = RULE, classes=CLASSES) -> dict:
    return simulate(jobs, _fleet(), {"a": 1, "b": 1}, {}, classes, pools={"p": PoolView("p", idle_reclaim=rule)})


def test_idle_jobs_are_reclaimed_busy_short_and_unmeasured_ones_are_not() -> None:
    jobs = [Job(0, 0, "a", 1, 3600, util_pct=1.0),  # idle all along: warned at 600, reclaimed at 720
            Job(1, 0, "a", 1, 3600, util_pct=80.0),  # busy
            Job(2, 0, "b", 1, 3600),  # no telemetry: never
            Job(3, 0, "b", 1, 700, util_pct=0.0)]  # idle, but done before its reclaim at 720
    result = _run(jobs)
    assert result["preemptions_by_cause"] == {"priority": 0, "reclaim": 0, "fair_share": 0, "idle": 1}
    assert result["preemptions"] == 1
    assert result["jobs"] == 4 and result["makespan_s"] == 3600
    # The idle job ran 720 s plus its 30 s grace: its GPU-time is what it held.
    assert result["teams"]["a"]["gpu_hours"] == pytest.approx((750 + 3600) / 3600, abs=1e-3)


def test_without_a_rule_nothing_is_reclaimed_and_the_keys_stay() -> None:
    result = _run([Job(0, 0, "a", 1, 3600, util_pct=1.0)], rule=None)
    assert result["preemptions_by_cause"] == {"priority": 0, "reclaim": 0, "fair_share": 0, "idle": 0}


def test_a_reclaimed_idle_job_frees_its_gpus_for_a_waiting_one() -> None:
    jobs = [Job(0, 0, "a", 4, 7200, util_pct=2.0), Job(1, 10, "b", 4, 100, util_pct=90.0)]
    with_rule, without = _run(jobs), _run(jobs, rule=None)
    assert with_rule["preemptions_by_cause"]["idle"] == 1
    # b waits for the reclaim (720 s and the 30 s grace) instead of the whole 7200 s.
    assert with_rule["wait_s"]["max"] == pytest.approx(740)
    assert without["wait_s"]["max"] == pytest.approx(7190)
    assert with_rule["makespan_s"] == 850


def test_a_class_rule_wins_over_the_pools() -> None:
    classes = {"default": PriorityClassView("default", 0, idle_reclaim=IdleReclaim(5, 10_000, 0))}
    assert _run([Job(0, 0, "a", 1, 3600, util_pct=1.0)], classes=classes)["preemptions_by_cause"]["idle"] == 0
    classes = {"default": PriorityClassView("default", 0, idle_reclaim=IdleReclaim(5, 60, 0))}
    result = simulate([Job(0, 0, "a", 1, 3600, util_pct=1.0)], _fleet(), {"a": 1}, {}, classes)
    assert result["preemptions_by_cause"]["idle"] == 1  # the pool has no rule; the class has


def test_the_util_pct_column_is_optional_parsed_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_s,team,gpus,duration_s,util_pct\n0,a,1,10,3.5\n1,a,1,10,\n")
    jobs = load_trace(path)
    assert [j.util_pct for j in jobs] == [3.5, None]
    write_trace(tmp_path / "again.csv", jobs)
    assert [j.util_pct for j in load_trace(tmp_path / "again.csv")] == [3.5, None]
    path.write_text("submit_s,team,gpus,duration_s,util_pct\n0,a,1,10,150\n0,a,1,10,busy\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    lines = str(err.value).splitlines()
    assert "t.csv:2: util_pct must be within [0, 100], got '150'" in lines[0]
    assert "t.csv:3: util_pct must be a number, got 'busy'" in lines[1]


def test_the_config_rules_reach_the_replay(tmp_path: Path) -> None:
    text = """
pools: [{name: p, idle_reclaim: {below_util_pct: 5, for_s: 600, warn_s: 120}}]
priority_classes:
  - {name: default, value: 0, idle_reclaim: {below_util_pct: 1, for_s: 60, warn_s: 0}}
sources: [{name: sim, kind: simulated, pool: p, hosts: 1, gpus_per_host: 4}]
"""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    cfg = load_sim_config(path)
    assert cfg.pools["p"].idle_reclaim == RULE
    assert cfg.priority_classes["default"].idle_reclaim == IdleReclaim(1, 60, 0)
    import yaml

    same = sim_config_from_dict(yaml.safe_load(text))
    assert same.pools["p"].idle_reclaim == RULE
    assert same.priority_classes["default"].idle_reclaim == IdleReclaim(1, 60, 0)
