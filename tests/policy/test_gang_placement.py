"""All-or-nothing placement, same-host gangs, and best-fit packing."""

from __future__ import annotations

from allocation.policy.fair import schedule
from tests.policy.factories import fleet, grants, ids, pendings, req, run, snap

GPUS = fleet(3)


def _fragment() -> list:
    """Leaves 6 free on node-0, 4 on node-1, 2 on node-2."""
    return [run("x0", "z", ids(GPUS, "node-0")[:2]), run("x1", "z", ids(GPUS, "node-1")[:4]),
            run("x2", "z", ids(GPUS, "node-2")[:6])]


def test_same_host_eight_on_a_fragmented_fleet_stays_pending_with_a_reason() -> None:
    d = schedule(snap(GPUS, [req("r", "a", 8)], _fragment()))
    assert not d.grants
    assert pendings(d)["r"].reason == (
        "waiting for 8 GPUs on one host; largest free block is 6 on node-0")


def test_nothing_is_half_granted() -> None:
    d = schedule(snap(GPUS, [req("r", "a", 13, same_host=False)], _fragment()))
    assert not d.grants


def test_without_same_host_a_gang_spans_the_fewest_hosts() -> None:
    d = schedule(snap(GPUS, [req("r", "a", 10, same_host=False)], _fragment()))
    got = grants(d)["r"]
    hosts = {g.host for g in GPUS if g.id in got.gpu_ids}
    assert len(got.gpu_ids) == 10 and hosts == {"node-0", "node-1"}
    assert got.host == "node-0"


def test_best_fit_takes_the_smallest_block_that_holds_the_request() -> None:
    d = schedule(snap(GPUS, [req("r", "a", 2)], _fragment()))
    assert set(grants(d)["r"].gpu_ids) == set(ids(GPUS, "node-2")[6:])


def test_best_fit_keeps_large_blocks_for_large_requests() -> None:
    pending = [req("small", "a", 4, created_at=0), req("big", "b", 6, created_at=1)]
    d = schedule(snap(GPUS, pending, _fragment()))
    assert set(grants(d)) == {"small", "big"}
    assert grants(d)["small"].host == "node-1" and grants(d)["big"].host == "node-0"


def test_a_same_host_request_larger_than_any_host_is_unsatisfiable() -> None:
    d = schedule(snap(GPUS, [req("r", "a", 9)]))
    item = pendings(d)["r"]
    assert item.unsatisfiable
    assert item.reason == "asks for 9 GPUs on one host, but no host in pool p has more than 8 matching GPUs"


def test_no_gpu_is_granted_twice_within_a_pass() -> None:
    pending = [req(f"r{i}", "a", 3, created_at=i) for i in range(10)]
    d = schedule(snap(GPUS, pending))
    taken = [g for grant in d.grants for g in grant.gpu_ids]
    assert len(taken) == len(set(taken)) == 3 * len(d.grants)
    assert len(d.grants) == 6  # two per 8-GPU host
