"""`simulate --racks N` (allocation.policy.replay_topology, allocation.simulation.topology): the
same trace replayed topology-aware and blind in one run; gangs within one rack and fragmentation
measured for both."""

from __future__ import annotations

from functools import partial

from allocation.policy.replay import Job
from allocation.policy.replay_topology import racks_of
from allocation.simulation.replay import fleet_from_config, simulate
from allocation.simulation.topology import compare, scale_jobs


def _fleet(hosts: int = 8) -> tuple:
    return fleet_from_config({"sources": [{"name": "sim", "kind": "simulated", "pool": "p", "hosts": hosts,
                                           "gpus_per_host": 8}]})


def test_racks_are_hosts_in_fleet_order() -> None:
    racks = racks_of(_fleet(6), 4)
    assert sorted(set(racks.values())) == ["p/rack-0", "p/rack-1"]
    assert sum(1 for r in racks.values() if r == "p/rack-0") == 4


def test_aware_gangs_stay_in_one_rack_where_the_blind_policy_spreads_them() -> None:
    # Hosts 0-3 rack 0, 4-7 rack 1. 1-GPU jobs first break hosts of both racks; then 16-GPU gangs.
    jobs = [Job(i, 0.0, "a", 1, 5000.0) for i in range(0, 8, 2)]
    jobs += [Job(10 + i, 10.0 + i, "b", 16, 100.0) for i in range(3)]
    run = partial(simulate, jobs, _fleet(), {}, {}, {})
    out = compare(run, 4)
    aware, blind = out["topology"]["aware"], out["topology"]["blind"]
    assert aware["gangs"] == blind["gangs"] == 3
    assert aware["share_in_one_rack"] == 1.0
    assert blind["share_in_one_rack"] is not None and blind["share_in_one_rack"] <= aware["share_in_one_rack"]
    assert aware["racks"] == 2 and aware["largest_free_rack_gpus"]["mean"] > 0
    assert {"largest_free_rack_gpus", "whole_free_racks_mean", "share_in_one_rack_where_possible"} <= set(aware)


def test_scale_jobs() -> None:
    jobs = [Job(0, 0.0, "a", 2, 1.0)]
    assert scale_jobs(jobs, 4)[0].gpus == 8 and scale_jobs(jobs, 1) == jobs
