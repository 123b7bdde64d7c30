"""Small requests may start ahead of a blocked large one only if they cannot delay it."""

from __future__ import annotations

from allocation.policy.fair import schedule
from allocation.policy.types import RequestView, RunningView
from tests.policy.factories import A100, fleet, grants, ids, pendings, req, run, snap

NOW = 10_000.0
GPUS = fleet(2)


def _busy(node1_free: bool = False) -> list[RunningView]:
    """node-0: 6 GPUs until NOW+1000 (2 free); node-1: 4 (or 8) GPUs until NOW+5000."""
    node1 = ids(GPUS, "node-1")
    return [run("l0", "z", ids(GPUS, "node-0")[:6], expected_end=NOW + 1000),
            run("l1", "z", node1[:4] if node1_free else node1, expected_end=NOW + 5000)]


def _head() -> RequestView:
    return req("head", "a", 8, created_at=0, priority=10)


def test_the_blocked_head_gets_an_estimated_start_from_running_leases() -> None:
    d = schedule(snap(GPUS, [_head()], _busy(), now=NOW))
    assert pendings(d)["head"].estimated_start == NOW + 1000
    assert pendings(d)["head"].queue_position == 1


def test_a_long_job_may_use_a_host_the_head_does_not_wait_for() -> None:
    pending = [_head(), req("long", "b", 2, created_at=1, expected_duration_s=3000)]
    d = schedule(snap(GPUS, pending, _busy(node1_free=True), now=NOW))
    assert grants(d)["long"].host == "node-1"


def test_a_long_job_that_would_delay_the_head_is_refused() -> None:
    pending = [_head(), req("long", "b", 2, created_at=1, expected_duration_s=3000)]
    d = schedule(snap(GPUS, pending, _busy(), now=NOW))
    assert not d.grants
    assert pendings(d)["long"].reason.startswith("waiting behind 1 higher-priority request;")
    assert "lease head" in pendings(d)["long"].reason


def test_a_job_of_unknown_duration_never_uses_the_reserved_host() -> None:
    d = schedule(snap(GPUS, [_head(), req("unknown", "b", 2, created_at=1)], _busy(), now=NOW))
    assert not d.grants


def test_a_short_job_that_ends_before_the_heads_start_may_backfill() -> None:
    pending = [_head(), req("short", "b", 2, created_at=1, expected_duration_s=500)]
    d = schedule(snap(GPUS, pending, _busy(), now=NOW))
    assert grants(d)["short"].host == "node-0"


def test_requests_for_other_gpu_models_are_not_behind_the_head() -> None:
    gpus = GPUS + fleet(1, model=A100, prefix="a100", start_id=101)
    pending = [req("head", "a", 8, created_at=0, model="H100"),
               req("a100", "b", 4, created_at=1, model="A100")]
    d = schedule(snap(gpus, pending, _busy(), now=NOW))
    assert "a100" in grants(d)


def test_a_pool_wide_head_reserves_all_gpus_it_can_use() -> None:
    pending = [req("head", "a", 12, created_at=0, same_host=False),
               req("long", "b", 2, created_at=1, expected_duration_s=3000),
               req("short", "b", 2, created_at=2, expected_duration_s=100)]
    d = schedule(snap(GPUS, pending, _busy(node1_free=True), now=NOW))
    assert pendings(d)["head"].estimated_start == NOW + 1000
    assert set(grants(d)) == {"short"}


def test_a_higher_priority_request_behind_in_time_is_not_held_back() -> None:
    pending = [req("head", "a", 8, created_at=0, priority=0),
               req("urgent", "b", 2, created_at=5, priority=50, expected_duration_s=9000)]
    d = schedule(snap(GPUS, pending, _busy(), now=NOW))
    assert "urgent" in grants(d)  # it is ahead of the 8-GPU request in the order
