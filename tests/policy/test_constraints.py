"""Model, memory, driver and CUDA constraints; MIG slices; time-sliced and unschedulable GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from allocation.policy.fair import schedule
from allocation.policy.matching import version_at_least
from allocation.policy.types import GpuView, PoolView
from tests.policy.factories import A100, H100, fleet, grants, pendings, req, run, snap

MIXED = fleet(1, model=H100) + fleet(1, model=A100, memory_mb=40960, driver="525.60",
                                       cuda="12.0", prefix="a100", start_id=101)


def _hosts(grant_ids: tuple[int, ...]) -> set[str]:
    return {g.host for g in MIXED if g.id in grant_ids}


def test_model_matches_case_insensitive_substrings() -> None:
    d = schedule(snap(MIXED, [req("r", "a", 2, model="h100")]))
    assert _hosts(grants(d)["r"].gpu_ids) == {"node-0"}


def test_model_alternatives_take_either_but_one_model_per_lease() -> None:
    pending = [req("r", "a", 12, model="A100|H100", same_host=False)]
    d = schedule(snap(MIXED, pending))
    assert not d.grants  # 8 + 8 exist, but not 12 of one model
    d = schedule(snap(MIXED, [req("r", "a", 8, model="A100 | H100", same_host=False)]))
    assert len(_hosts(grants(d)["r"].gpu_ids)) == 1


def test_no_gpu_of_the_model_is_unsatisfiable_with_a_reason() -> None:
    d = schedule(snap(MIXED, [req("r", "a", 1, model="B200")]))
    item = pendings(d)["r"]
    assert item.unsatisfiable and item.reason == "no GPU of model B200 in pool p"


def test_min_memory_filters_gpus() -> None:
    d = schedule(snap(MIXED, [req("r", "a", 1, min_memory_mb=50_000)]))
    assert _hosts(grants(d)["r"].gpu_ids) == {"node-0"}
    d = schedule(snap(MIXED, [req("r", "a", 1, min_memory_mb=100_000)]))
    assert pendings(d)["r"].reason == "no GPU with at least 100000 MB of memory in pool p"


def test_driver_and_cuda_minimums_compare_numerically() -> None:
    d = schedule(snap(MIXED, [req("r", "a", 9, min_driver_version="530", same_host=False)]))
    assert pendings(d)["r"].unsatisfiable  # only the 8 H100s have driver 550
    d = schedule(snap(MIXED, [req("r", "a", 1, model="A100", min_cuda_version="12.1")]))
    assert pendings(d)["r"].reason == "no GPU of model A100 with CUDA >= 12.1 in pool p"
    d = schedule(snap(MIXED, [req("r", "a", 1, model="A100", min_driver_version="525")]))
    assert "r" in grants(d)


@pytest.mark.parametrize(("have", "need", "ok"), [
    ("535.54.03", "525", True), ("535.54.03", "535.54.3", True), ("535.54.03", "535.104", False),
    ("12.4", "12.10", False), ("12.10", "12.4", True), ("", "1", False), ("9", "", True)])
def test_versions_compare_part_by_part(have: str, need: str, ok: bool) -> None:
    assert version_at_least(have, need) is ok


def test_mig_slices_go_only_to_requests_that_name_them() -> None:
    slices = tuple(replace(g, mig_profile="1g.10gb", model="NVIDIA A100-SXM4-80GB")
                   for g in fleet([7], prefix="mig"))
    d = schedule(snap(slices, [req("whole", "a", 1, model="A100"), req("any", "a", 1),
                               req("slice", "a", 1, model="1g.10gb")]))
    assert set(grants(d)) == {"slice"}


def test_unschedulable_gpus_are_never_granted() -> None:
    gpus = tuple(replace(g, schedulable=g.id <= 2) for g in fleet(1))
    d = schedule(snap(gpus, [req("r", "a", 3)]))
    assert not d.grants and not pendings(d)["r"].unsatisfiable  # cordoned GPUs may come back
    d = schedule(snap(gpus, [req("r", "a", 2)]))
    assert set(grants(d)["r"].gpu_ids) == {1, 2}


def test_time_sliced_replicas_of_a_team_go_to_that_team_only() -> None:
    gpus = tuple(replace(g, time_sliced=True, shared_team="vision") for g in fleet(1))
    d = schedule(snap(gpus, [req("nlp1", "nlp", 1), req("vis1", "vision", 1, created_at=1)]))
    assert set(grants(d)) == {"vis1"}


def test_unassigned_time_sliced_replicas_on_a_host_serve_one_team_per_pass() -> None:
    # No physical GPU named (Kubernetes: the device plugin picks it): the host is the unit.
    gpus = tuple(replace(g, time_sliced=True) for g in fleet(1))
    d = schedule(snap(gpus, [req("a1", "a", 1), req("b1", "b", 1, created_at=1)]))
    assert len(d.grants) == 1


def test_exclusive_gpus_are_preferred_to_time_sliced_ones() -> None:
    shared = tuple(replace(g, time_sliced=True) for g in fleet(1, prefix="ts"))
    gpus = shared + fleet(1, start_id=101)
    d = schedule(snap(gpus, [req("r", "a", 2)]))
    assert grants(d)["r"].host == "node-0"


def sliced(physical: int = 2, replicas: int = 4) -> tuple[GpuView, ...]:
    """One host, `physical` GPUs of `replicas` replicas each: ids 1-4 are GPU-0's, 5-8 GPU-1's."""
    return tuple(replace(g, time_sliced=True, physical=f"GPU-{(g.id - 1) // replicas}")
                 for g in fleet([physical * replicas]))


def _physical(gpus: tuple[GpuView, ...], grant_ids: tuple[int, ...]) -> set[str]:
    return {g.physical for g in gpus if g.id in grant_ids}


def test_replicas_of_a_physical_gpu_another_team_holds_are_never_granted() -> None:
    gpus = sliced()
    d = schedule(snap(gpus, [req("b1", "b", 1), req("a2", "a", 3, created_at=1)],
                      [run("a1", "a", [1])]))
    assert _physical(gpus, grants(d)["b1"].gpu_ids) == {"GPU-1"}
    assert set(grants(d)["a2"].gpu_ids) == {2, 3, 4}  # the rest of team a's own GPU-0


def test_two_teams_share_one_host_but_never_one_physical_gpu() -> None:
    gpus = sliced()
    pending = [req("a1", "a", 2), req("b1", "b", 2, created_at=1), req("c1", "c", 1, created_at=2)]
    d = schedule(snap(gpus, pending))
    assert _physical(gpus, grants(d)["a1"].gpu_ids) == {"GPU-0"}
    assert _physical(gpus, grants(d)["b1"].gpu_ids) == {"GPU-1"}
    assert "c1" not in grants(d)  # 4 replicas free, all on GPUs of teams a and b
    assert pendings(d)["c1"].reason == (
        "waiting for 1 GPU on one host; none is free in pool p; 4 free time-sliced replicas are "
        "on GPUs in use by teams a, b (a time-sliced GPU serves one team at a time in pool p)")


def test_a_lease_spanning_physical_gpus_keeps_each_for_its_team() -> None:
    gpus = sliced()
    d = schedule(snap(gpus, [req("a1", "a", 6), req("b1", "b", 1, created_at=1),
                             req("a2", "a", 2, created_at=2)]))
    assert _physical(gpus, grants(d)["a1"].gpu_ids) == {"GPU-0", "GPU-1"}
    assert "b1" not in grants(d) and set(grants(d)["a2"].gpu_ids) == {7, 8}


def test_a_team_may_combine_its_own_and_unclaimed_replicas_on_one_host() -> None:
    gpus = sliced()
    d = schedule(snap(gpus, [req("a2", "a", 7)], [run("a1", "a", [1])]))
    assert set(grants(d)["a2"].gpu_ids) == set(range(2, 9))  # GPU-0's three and GPU-1's four


def test_a_pool_sharing_across_teams_lets_teams_share_a_physical_gpu() -> None:
    gpus = sliced(physical=1)
    pending, running = [req("b1", "b", 3)], [run("a1", "a", [1])]
    assert not schedule(snap(gpus, pending, running)).grants
    shared = {"p": PoolView("p", share_across_teams=True)}
    d = schedule(snap(gpus, pending, running, pools=shared))
    assert set(grants(d)["b1"].gpu_ids) == {2, 3, 4}


def test_fifo_keeps_time_sliced_gpus_to_one_team_too() -> None:
    from allocation.policy.fifo import schedule as fifo

    gpus = sliced()
    d = fifo(snap(gpus, [req("b1", "b", 4)], [run("a1", "a", [1])]))
    assert _physical(gpus, grants(d)["b1"].gpu_ids) == {"GPU-1"}
