"""Priority blocks (allocation/policy/blocks.py): the highest-priority request that cannot start
now gets a block of hosts before the phases begin, and lower priorities keep off it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from allocation.policy import blocks
from allocation.policy.codes import PendingCode
from allocation.policy.fair import schedule
from allocation.policy.types import RequestView, RunningView
from tests.policy.factories import fleet, grants, ids, pendings, quotas, req, run, snap

NOW = 10_000.0
GPUS = fleet(3)  # node-0, node-1, node-2: 8 GPUs each


@pytest.fixture(params=[True, False], ids=["blocks", "no-blocks"])
def enabled(request: pytest.FixtureRequest) -> Iterator[bool]:
    saved = blocks.ENABLED
    blocks.ENABLED = request.param
    yield request.param
    blocks.ENABLED = saved


def _running(free: tuple[int, int, int] = (4, 3, 3), end: float | None = None) -> list[RunningView]:
    """Team z's leases leave `free` GPUs on node-0, node-1, node-2."""
    return [run(f"z{h}", "z", ids(GPUS, f"node-{h}")[:8 - n], expected_end=end) for h, n in enumerate(free)]


def _large() -> RequestView:
    """Team a, no guarantee (it borrows: the second phase), high priority, pool-wide: 12 of the 10 free."""
    return req("large", "a", 12, created_at=0, priority=100, same_host=False)


def test_a_request_within_its_guarantee_keeps_off_the_block_when_it_fits_elsewhere(enabled: bool) -> None:
    # The block: node-0 (4 free) and node-1 (3 free, before node-2 by name), 16 GPUs for 12.
    small = req("small", "c", 3, created_at=1)
    d = schedule(snap(GPUS, [_large(), small], _running(), quota=quotas(("c", 8, None))))
    assert grants(d)["small"].host == ("node-2" if enabled else "node-1")  # best fit alone: node-1
    assert pendings(d)["large"].code == PendingCode.NO_CAPACITY


def test_a_request_within_its_guarantee_still_gets_the_block_when_nothing_else_fits() -> None:
    # Its guarantee comes first (tests/policy/test_properties.py): 4 GPUs fit only on node-0.
    small = req("small", "c", 4, created_at=1)
    d = schedule(snap(GPUS, [_large(), small], _running(), quota=quotas(("c", 8, None))))
    assert grants(d)["small"].host == "node-0"


def test_a_borrowing_request_of_lower_priority_is_behind_the_block() -> None:
    # Team b borrows too: behind the large one, it may not take node-0 or node-1, and 3 GPUs
    # fit on node-2 only if node-2 were free of the block, which it is.
    fits_off = req("off", "b", 3, created_at=1)
    d = schedule(snap(GPUS, [_large(), fits_off], _running()))
    assert grants(d)["off"].host == "node-2"
    only_on = req("on", "b", 4, created_at=1)
    d = schedule(snap(GPUS, [_large(), only_on], _running()))
    assert "on" not in grants(d)
    assert pendings(d)["on"].code == PendingCode.BEHIND_HIGHER_PRIORITY


def test_the_block_is_granted_once_its_hosts_are_free() -> None:
    d = schedule(snap(GPUS, [_large(), req("small", "c", 1, created_at=1)],
                      _running(free=(8, 5, 1)), quota=quotas(("c", 8, None))))
    assert {gpu for gpu in grants(d)["large"].gpu_ids} <= set(ids(GPUS, "node-0") + ids(GPUS, "node-1"))
    assert grants(d)["small"].host == "node-2"


def test_the_block_has_an_estimated_start_from_its_hosts_leases() -> None:
    d = schedule(snap(GPUS, [_large()], _running(end=NOW + 600), estimate_starts=True))
    assert pendings(d)["large"].estimated_start == NOW + 600


def test_a_short_request_that_ends_before_the_block_starts_may_use_it() -> None:
    short = req("short", "b", 4, created_at=1, expected_duration_s=300)
    d = schedule(snap(GPUS, [_large(), short], _running(end=NOW + 600)))
    assert grants(d)["short"].host == "node-0"


def test_no_block_when_nothing_of_lower_priority_waits(enabled: bool) -> None:
    same = req("same", "b", 4, created_at=1, priority=100)
    d = schedule(snap(GPUS, [_large(), same], _running(), quota=quotas(("b", 8, None))))
    assert grants(d)["same"].host == "node-0"  # its guarantee, best fit, no block to keep off
