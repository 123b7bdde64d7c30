"""Trace loading, the Alibaba conversion, the simulated fleet, and replays through the policy."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from allocation.policy import get_policy
from allocation.policy.measures import jain, percentile
from allocation.policy.replay import Job, Replay
from allocation.policy.types import Decisions, PoolView, PriorityClassView, QuotaView, Snapshot
from allocation.simulation import replay as simulation
from allocation.simulation.replay import (
    TRACE_COLUMNS,
    TraceError,
    convert_alibaba,
    fleet_from_config,
    load_sim_config,
    load_trace,
    pool_views,
    sim_config_from_dict,
    simulate,
    write_trace,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"
# The Alibaba GPU trace stays outside the repository (its terms): the README says where to get it.
TRACE = os.environ.get("GPUPOOL_TRACE", "")
CLASSES = {"high": PriorityClassView("high", 100), "default": PriorityClassView("default", 0),
           "best-effort": PriorityClassView("best-effort", -10, True, 300, 30)}


def _fleet(hosts: int = 2, gpus: int = 8) -> tuple:
    return fleet_from_config({"sources": [{"name": "sim", "kind": "simulated", "pool": "p",
                                           "hosts": hosts, "gpus_per_host": gpus}]})


def test_a_trace_loads_sorted_with_optional_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_s,team,gpus,duration_s\n10,b,2,5\n# a comment\n\n0,a,1,3.5\n")
    jobs = load_trace(path)
    assert [(j.team, j.submit_s, j.gpus, j.duration_s, j.priority_class) for j in jobs] == [
        ("a", 0.0, 1, 3.5, ""), ("b", 10.0, 2, 5.0, "")]
    assert jobs[0].line == 5


def test_bad_trace_lines_are_reported_with_their_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("submit_s,team,gpus,duration_s,priority_class,model\n"
                    "0,a,1,10,,\n-1,a,1,10,,\n0,,1,10,,\n0,a,0,10,,\n0,a,1,x,,\n0,a,1,1,,A|\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    lines = str(err.value).splitlines()
    assert [line.split(":")[1] for line in lines] == ["3", "4", "5", "6", "7"]
    assert "submit_s must be a finite number >= 0" in lines[0]
    assert "team is empty" in lines[1]
    assert "model 'A|' has an empty alternative" in lines[4]


def test_a_trace_without_the_required_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("when,who\n1,a\n")
    with pytest.raises(TraceError, match=r"t.csv:1: .*missing submit_s, team, gpus, duration_s"):
        load_trace(path)


def test_traces_round_trip(tmp_path: Path) -> None:
    jobs = [Job(0, 0.0, "a", 1, 10.0, "high", "H100"), Job(1, 2.5, "b", 8, 1.25, "", "A100|H100")]
    write_trace(tmp_path / "t.csv", jobs)
    again = load_trace(tmp_path / "t.csv")
    assert [(j.submit_s, j.team, j.gpus, j.duration_s, j.priority_class, j.model) for j in again] \
        == [(j.submit_s, j.team, j.gpus, j.duration_s, j.priority_class, j.model) for j in jobs]


def test_the_example_config_gives_the_simulated_fleet() -> None:
    cfg = load_sim_config(EXAMPLES / "sim.yaml")
    assert len(cfg.gpus) == 224 and len({g.id for g in cfg.gpus}) == 224
    assert {g.host for g in cfg.gpus if "A100" in g.model} == {f"a100-node-{i}" for i in range(8)}
    assert cfg.teams == {"vision": 2.0, "nlp": 1.0, "research": 1.0}
    assert cfg.quotas[("nlp", "training")] == QuotaView("nlp", "training", 64, 160)
    assert cfg.priority_classes["best-effort"].preemptible
    assert cfg.half_life_s == 168 * 3600
    assert cfg.pools == {"training": PoolView("training", fair_share_preemption_interval_s=60.0)}


def test_the_small_example_replays_with_sane_metrics() -> None:
    cfg = load_sim_config(EXAMPLES / "sim.yaml")
    jobs = load_trace(EXAMPLES / "small.csv")
    for policy in ("fair", "fifo"):
        out = simulate(jobs, cfg.gpus, cfg.teams, cfg.quotas, cfg.priority_classes,
                       cfg.half_life_s, policy)
        assert out["jobs"] == len(jobs) >= 400
        assert 0 < out["utilization"] <= 1
        assert out["quota_violations"] == 0 and out["unplaceable"] == 0
        assert 0 <= out["wait_s"]["p50"] <= out["wait_s"]["p95"] <= out["wait_s"]["max"]
        assert out["jct_s"]["mean"] >= out["wait_s"]["mean"]
        assert set(out["teams"]) == {"vision", "nlp", "research"}
        assert 0 < out["jain_index"] <= 1
        assert 0 < out["jain_index_backlogged"] <= 1 and out["backlogged_s"] > 0
        assert sorted(out) == sorted([
            "jobs", "makespan_s", "utilization", "wait_s", "jct_s", "teams", "jain_index",
            "preemptions", "preemptions_by_cause", "jain_index_backlogged", "backlogged_s",
            "quota_violations", "unplaceable", "wall_s"])
        assert out["preemptions"] == sum(out["preemptions_by_cause"].values())
        if policy == "fifo":
            assert out["preemptions_by_cause"] == {"priority": 0, "reclaim": 0, "fair_share": 0, "idle": 0}


def test_a_lone_job_runs_at_once_and_the_metrics_are_exact() -> None:
    out = simulate([Job(0, 100.0, "a", 4, 50.0)], _fleet(1), {}, {}, {})
    assert out["makespan_s"] == 50 and out["utilization"] == 0.5
    assert out["wait_s"]["max"] == 0 and out["jct_s"]["mean"] == 50
    assert out["teams"]["a"]["gpu_hours"] == pytest.approx(200 / 3600, abs=1e-3)


def test_jobs_no_capacity_could_ever_fit_are_counted_unplaceable() -> None:
    jobs = [Job(0, 0.0, "a", 9, 10.0), Job(1, 0.0, "a", 1, 10.0, model="B200"),
            Job(2, 0.0, "a", 3, 10.0)]
    quotas = {("a", "p"): QuotaView("a", "p", 0, 4)}
    out = simulate(jobs, _fleet(1), {}, quotas, {})
    assert out["unplaceable"] == 2 and out["quota_violations"] == 0


def test_a_job_bigger_than_any_host_runs_as_a_multi_host_gang() -> None:
    out = simulate([Job(0, 0.0, "a", 12, 10.0)], _fleet(2), {}, {}, {})
    assert out["unplaceable"] == 0 and out["jct_s"]["mean"] == 10


def test_an_unknown_priority_class_is_refused_with_its_line() -> None:
    with pytest.raises(TraceError, match="trace line 7: unknown priority class 'urgent'"):
        simulate([Job(0, 0.0, "a", 1, 1.0, "urgent", line=7)], _fleet(1), {}, {}, CLASSES)


def test_preempted_jobs_resume_and_high_priority_waits_only_the_grace() -> None:
    jobs = [Job(i, 0.0, "b", 1, 1000.0, "best-effort") for i in range(8)] + \
        [Job(8, 400.0, "a", 8, 100.0, "high")]
    out = simulate(jobs, _fleet(1), {}, {}, CLASSES)
    assert out["preemptions"] == 8
    # The high job waits the 30 s grace; the victims ran 430 s, wait 100 s, and resume.
    assert out["wait_s"]["p50"] == pytest.approx(100)
    assert sorted([out["wait_s"]["max"], out["makespan_s"]]) == pytest.approx([100, 1100])


def test_preempted_jobs_may_restart_from_scratch_instead() -> None:
    jobs = [Job(i, 0.0, "b", 1, 1000.0, "best-effort") for i in range(8)] + \
        [Job(8, 400.0, "a", 8, 100.0, "high")]
    out = simulate(jobs, _fleet(1), {}, {}, CLASSES, restart=True)
    assert out["wait_s"]["max"] == pytest.approx(530)  # the lost 430 s count as waiting
    assert out["makespan_s"] == pytest.approx(530 + 1000)


def _contended() -> list[Job]:
    """Team a floods the queue at t=0; team b arrives a little later with steady work."""
    jobs = [Job(i, 0.0, "a", 1, 100.0) for i in range(400)]
    jobs += [Job(400 + i, 10.0 + i, "b", 1, 100.0) for i in range(200)]
    return jobs


def test_fair_share_beats_fifo_on_jain_in_a_contended_pool() -> None:
    fleet = _fleet(2)
    fair = simulate(_contended(), fleet, {"a": 1, "b": 1}, {}, {}, 3600.0, "fair")
    fifo = simulate(_contended(), fleet, {"a": 1, "b": 1}, {}, {}, 3600.0, "fifo")
    assert fair["quota_violations"] == fifo["quota_violations"] == 0
    assert fair["jain_index"] > fifo["jain_index"]
    assert fair["jain_index"] > 0.95
    assert fair["teams"]["b"]["achieved_share"] > fifo["teams"]["b"]["achieved_share"]
    assert fair["utilization"] == pytest.approx(fifo["utilization"], rel=0.02)


def test_replays_are_deterministic() -> None:
    fleet = _fleet(2)
    one = simulate(_contended(), fleet, {"a": 2}, {}, {})
    two = simulate(_contended(), fleet, {"a": 2}, {}, {})
    one.pop("wall_s"), two.pop("wall_s")
    assert one == two


QUOTAS = {("a", "p"): QuotaView("a", "p", 4), ("b", "p"): QuotaView("b", "p", 4)}


def _reclaim_then_priority() -> list[Job]:
    """b borrows a's half of 8 GPUs with best-effort work; at 400 s (past min_runtime) a asks
    for 2 GPUs within its guarantee (a reclaim of 2), at 500 s b asks for 1 at high priority
    (its own best-effort lease: a priority preemption)."""
    return [Job(i, 0.0, "b", 1, 1000.0, "best-effort") for i in range(8)] + \
        [Job(8, 400.0, "a", 1, 100.0), Job(9, 400.0, "a", 1, 100.0),
         Job(10, 500.0, "b", 1, 100.0, "high")]


def test_preemptions_are_counted_by_cause() -> None:
    fair = simulate(_reclaim_then_priority(), _fleet(1), {}, QUOTAS, CLASSES)
    assert fair["preemptions_by_cause"] == {"priority": 1, "reclaim": 2, "fair_share": 0, "idle": 0}
    assert fair["preemptions"] == 3
    fifo = simulate(_reclaim_then_priority(), _fleet(1), {}, QUOTAS, CLASSES, policy_name="fifo")
    assert fifo["preemptions_by_cause"] == {"priority": 0, "reclaim": 0, "fair_share": 0, "idle": 0}


def _relabelled(kind: str, seen: list[tuple[float, PoolView]]) -> Callable[[Snapshot], Decisions]:
    """The fair policy, its preemptions relabelled `kind`; records each pass's pool p."""
    fair = get_policy("fair")

    def policy(snap: Snapshot) -> Decisions:
        seen.append((snap.now, snap.pools["p"]))
        decisions = fair(snap)
        decisions.preemptions = [replace(p, kind=kind) for p in decisions.preemptions]
        return decisions
    return policy


