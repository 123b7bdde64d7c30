"""The feed of lease changes reads the Redis stream: each change carries the state the lease was
committed in, so replaying from a bookmark shows a lease's history (pending, granted, released),
not its present state three times over."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from allocation.events import LeaseChange
from allocation.watch.feed import Feed, parse_event_id

pytestmark = [pytest.mark.django_db(transaction=True)]


def _on_a_fresh_feed(call: Any) -> Any:
    """Run `call(feed)` on its own event loop with a new Feed (an async Redis client belongs to
    the loop it was made on)."""

    async def run() -> Any:
        feed = Feed()
        try:
            return await call(feed)
        finally:
            await feed.redis().aclose()

    return asyncio.run(run())


def test_replayed_changes_carry_the_state_each_was_committed_in(demo_fleet: Any, make_user: Any) -> None:
    from allocation.engine import run_pass
    from allocation.services.leases import lease_create, lease_release

    alice = make_user("alice", teams=("vision",))
    bookmark: str = _on_a_fresh_feed(lambda feed: feed.end_of_log())
    lease = lease_create(user=alice, pool="training", gpus=1)[0]
    run_pass()
    lease_release(lease=lease.pk, actor="alice")
    head: str = _on_a_fresh_feed(lambda feed: feed.end_of_log())
    backlog: list[tuple[str, LeaseChange]] = _on_a_fresh_feed(lambda feed: feed.backlog(bookmark, head))
    mine = [change for _, change in backlog if change.lease_id == str(lease.pk)]
    assert [change.state for change in mine] == ["pending", "granted", "released"]
    assert {(change.pool_id, change.team_id) for change in mine} == {(lease.pool_id, lease.team_id)}
    ids = [parse_event_id(event_id) for event_id, _ in backlog]
    assert backlog[-1][0] == head and ids == sorted(set(ids))  # in stream order, each once
