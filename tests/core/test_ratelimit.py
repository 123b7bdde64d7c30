"""The Redis token bucket (core.ratelimit) on a real Redis: a burst of `capacity`, then the refill
rate; one token to one taker however many take at once; open while Redis cannot be reached,
without asking it again for RETRY_S."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from core import ratelimit
from core.ratelimit import Taken, TokenBucket, parse_rate
from stacktools.ready import free_port


@pytest.fixture
def bucket() -> Iterator[tuple[TokenBucket, str]]:
    from allocation.events import redis_client

    key = f"gpupool:rate:test:{uuid.uuid4().hex}"
    yield TokenBucket(redis_client), key
    redis_client().delete(key)


def test_a_burst_of_capacity_then_the_refill_rate(bucket: tuple[TokenBucket, str]) -> None:
    limiter, key = bucket
    takes = [limiter.take(key, capacity=5, period_s=5.0) for _ in range(6)]  # one a second
    assert [t.allowed for t in takes] == [True] * 5 + [False]
    assert 0.5 < takes[-1].wait_s <= 1.0  # one token: 1 s, less what refilled meanwhile
    time.sleep(takes[-1].wait_s + 0.05)
    assert limiter.take(key, capacity=5, period_s=5.0).allowed  # the one token refilled
    assert not limiter.take(key, capacity=5, period_s=5.0).allowed  # and no second one yet


def test_takers_at_once_never_get_more_tokens_than_the_bucket_holds(bucket: tuple[TokenBucket, str]) -> None:
    limiter, key = bucket
    barrier, allowed, lock = threading.Barrier(16), [0], threading.Lock()

    def take() -> None:
        barrier.wait()
        for _ in range(40):
            if limiter.take(key, capacity=100, period_s=3600.0).allowed:
                with lock:
                    allowed[0] += 1

    threads = [threading.Thread(target=take) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert allowed[0] == 100  # of 640 asked, within a second: 100 + 0.03 refilled


def test_an_idle_bucket_expires_once_it_would_be_full(bucket: tuple[TokenBucket, str]) -> None:
    from allocation.events import redis_client

    limiter, key = bucket
    limiter.take(key, capacity=10, period_s=60.0)
    assert 1000 < redis_client().pttl(key) <= 7000  # one token to refill: 6 s, plus a second


def test_while_redis_cannot_be_reached_every_request_is_let_through(caplog: pytest.LogCaptureFixture,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []

    def unreachable() -> Any:
        made.append(1)
        return redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)

    monkeypatch.setattr(ratelimit, "RETRY_S", 0.5)
    limiter = TokenBucket(unreachable)
    assert limiter.take("k", capacity=1, period_s=60.0) == Taken(True)
    assert "rate limit store (Redis) unavailable" in caplog.text
    # For RETRY_S it does not ask again: one failure costs one request the connect.
    assert [limiter.take("k", capacity=1, period_s=60.0) for _ in range(50)] == [Taken(True)] * 50
    assert len(made) == 1
    time.sleep(0.6)
    assert limiter.take("k", capacity=1, period_s=60.0) == Taken(True)
    assert len(made) == 2


@pytest.mark.parametrize(("rate", "parsed"), [("600/min", (600, 60)), ("10/s", (10, 1)), ("5000/day", (5000, 86400)),
                                              ("1/hour", (1, 3600)), ("100000000/min", (100000000, 60))])
def test_rates_read_as_drf_wrote_them(rate: str, parsed: tuple[int, int]) -> None:
    assert parse_rate(rate) == parsed


@pytest.mark.parametrize("rate", ["600", "0/min", "-1/min", "ten/min", "5/week", "5/"])
def test_a_rate_that_is_not_one_is_refused(rate: str) -> None:
    with pytest.raises(ValueError, match="a rate is N/s"):
        parse_rate(rate)
