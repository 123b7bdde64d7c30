"""A team never holds more than its limit in a pool."""

from __future__ import annotations

from dataclasses import replace

from allocation.policy.fair import schedule
from tests.policy.factories import fleet, grants, held_by_team, pendings, quotas, req, run, snap

GPUS = fleet(4)


def test_grants_stop_at_the_limit_even_with_idle_gpus() -> None:
    pending = [req(f"a{i}", "a", 1, created_at=i) for i in range(30)]
    d = schedule(snap(GPUS, pending, quota=quotas(("a", 4, 10))))
    assert held_by_team(d, pending) == {"a": 10}
    assert pendings(d)["a10"].reason == "team a at its limit 10 in pool p (holds or awaits 10, asks for 1)"


def test_running_leases_count_against_the_limit() -> None:
    running = [run("r", "a", [g.id for g in GPUS[:8]])]
    pending = [req("big", "a", 4), req("small", "a", 2, created_at=1)]
    d = schedule(snap(GPUS, pending, running, quota=quotas(("a", 0, 10))))
    assert set(grants(d)) == {"small"}


def test_ending_leases_still_count_against_the_limit() -> None:
    running = [run("r", "a", [g.id for g in GPUS[:8]], ending=True)]
    d = schedule(snap(GPUS, [req("x", "a", 4)], running, quota=quotas(("a", 0, 10))))
    assert not d.grants


def test_a_request_larger_than_the_limit_is_unsatisfiable() -> None:
    d = schedule(snap(GPUS, [req("x", "a", 12, same_host=False)], quota=quotas(("a", 0, 10))))
    item = pendings(d)["x"]
    assert item.unsatisfiable
    assert item.reason == "asks for 12 GPUs, above team a's limit 10 in pool p"


def test_a_limit_of_zero_keeps_a_team_out_of_a_pool() -> None:
    d = schedule(snap(GPUS, [req("x", "a", 1)], quota=quotas(("a", 0, 0))))
    assert not d.grants and pendings(d)["x"].unsatisfiable


def test_no_quota_row_means_no_guarantee_and_no_limit() -> None:
    pending = [req(f"a{i}", "a", 8) for i in range(4)]
    d = schedule(snap(GPUS, pending))
    assert len(d.grants) == 4 and all(g.borrowed for g in d.grants)


def test_preemption_never_starts_for_a_request_its_limit_would_refuse() -> None:
    running = [replace(run(f"o{i}", "other", [g.id]), preemptible=True, priority=-10)
               for i, g in enumerate(GPUS)]
    pending = [req("hi", "a", 4, priority=100, same_host=False)]
    d = schedule(snap(GPUS, pending, running, quota=quotas(("a", 0, 2))))
    assert not d.preemptions
