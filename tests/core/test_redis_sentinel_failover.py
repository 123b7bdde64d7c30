"""Every Redis client of gpupool follows a Sentinel failover without being made again: the cache's,
the event stream's (sync), the watch feed's (asyncio) and the broker's (kombu's sentinel://
transport, as pool.settings configures Celery). A real group (tests/faults/sentinel_group.py: a
master, a replica, three sentinels on loopback); its master is killed with SIGKILL, and each
client, the same object as before, works again on the promoted replica, the only server left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from allocation import events
from core.cache import RedisCache
from core.redis_clients import RedisTarget, async_client, parse_sentinels
from stacktools.ready import wait_until
from tests.faults.sentinel_group import MASTER_NAME, SentinelGroup, ask, missing_reason

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=f"Redis HA tier skipped: {missing_reason()}")

#: Failure detection (1 s) plus the election and promotion: seconds; clients then follow at once.
FOLLOW_S = 30


@pytest.fixture
def group(tmp_path: Path) -> Iterator[SentinelGroup]:
    built = SentinelGroup(tmp_path)
    try:
        built.start()
        yield built
    finally:
        built.kill()


def _works(step: Callable[[], Any]) -> bool:
    try:
        return bool(step())
    except Exception:  # the dead master's connections, or no master yet: the next try asks again
        return False


def test_every_client_follows_a_failover_without_a_restart(group: SentinelGroup, settings: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = RedisTarget(sentinels=parse_sentinels(group.env()["REDIS_SENTINELS"]), master_name=MASTER_NAME)
    settings.REDIS_TARGET = target
    monkeypatch.setattr(events, "_client", None)  # this process's stream client, made for the group
    stream = events.redis_client()
    cache = RedisCache(target.display(), {"KEY_PREFIX": "failover", "OPTIONS": {
        "socket_connect_timeout": 1.0, "socket_timeout": 2.0, "target": target}})
    broker = Connection(target.broker_url(), transport_options=target.broker_transport_options())
    loop = asyncio.new_event_loop()
    feed = async_client(target, socket_connect_timeout=2, socket_timeout=2)

    def publish(body: str) -> bool:
        """Through the queue and back (acknowledged: a message left unacknowledged is restored)."""
        queue = broker.SimpleQueue("failover-test")
        try:
            queue.put(body)
            message = queue.get(timeout=2)
            message.ack()
            return bool(message.payload == body)
        finally:
            queue.close()

    def broker_works(body: str) -> bool:
        if _works(lambda: publish(body)):
            return True
        broker.close()  # as a Celery worker does on a connection error: the same Connection reconnects
        return False

    def cache_works(value: str) -> bool:
        cache.set("k", value)  # fails open: a write to no master is dropped, and the read tells
        return bool(cache.get("k") == value)

    steps: dict[str, Callable[[str], bool]] = {
        "cache": cache_works,
        "stream": lambda v: bool(stream.xadd("failover:stream", {"v": v})),
        "feed": lambda v: loop.run_until_complete(feed.set("failover:feed", v)) is True,
        "broker": broker_works,
    }
    old = group.master()
    for name, step in steps.items():
        assert step("before"), f"{name} does not work before the failover"
    group.kill_master()
    killed = time.monotonic()
    new = group.wait_failover(old)
    promoted_s = time.monotonic() - killed
    followed = {}
    try:
        for name, step in steps.items():
            follows = wait_until(partial(_works, partial(step, "after")), timeout=FOLLOW_S, interval=0.1)
            assert follows, f"{name} did not follow the failover from {old} to {new} in {FOLLOW_S} s\n{group.logs()}"
            followed[name] = round(time.monotonic() - killed, 2)
        # What they wrote after is on the new master, the one server left.
        assert ask(new, "GET", "failover:feed") == "after"
        assert ask(new, "XLEN", "failover:stream") >= 1
    finally:
        broker.release()
        loop.run_until_complete(feed.aclose())
        loop.close()
    print(f"\n[sentinel failover] promoted after {promoted_s:.2f} s; clients following at {followed}")
