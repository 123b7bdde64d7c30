"""Time-sliced GPUs on random fleets: after a pass of either policy, the replicas of one physical
GPU (one host where the physical GPU is unknown) carry leases of one team at most, unless the
pool shares them across teams."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import GpuView, RequestView, RunningView, Snapshot, TeamView

TEAMS = ("a", "b", "c")
NOW = 100_000.0


@st.composite
def sliced_snapshots(draw: st.DrawFn) -> Snapshot:
    """Hosts of exclusive and time-sliced GPUs (the physical GPU named, or not: Kubernetes);
    running leases that respect one team per unit; requests of every team."""
    gpus: list[GpuView] = []
    for h in range(draw(st.integers(1, 3))):
        named = draw(st.booleans())
        for p in range(draw(st.integers(1, 3))):
            replicas = draw(st.sampled_from((1, 2, 4)))
            for _ in range(replicas):
                gpus.append(GpuView(len(gpus) + 1, "p", f"h{h}", "NVIDIA T4", 15360,
                                    time_sliced=replicas > 1,
                                    physical=f"GPU-{h}-{p}" if named and replicas > 1 else ""))
    owner: dict[tuple[str, str], str] = {}
    running: list[RunningView] = []
    for gpu in gpus:
        if draw(st.integers(0, 2)) != 0:
            continue
        unit = (gpu.host, gpu.physical) if gpu.time_sliced else (gpu.host, str(gpu.id))
        team = owner.setdefault(unit, draw(st.sampled_from(TEAMS)))
        running.append(RunningView(f"r{len(running)}", team, "p", (gpu.id,),
                                   preemptible=draw(st.booleans()), borrowed=draw(st.booleans()),
                                   granted_at=NOW - 1000))
    pending = [RequestView(f"q{n}", draw(st.sampled_from(TEAMS)), "p", draw(st.integers(1, 6)),
                           priority=draw(st.sampled_from((0, 100))), created_at=float(n),
                           same_host=draw(st.booleans()))
               for n in range(draw(st.integers(1, 10)))]
    return Snapshot(NOW, tuple(gpus), {t: TeamView(t) for t in TEAMS}, {}, tuple(running),
                    tuple(pending))


def _teams_per_unit(snapshot: Snapshot, grants: dict[str, tuple[int, ...]]) -> dict[tuple[str, str], set[str]]:
    by_id = {g.id: g for g in snapshot.gpus}
    team = {r.lease_id: r.team for r in snapshot.pending} | {r.lease_id: r.team for r in snapshot.running}
    held = {r.lease_id: r.gpu_ids for r in snapshot.running} | grants
    teams: dict[tuple[str, str], set[str]] = defaultdict(set)
    for lease_id, gpu_ids in held.items():
        for gid in gpu_ids:
            if by_id[gid].time_sliced:
                teams[(by_id[gid].host, by_id[gid].physical)].add(team[lease_id])
    return teams


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sliced_snapshots())
def test_a_time_sliced_gpu_serves_one_team_after_any_pass(snapshot: Snapshot) -> None:
    for policy in (fair, fifo):
        decisions = policy(snapshot)
        teams = _teams_per_unit(snapshot, {g.lease_id: g.gpu_ids for g in decisions.grants})
        assert all(len(names) <= 1 for names in teams.values()), (policy.__module__, dict(teams))