def test_every_pass_sees_the_pool_settings_and_its_last_fair_share_preemption() -> None:
    jobs = _reclaim_then_priority()
    seen: list[tuple[float, PoolView]] = []
    settings = PoolView("p", fair_share_preemption=True, fair_share_preemption_interval_s=60.0)
    out = Replay(jobs, _fleet(1), {}, QUOTAS, CLASSES, 3600.0, _relabelled("fair_share", seen),
                 {j.index: ("p", True) for j in jobs}, pools={"p": settings}).run()
    assert out["preemptions_by_cause"] == {"priority": 0, "reclaim": 0, "fair_share": 3, "idle": 0}
    # Fair-share preemptions in the passes at 400 s and 500 s; each later pass sees the last.
    assert [now for now, _ in seen][:5] == [0, 400, 430, 500, 530]
    assert [view.last_fair_share_preemption for _, view in seen] == [
        None if now <= 400 else 400 if now <= 500 else 500 for now, _ in seen]
    assert {replace(view, last_fair_share_preemption=None) for _, view in seen} == {settings}


def test_a_preemption_of_an_unknown_cause_is_refused() -> None:
    jobs = _reclaim_then_priority()
    replay = Replay(jobs, _fleet(1), {}, QUOTAS, CLASSES, 3600.0, _relabelled("whim", []),
                    {j.index: ("p", True) for j in jobs})
    with pytest.raises(RuntimeError, match="unknown cause 'whim'"):
        replay.run()


