"""Memoised indexes (per GPU tuple, patched between passes) never change a decision: a pass
over a snapshot decides the same whether its GPU tuple was seen before or not."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocation.policy.fair import schedule as fair
from allocation.policy.fifo import schedule as fifo
from allocation.policy.types import RequestView, RunningView, Snapshot, TeamView
from tests.policy.factories import A100, fleet

GPUS = fleet([8, 8, 4, 8, 2]) + fleet([4, 4], model=A100, prefix="a", start_id=101)
IDS = [g.id for g in GPUS]


@st.composite
def histories(draw: st.DrawFn) -> list[Snapshot]:
    """Passes over one GPU tuple; each keeps most running leases (the same objects) of the
    previous one, ends some, starts some on free GPUs."""
    pending = tuple(
        RequestView(f"q{i}", draw(st.sampled_from("abc")), "p", draw(st.sampled_from((1, 2, 4, 8))),
                    priority=draw(st.sampled_from((-10, 0, 100))), created_at=float(i),
                    model=draw(st.sampled_from(("", "H100", "A100"))),
                    same_host=draw(st.booleans()), expected_duration_s=100.0)
        for i in range(draw(st.integers(1, 10))))
    teams = {t: TeamView(t) for t in "abc"}
    running: dict[str, RunningView] = {}
    snapshots = []
    for step in range(draw(st.integers(2, 6))):
        for lease_id in draw(st.lists(st.sampled_from(sorted(running) or ["-"]), max_size=3)):
            running.pop(lease_id, None)
        busy = {g for r in running.values() for g in r.gpu_ids}
        free = [g for g in IDS if g not in busy]
        for k in range(draw(st.integers(0, 4))):
            take = draw(st.integers(0, min(4, len(free))))
            if take:
                gids, free = free[:take], free[take:]
                lease_id = f"r{step}-{k}"
                running[lease_id] = RunningView(
                    lease_id, draw(st.sampled_from("abc")), "p", tuple(gids),
                    priority=draw(st.sampled_from((-10, 0))), preemptible=draw(st.booleans()),
                    granted_at=float(step), expected_end=1000.0 + step,
                    ending=draw(st.integers(0, 6)) == 0)
        if bool(running) and draw(st.booleans()):  # a lease starts ending: a new view, same id
            lease_id = sorted(running)[0]
            running[lease_id] = replace(running[lease_id], ending=True)
        snapshots.append(Snapshot(100.0 + step, GPUS, teams, {}, tuple(running.values()),
                                  pending))
    return snapshots


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_a_pass_decides_the_same_with_or_without_memoised_indexes(history: list) -> None:
    for snapshot in history:
        cold = replace(snapshot, gpus=tuple(list(snapshot.gpus)))  # a new tuple: nothing cached
        for policy in (fair, fifo):
            assert policy(snapshot) == policy(cold)


def test_estimated_starts_do_not_change_decisions() -> None:
    running = (RunningView("r", "z", "p", tuple(IDS[:6]), expected_end=500.0),)
    pending = (RequestView("head", "a", "p", 8, created_at=0.0),
               RequestView("small", "b", "p", 2, created_at=1.0, expected_duration_s=50.0))
    snapshot = Snapshot(100.0, GPUS, {}, {}, running, pending)
    with_starts = fair(snapshot)
    without = fair(replace(snapshot, estimate_starts=False))
    assert (with_starts.grants, with_starts.preemptions) == (without.grants, without.preemptions)
