"""The simulator replays a team tree: `jain_index_by_level` per depth (the deepest is the teams'
own index), and the measure itself."""

from __future__ import annotations

from allocation.policy.measures import jain, jain_by_level
from allocation.policy.replay import Job
from allocation.policy.types import QuotaView
from allocation.simulation.replay import fleet_from_config, simulate

PARENTS = {"a1": "A", "a2": "A", "b1": "B"}


def _fleet() -> tuple:
    return fleet_from_config({"sources": [{"name": "sim", "kind": "simulated", "pool": "p",
                                           "hosts": 2, "gpus_per_host": 8}]})


def test_jain_by_level_sums_teams_under_their_ancestor_at_each_depth() -> None:
    achieved = {"a1": 2.0, "a2": 2.0, "b1": 4.0}
    entitled = {"a1": 1.0, "a2": 3.0, "b1": 4.0}
    levels = jain_by_level(achieved, entitled, PARENTS, ["a1", "a2", "b1"])
    assert levels["0"] == 1.0  # A: 4/4, B: 4/4
    assert levels["1"] == round(jain([2.0, 2 / 3, 1.0]), 4)  # the teams' own ratios
    assert jain_by_level(achieved, entitled, {}, ["a1", "b1"]) == {"0": round(jain([2.0, 1.0]), 4)}


def test_a_replay_over_a_tree_reports_jain_at_each_level() -> None:
    jobs = [Job(i, float(i), team, 4, 100.0) for i, team in enumerate(["a1", "a2", "b1"] * 4)]
    quotas = {("A", "p"): QuotaView("A", "p", 8, 8), ("a1", "p"): QuotaView("a1", "p", 4),
              ("a2", "p"): QuotaView("a2", "p", 4), ("B", "p"): QuotaView("B", "p", 8),
              ("b1", "p"): QuotaView("b1", "p", 8)}
    teams = dict.fromkeys(("A", "B", "a1", "a2", "b1"), 1.0)
    out = simulate(jobs, _fleet(), teams, quotas, {}, parents=PARENTS)
    assert out["jobs"] == 12 and out["quota_violations"] == 0
    assert set(out["jain_index_by_level"]) == {"0", "1"}
    assert out["jain_index_by_level"]["1"] == out["jain_index"]
    flat = simulate(jobs, _fleet(), teams, quotas, {})
    assert "jain_index_by_level" not in flat