def _both_at(b_submit: float, per_team: int) -> list[Job]:
    return [Job(i, 0.0, "a", 1, 100.0) for i in range(per_team)] + \
        [Job(per_team + i, b_submit, "b", 1, 100.0) for i in range(per_team)]


def test_jain_backlogged_is_one_for_teams_holding_their_weighted_share() -> None:
    # 8 GPUs, 8 jobs each at once: 4 + 4 at equal weights, 6 + 2 at 3:1, for the first 100 s.
    even = simulate(_both_at(0.0, 8), _fleet(1), {"a": 1, "b": 1}, {}, {})
    weighted = simulate(_both_at(0.0, 8), _fleet(1), {"a": 3, "b": 1}, {}, {})
    assert weighted["teams"]["a"]["achieved_share"] == 0.75
    for out in (even, weighted):
        assert out["jain_index_backlogged"] == 1.0 and out["backlogged_s"] == 100


def test_jain_backlogged_counts_a_team_that_holds_too_much_without_waiting() -> None:
    # FIFO: a takes 6 of 8 GPUs at 0 s and waits for nothing more; b comes at 1 s, gets 2 and
    # waits for 4 until 100 s. Entitled 4 each: x = (6/4, 2/4), J = 2^2 / (2 (1.5^2 + 0.5^2)).
    out = simulate(_both_at(1.0, 6), _fleet(1), {"a": 1, "b": 1}, {}, {}, policy_name="fifo")
    assert out["backlogged_s"] == 99
    assert out["jain_index_backlogged"] == pytest.approx(4 / (2 * (1.5 ** 2 + 0.5 ** 2)))
    assert out["jain_index"] == 1.0  # only one team ever waits: the older index sees nothing


