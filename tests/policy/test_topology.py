"""Topology-aware placement (allocation/policy/topology.py, topo_place.py): NVLink islands on a
DGX-like host, racks for multi-host gangs, the `topology` pending code, and both policies."""

from __future__ import annotations

import pytest

from allocation.policy import fair, fifo
from allocation.policy.codes import PendingCode
from allocation.policy.topology import TopologyView, pick_ids, resolve_level, topology_problems
from tests.policy.factories import fleet, grants, pendings, req, run, snap

POLICIES = [fair.schedule, fifo.schedule]


def _two_islands(gpus):
    """Each 8-GPU host as two 4-GPU NVLink islands (GPUs 0-3 and 4-7 of the host)."""
    islands = {}
    for g in gpus:
        islands[g.id] = f"{g.host}/nvl{(g.id - 1) % 8 // 4}"
    return islands


def _racks(hosts: int, size: int) -> dict[str, tuple[str, ...]]:
    return {f"node-{h}": (f"rack-{h // size}",) for h in range(hosts)}


@pytest.mark.parametrize("schedule", POLICIES)
def test_four_gpu_lease_lands_in_one_island_of_a_dgx_like_host(schedule):
    gpus = fleet(1)
    topo = TopologyView(islands=_two_islands(gpus))
    # GPUs 1 and 5 are held: each island has 3 free; 2 GPUs would straddle without topology.
    held = run("r", "a", (1, 6))
    d = schedule(snap(gpus, [req("x", "a", 2)], [held], topology=topo))
    taken = grants(d)["x"].gpu_ids
    assert len({topo.islands[i] for i in taken}) == 1, taken


@pytest.mark.parametrize("schedule", POLICIES)
def test_four_gpu_lease_on_an_empty_dgx_host_takes_one_whole_island(schedule):
    gpus = fleet(1)
    topo = TopologyView(islands=_two_islands(gpus))
    d = schedule(snap(gpus, [req("x", "a", 4)], topology=topo))
    assert {topo.islands[i] for i in grants(d)["x"].gpu_ids} == {"node-0/nvl0"}


@pytest.mark.parametrize("schedule", POLICIES)
def test_small_lease_packs_into_a_broken_island_keeping_a_whole_one_free(schedule):
    gpus = fleet(1)
    topo = TopologyView(islands=_two_islands(gpus))
    d = schedule(snap(gpus, [req("x", "a", 1)], [run("r", "a", (5,))], topology=topo))
    assert topo.islands[grants(d)["x"].gpu_ids[0]] == "node-0/nvl1"


@pytest.mark.parametrize("schedule", POLICIES)
def test_nvlink_required_waits_rather_than_split_an_island(schedule):
    gpus = fleet(1)
    topo = TopologyView(islands=_two_islands(gpus))
    held = run("r", "a", (1, 5))  # 3 + 3 free: 4 only across islands
    request = req("x", "a", 4, within="nvlink", within_required=True)
    d = schedule(snap(gpus, [request], [held], topology=topo))
    assert "x" not in grants(d)
    assert pendings(d)["x"].code == PendingCode.TOPOLOGY
    # preferred: placed across
    d = schedule(snap(gpus, [req("y", "a", 4, within="nvlink")], [held], topology=topo))
    assert len(grants(d)["y"].gpu_ids) == 4


@pytest.mark.parametrize("schedule", POLICIES)
def test_nvlink_required_picks_the_host_whose_island_fits(schedule):
    gpus = fleet(2)
    topo = TopologyView(islands=_two_islands(gpus))
    held = run("r", "a", (1, 5, 10))  # node-0: 3+3 free; node-1: 3+4 free (smaller host? no: 7)
    request = req("x", "a", 4, within="nvlink", within_required=True)
    d = schedule(snap(gpus, [request], [held], topology=topo))
    taken = grants(d)["x"].gpu_ids
    assert {topo.islands[i] for i in taken} == {"node-1/nvl1"}


