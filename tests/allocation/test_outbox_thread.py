"""The web server's outbox relay thread (allocation/outbox_thread.py): a commit wakes it, it
publishes every row exactly once, and wakes that pile up while it runs cost one more run, not one
each."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from allocation import outbox
from allocation.events import PUBLISHED, STREAM, LeaseChange
from allocation.models import LeaseOutbox
from stacktools.ready import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def background(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Writers leave publishing to the relay thread; yields the names of the threads that relayed."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(STREAM, PUBLISHED)
    monkeypatch.setattr(outbox, "_quiet_until", 0.0)
    relayed_by: list[str] = []
    real = outbox.relay_after_write

    def recording(**kwargs: Any) -> int:
        relayed_by.append(threading.current_thread().name)
        time.sleep(0.05)  # a slow relay, so wakes pile up while it runs
        return real(**kwargs)

    monkeypatch.setattr(outbox, "relay_after_write", recording)
    monkeypatch.setattr(outbox, "_thread", None)
    outbox.relay_in_background()
    yield relayed_by
    outbox._thread.stop()
    client.delete(STREAM, PUBLISHED)


def test_commits_wake_one_thread_that_publishes_every_row_once(background: list[str]) -> None:
    from django.db import transaction

    for n in range(30):  # thirty transactions, one event each: thirty wakes
        with transaction.atomic():
            outbox.announce([LeaseChange(f"00000000-0000-0000-0000-{n:012d}", 1, 1, "pending")])
    wait_for(lambda: not LeaseOutbox.objects.filter(stream_id__isnull=True).exists(), timeout=30,
             what="every outbox row published")
    client: Any = redis.Redis.from_url(settings.REDIS_URL)
    leases = [fields[b"lease"].decode() for _, fields in client.xrange(STREAM)]
    assert sorted(leases) == [f"00000000-0000-0000-0000-{n:012d}" for n in range(30)]  # each once
    assert set(background) == {"gpupool-outbox-relay"}  # never the writer's thread
    assert 1 <= len(background) < 30  # wakes during a run coalesced


def test_a_lease_request_is_published_by_the_thread(background: list[str], demo_fleet: Any,
                                                    make_user: Any) -> None:
    from allocation.services.leases import lease_create

    alice = make_user("alice", teams=("vision",))
    lease, _ = lease_create(user=alice, pool="training", gpus=1)
    client: Any = redis.Redis.from_url(settings.REDIS_URL)
    wait_for(lambda: any(f[b"lease"].decode() == str(lease.pk) for _, f in client.xrange(STREAM)), timeout=30,
             what="the new lease's event on the stream")
    assert background and set(background) == {"gpupool-outbox-relay"}