def test_jain_backlogged_is_one_when_no_pool_was_ever_backlogged() -> None:
    out = simulate([Job(0, 0.0, "a", 4, 10.0), Job(1, 0.0, "b", 4, 10.0)], _fleet(1), {}, {}, {})
    assert out["jain_index_backlogged"] == 1.0 and out["backlogged_s"] == 0


def test_percentiles_and_jain() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert jain([1.0, 1.0, 1.0]) == 1.0
    assert jain([1.0, 0.0]) == 0.5


def _write_alibaba(tmp: Path) -> tuple[Path, Path]:
    pods = tmp / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "pod-a,1,1,1,1000,,LS,Running,0,100,10\n"
        "pod-b,1,1,1,460,V100M16|V100M32,BE,Running,5,50,5\n"
        "pod-c,1,1,0,0,,LS,Running,0,100,0\n"
        "pod-d,1,1,8,1000,,Burstable,Pending,7,,\n"
        "pod-e,1,1,2,1000,,Guaranteed,Succeeded,9,30,20\n")
    nodes = tmp / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,8,G2\nn1,1,1,8,G2\n"
                     "n2,1,1,2,V100M16\nn3,1,1,0,T4\n")
    return pods, nodes


def test_the_alibaba_trace_converts_to_jobs_and_a_fleet(tmp_path: Path) -> None:
    jobs, config = convert_alibaba(*_write_alibaba(tmp_path))
    assert [(j.submit_s, j.gpus, j.duration_s, j.priority_class, j.model) for j in jobs] == [
        (0.0, 1, 90.0, "high", ""), (5.0, 1, 45.0, "best-effort", "V100M16|V100M32"),
        (9.0, 2, 10.0, "default", "")]
    assert all(j.team.startswith("team-") for j in jobs)
    fleet = fleet_from_config(config)
    assert len(fleet) == 18 and {g.model for g in fleet} == {"G2", "V100M16"}
    out = simulate(jobs, fleet, {t["name"]: 1.0 for t in config["teams"]}, {}, CLASSES)
    assert out["unplaceable"] == 0 and out["jobs"] == 3


@pytest.mark.skipif(not TRACE, reason="GPUPOOL_TRACE is not set: point it at the folder of the Alibaba "
                    "openb CSVs to run this (README, 'Simulating a trace')")
def test_the_real_alibaba_trace_converts_in_full() -> None:
    jobs, config = convert_alibaba(Path(TRACE) / "openb_pod_list_default.csv",
                                   Path(TRACE) / "openb_node_list_gpu_node.csv")
    assert len(jobs) == 6203  # GPU pods that were scheduled and deleted
    assert sum(s["hosts"] * s["gpus_per_host"] for s in config["sources"]) == 6212
    assert {j.team for j in jobs} == {"team-0", "team-1", "team-2", "team-3"}


