"""Every pending lease gets a reason in words and a 1-based position in its pool's queue."""

from __future__ import annotations

from allocation.policy.fair import schedule
from allocation.policy.fifo import schedule as fifo
from tests.policy.factories import A100, fleet, pendings, quotas, req, run, snap

GPUS = fleet(2) + fleet(1, pool="other", prefix="o", start_id=101)


def test_every_pending_request_has_a_reason_and_a_position_per_pool() -> None:
    running = [run("full", "z", [g.id for g in GPUS if g.pool == "p"])]
    pending = [req(f"p{i}", "a", 2, created_at=i) for i in range(3)] + \
        [req(f"o{i}", "a", 9, pool="other", created_at=i) for i in range(2)]
    for policy in (schedule, fifo):
        d = policy(snap(GPUS, pending, running))
        items = pendings(d)
        assert len(items) == 5 and all(p.reason for p in items.values())
        assert sorted(items[f"p{i}"].queue_position for i in range(3)) == [1, 2, 3]
        assert sorted(items[f"o{i}"].queue_position for i in range(2)) == [1, 2]


def test_positions_follow_priority_then_age() -> None:
    running = [run("full", "z", [g.id for g in GPUS if g.pool == "p"])]
    pending = [req("old", "a", 1, created_at=0), req("new-high", "a", 1, created_at=5, priority=9),
               req("new", "a", 1, created_at=3)]
    items = pendings(schedule(snap(GPUS, pending, running)))
    assert [items[k].queue_position for k in ("new-high", "old", "new")] == [1, 2, 3]


def test_reasons_say_what_is_in_the_way() -> None:
    half = [run("half", "z", [g.id for g in GPUS if g.host == "node-0"][:2])]
    pending = [
        req("model", "a", 1, model="B200"),
        req("memory", "a", 1, min_memory_mb=10**6),
        req("huge", "a", 9),
        req("spread", "a", 40, same_host=False),
        req("limited", "capped", 1),
        req("over", "capped", 3),
    ]
    items = pendings(schedule(snap(GPUS, pending, half, quota=quotas(("capped", 0, 0)))))
    assert items["model"].reason == "no GPU of model B200 in pool p"
    assert items["memory"].reason == "no GPU with at least 1000000 MB of memory in pool p"
    assert items["huge"].reason == (
        "asks for 9 GPUs on one host, but no host in pool p has more than 8 matching GPUs")
    assert items["spread"].reason == "asks for 40 GPUs, but pool p has only 16 matching GPUs"
    assert items["limited"].reason == "asks for 1 GPU, above team capped's limit 0 in pool p"
    assert all(items[k].unsatisfiable for k in items)


def test_a_busy_pool_says_how_much_is_free_and_where() -> None:
    running = [run("r0", "z", [g.id for g in GPUS if g.host == "node-0"][:2]),
               run("r1", "z", [g.id for g in GPUS if g.host == "node-1"])]
    pending = [req("same", "a", 8, created_at=0), req("spread", "a", 8, same_host=False,
                                                        created_at=1, model="H100")]
    items = pendings(schedule(snap(GPUS, pending, running)))
    assert items["same"].reason == "waiting for 8 GPUs on one host; largest free block is 6 on node-0"
    assert items["spread"].reason == "waiting for 8 GPUs of model H100; 6 free in pool p"


def test_an_unknown_pool_is_explained() -> None:
    items = pendings(schedule(snap(GPUS, [req("x", "a", 1, pool="nowhere")])))
    assert items["x"].reason == "pool nowhere has no schedulable GPUs" and items["x"].unsatisfiable


def test_a_request_for_another_teams_time_sliced_gpus_is_explained() -> None:
    from dataclasses import replace

    gpus = tuple(replace(g, time_sliced=True, shared_team="vision", model=A100) for g in fleet(1))
    items = pendings(schedule(snap(gpus, [req("x", "nlp", 1)])))
    assert "time-sliced and reserved for another team" in items["x"].reason