@pytest.mark.parametrize("schedule", POLICIES)
def test_rack_required_gang_waits_rather_than_span_racks(schedule):
    gpus = fleet(4)  # racks of 2 hosts: rack-0 node-0,1; rack-1 node-2,3
    topo = TopologyView(("rack",), _racks(4, 2))
    held = [run("r0", "a", range(1, 5)), run("r1", "a", range(17, 21))]  # 12 free per rack
    gang = req("g", "b", 16, same_host=False, within="rack", within_required=True)
    d = schedule(snap(gpus, [gang], held, topology=topo))
    assert "g" not in grants(d)
    assert pendings(d)["g"].code == PendingCode.TOPOLOGY
    assert "rack" in pendings(d)["g"].reason


@pytest.mark.parametrize("schedule", POLICIES)
def test_multi_host_gang_prefers_one_rack_by_default_and_best_fit(schedule):
    gpus = fleet(6)  # racks of 2: rack-0 has 8 free, rack-1 16 free, rack-2 12 free
    topo = TopologyView(("rack",), _racks(6, 2))
    held = [run("r0", "a", range(1, 9)), run("r2", "a", range(33, 37))]
    gang = req("g", "b", 12, same_host=False)
    d = schedule(snap(gpus, [gang], held, topology=topo))
    hosts = {g.host for g in gpus if g.id in grants(d)["g"].gpu_ids}
    assert hosts == {"node-4", "node-5"}  # rack-2: the best fit, rack-1 stays whole
    # Blind: spans whatever has the largest blocks.
    blind = schedule(snap(gpus, [gang], held))
    blind_hosts = {g.host for g in gpus if g.id in grants(blind)["g"].gpu_ids}
    assert len({topo.hosts[h] for h in blind_hosts}) >= 1


@pytest.mark.parametrize("schedule", POLICIES)
def test_preferred_rack_falls_back_to_spanning(schedule):
    gpus = fleet(4)
    topo = TopologyView(("rack",), _racks(4, 2))
    held = [run("r0", "a", range(1, 5)), run("r1", "a", range(17, 21))]
    gang = req("g", "b", 16, same_host=False, within="rack")
    d = schedule(snap(gpus, [gang], held, topology=topo))
    assert len(grants(d)["g"].gpu_ids) == 16


def test_pick_ids_best_fit_and_fewest_islands():
    islands = {1: "a", 2: "a", 3: "b", 4: "b", 5: "b", 6: "c"}
    assert pick_ids([1, 2, 3, 4, 5, 6], 2, islands) == [1, 2]
    assert pick_ids([1, 2, 3, 4, 5, 6], 3, islands) == [3, 4, 5]
    assert pick_ids([1, 2, 3, 4, 5, 6], 5, islands) == [1, 2, 3, 4, 5]
    assert pick_ids([7, 8, 9], 2, {}) == [7, 8]


def test_topology_problems():
    assert topology_problems({"within": "rack", "mode": "required"}, ["zone", "rack"]) == []
    assert topology_problems({"within": "nvlink"}, []) == []
    assert topology_problems({"within": "row"}, ["rack"])
    assert topology_problems({"within": "rack", "mode": "maybe"}, ["rack"])
    assert topology_problems({"within": "host", "extra": 1}, [])
    assert topology_problems("rack", ["rack"])


def test_a_level_may_be_named_by_its_key_s_last_segment_when_only_one_has_it():
    levels = ["topology.kubernetes.io/zone", "example.com/block", "rack"]
    assert resolve_level("zone", levels) == "topology.kubernetes.io/zone"
    assert resolve_level("topology.kubernetes.io/zone", levels) == "topology.kubernetes.io/zone"
    assert resolve_level("rack", levels) == "rack" and resolve_level("nvlink", levels) == "nvlink"
    assert topology_problems({"within": "block"}, levels) == []
    # Two levels end in the same word: the short name is ambiguous, so it names none.
    assert resolve_level("zone", ["a.io/zone", "b.io/zone"]) is None
    assert topology_problems({"within": "zone"}, ["a.io/zone", "b.io/zone"])
    assert resolve_level(3, levels) is None