def test_pool_settings_come_from_the_pool_then_the_scheduler_section() -> None:
    views = pool_views([{"name": "a", "scheduler": {"fair_share_preemption": True}},
                        {"name": "b", "share_across_teams": True, "scheduler": None},
                        {"name": "c", "scheduler": {"fair_share_preemption_interval_s": 5}}],
                       {"fair_share_preemption": False, "fair_share_preemption_interval_s": 120})
    assert views["a"] == PoolView("a", fair_share_preemption=True, fair_share_preemption_interval_s=120.0)
    assert views["b"] == PoolView("b", share_across_teams=True, fair_share_preemption_interval_s=120.0)
    assert views["c"] == PoolView("c", fair_share_preemption_interval_s=5.0)


def test_fair_share_preemption_shows_in_the_replay_as_its_own_cause() -> None:
    jobs = [Job(i, 0.0, "a", 1, 1000.0) for i in range(8)] + \
        [Job(8 + i, 100.0, "b", 1, 100.0) for i in range(8)]
    off = simulate(jobs, _fleet(1), {}, {}, CLASSES)
    on = simulate(jobs, _fleet(1), {}, {}, CLASSES,
                  pools={"p": PoolView("p", fair_share_preemption=True)})
    assert off["preemptions_by_cause"]["fair_share"] == 0
    # b takes half the pool back at once (4 of a's jobs), and again as its first jobs end.
    assert on["preemptions_by_cause"]["fair_share"] >= 4
    assert on["preemptions_by_cause"]["priority"] == on["preemptions_by_cause"]["reclaim"] == 0
    assert on["wait_s"]["mean"] < off["wait_s"]["mean"]
    assert on["jain_index_backlogged"] > off["jain_index_backlogged"]


def test_binding_and_source_columns_round_trip(tmp_path: Path) -> None:
    jobs = [Job(0, 0.0, "a", 1, 10.0, binding="pod", source="kb"), Job(1, 1.0, "b", 2, 5.0, binding="process"),
            Job(2, 2.0, "a", 1, 1.0)]
    write_trace(tmp_path / "t.csv", jobs)
    assert (tmp_path / "t.csv").read_text().splitlines()[0].endswith(",util_pct,binding,source")
    assert [(j.binding, j.source) for j in load_trace(tmp_path / "t.csv")] == [("pod", "kb"), ("process", ""), ("", "")]
    write_trace(tmp_path / "plain.csv", jobs[2:])  # without them: the contract's columns only
    assert (tmp_path / "plain.csv").read_text().splitlines()[0] == ",".join(TRACE_COLUMNS)


def test_a_job_steered_to_a_source_runs_only_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """Config fleets too: `source` is the lease's selector, placed by the policy; a job larger than
    any host of its source is a gang over that source's hosts, never spilling onto another's."""
    cfg = sim_config_from_dict({"sources": [
        {"name": "sa", "kind": "simulated", "pool": "p", "hosts": 2, "gpus_per_host": 4},
        {"name": "sb", "kind": "simulated", "pool": "p", "hosts": 1, "gpus_per_host": 8}]})
    grants: dict[str, tuple[int, ...]] = {}
    real = simulation.get_policy

    def spying(name: str) -> Callable[[Snapshot], Decisions]:
        def decide(snap: Snapshot) -> Decisions:
            decisions = real(name)(snap)
            grants.update((g.lease_id, g.gpu_ids) for g in decisions.grants)
            return decisions
        return decide

    monkeypatch.setattr(simulation, "get_policy", spying)
    jobs = [Job(0, 0.0, "a", 8, 10.0, source="sa"), Job(1, 0.0, "b", 2, 10.0, source="sb"),
            Job(2, 20.0, "a", 9, 10.0, source="sb"), Job(3, 20.0, "b", 8, 10.0, binding="pod", source="sb")]
    out = simulate(jobs, cfg.gpus, {}, {}, CLASSES, gpu_sources=cfg.gpu_sources)
    assert out["unplaceable"] == 1  # 9 GPUs of sb: there are 8
    assert {cfg.gpu_sources[g] for g in grants["job-0"]} == {"sa"} and len(grants["job-0"]) == 8
    assert {cfg.gpu_sources[g] for g in grants["job-1"] + grants["job-3"]} == {"sb"}
    with pytest.raises(TraceError, match=r"trace line 7: unknown source 'sc' \(the fleet's: sa, sb\)"):
        simulate([Job(0, 0.0, "a", 1, 1.0, source="sc", line=7)], cfg.gpus, {}, {}, CLASSES,
                 gpu_sources=cfg.gpu_sources)
