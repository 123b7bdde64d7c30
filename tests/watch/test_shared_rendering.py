"""A lease change is rendered once per process, however many streams and long polls send it
(allocation/watch/rendered.py); what each stream may see is decided before, on the change's ids."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from allocation.events import LeaseChange

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_change_asked_for_by_a_hundred_subscribers_at_once_is_rendered_once(demo_fleet: Any,
                                                                                make_user: Any) -> None:
    from allocation.services.leases import lease_create
    from allocation.watch.rendered import SharedRenderer

    alice = make_user("alice", teams=("vision",))
    lease = lease_create(user=alice, pool="training", gpus=1)[0]
    other = lease_create(user=alice, pool="training", gpus=2)[0]
    changes = [("1-0", LeaseChange(str(lease.pk), lease.pool_id, lease.team_id, "pending")),
               ("1-1", LeaseChange(str(other.pk), other.pool_id, other.team_id, "released"))]

    async def subscribers() -> tuple[SharedRenderer, list[Any]]:
        shared = SharedRenderer()
        # Some ask for one change, some for both: each change is still read and rendered once.
        answers = await asyncio.gather(*(shared.get(changes if i % 2 else changes[:1]) for i in range(100)))
        return shared, answers

    shared, answers = asyncio.run(subscribers())
    assert shared.renders == 2
    assert len({a[0].frame for a in answers}) == 1 and len({a[1].frame for a in answers if len(a) > 1}) == 1
    frame = answers[1][1].frame.decode()
    assert frame.startswith("id: 1-1\nevent: lease\ndata: {") and frame.endswith("\n\n")
    data = json.loads(frame.split("data: ", 1)[1])
    # The state the change announced; the rest as the API renders the lease.
    assert data["id"] == str(other.pk) and data["state"] == "released" and data["gpu_count"] == 2


def test_a_stream_filters_a_change_before_anything_is_rendered(demo_fleet: Any, make_user: Any) -> None:
    from allocation.watch.access import Viewer, change_filter
    from allocation.watch.feed import Feed

    carol = make_user("carol", teams=("nlp",))
    teams = frozenset(carol.teams.values_list("pk", flat=True))
    viewer = Viewer(user=carol, is_admin=False, team_ids=teams)
    wants = change_filter(viewer, "", "")
    asked: list[LeaseChange] = []

    def counting(change: LeaseChange) -> bool:
        asked.append(change)
        return wants(change)

    async def offered() -> tuple[int, int]:
        feed = Feed()
        unfiled = await feed.subscribe(wants)
        filed = await feed.subscribe(counting, teams=teams)
        try:
            feed.dispatch("1-0", LeaseChange("00000000-0000-0000-0000-000000000001", 1, -1, "pending"))
            feed.dispatch("1-1", LeaseChange("00000000-0000-0000-0000-000000000002", 1, min(teams), "pending"))
            return unfiled.queue.qsize(), filed.queue.qsize()
        finally:
            feed.unsubscribe(unfiled)
            feed.unsubscribe(filed)
            assert not feed.by_team and not feed.unindexed
            await feed.redis().aclose()

    # Another team's change never reaches the stream's queue; filed under its teams, the stream is
    # not even asked about it.
    assert asyncio.run(offered()) == (1, 1)
    assert [change.lease_id[-1] for change in asked] == ["2"]


def test_subscribers_arriving_at_once_share_one_reader_of_the_change_log(db: Any) -> None:
    from allocation.watch.feed import Feed

    async def readers() -> int:
        feed = Feed()
        subs = await asyncio.gather(*(feed.subscribe(lambda change: True) for _ in range(20)))
        try:
            return sum(task.get_name() == "lease-feed" for task in asyncio.all_tasks())
        finally:
            for sub in subs:
                feed.unsubscribe(sub)
            await feed.redis().aclose()

    assert asyncio.run(readers()) == 1  # each change reaches each subscriber once
