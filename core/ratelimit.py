"""A rate limit shared by every web process: a token bucket in Redis, taken from in one Lua
script, so that two processes (or two threads) can never both spend the last token.

A bucket of `capacity` tokens refills at `capacity / period_s` tokens a second; a request takes
one token (a batch of N requests N tokens: as many as there are), or is refused with the time
until the next one. So `N/min` lets a client make a
burst of N requests, then N a minute: over any window of W seconds at most N + N·W/60 (the
long-run rate is exactly the setting). The clock is Redis's own (`TIME`, read inside the
script), the one clock every process shares; the bucket's key expires once it would be full
again, so an idle client costs Redis nothing.

No new dependency: the script is a dozen lines, where a library would bring its own Redis
connection handling besides the one the project keeps (the Redis client is given, from the one
place the project makes them).

When Redis cannot be reached (or answers with an error) the limiter lets the request through
(fails open), logs that at most once a minute per process, and does not ask Redis again for
`RETRY_S`, so a Redis that hangs costs one request per process the socket timeout, not every
request. Lease requests are the API's main job and must go on during a Redis outage; what a
team may queue meanwhile is still bounded in PostgreSQL by the pools' queue caps
(allocation.services.queue_caps).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

RETRY_S = 5.0  # after a failure, how long the limiter lets everything through without asking Redis

# KEYS[1]: the bucket (a hash: tokens, at); ARGV: capacity, refill per second, tokens wanted (1
# when absent). Takes as many of the wanted tokens as there are; returns {tokens taken, 0} when it
# took them all, else {tokens taken, microseconds until the next token}.
_TAKE_LUA = """
if redis.replicate_commands then redis.replicate_commands() end
local capacity = tonumber(ARGV[1])
local refill = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or capacity
local at = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * refill)
local wanted = tonumber(ARGV[3]) or 1
local taken = math.min(wanted, math.floor(tokens))
tokens = tokens - taken
local wait_us = 0
if taken < wanted then
  wait_us = math.ceil((1 - tokens) / refill * 1000000)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.6f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - tokens) / refill * 1000) + 1000)
return {taken, wait_us}
"""


@dataclass(frozen=True)
class Taken:
    """The answer for one request: `allowed`, else `wait_s`, the seconds until a token."""

    allowed: bool
    wait_s: float = 0.0


def parse_rate(rate: str) -> tuple[int, int]:
    """`N/period` as (N, period in seconds): the period's first letter, s, m, h or d (DRF's
    format: `600/min`, `10/s`, `5000/day`). ValueError for anything else."""
    number, _, period = rate.partition("/")
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(period[:1])
    if seconds is None or not number.isdigit() or int(number) < 1:
        raise ValueError(f"a rate is N/s, N/min, N/hour or N/day with N >= 1, got {rate!r}")
    return int(number), seconds


class TokenBucket:
    """Token buckets in the Redis `client()` gives (called on each use: the project's one
    client, which may be replaced, e.g. after a Sentinel failover)."""

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client
        self._script: Any = None
        self._script_of: Any = None  # the client the script was registered on
        self._skip_until = 0.0  # monotonic: no Redis call before this (after a failure)
        self._warned_at = -math.inf
        self._lock = threading.Lock()

    def take(self, key: str, *, capacity: int, period_s: float) -> Taken:
        """Take one token from the bucket `key` (`capacity` tokens, refilled over `period_s`).
        Allowed without asking Redis while it was failing less than RETRY_S ago."""
        taken, wait_s = self.take_many(key, 1, capacity=capacity, period_s=period_s)
        return Taken(True) if taken else Taken(False, wait_s)

    def take_many(self, key: str, wanted: int, *, capacity: int, period_s: float) -> tuple[int, float]:
        """Take up to `wanted` tokens from the bucket `key` at once (a batch of N requests takes N):
        (how many were taken, seconds until the next token when fewer than `wanted`). All of
        them, without asking Redis, while it was failing less than RETRY_S ago."""
        if time.monotonic() < self._skip_until:
            return wanted, 0.0
        try:
            taken, wait_us = self._take_script()(keys=[key], args=[capacity, capacity / period_s, wanted])
        except RedisError as exc:
            self._failed(exc)
            return wanted, 0.0
        return int(taken), int(wait_us) / 1_000_000

    def _take_script(self) -> Any:
        client = self._client()
        if self._script is None or self._script_of is not client:
            self._script, self._script_of = client.register_script(_TAKE_LUA), client
        return self._script

    def _failed(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self._skip_until = now + RETRY_S
            warn = now - self._warned_at >= 60.0
            if warn:
                self._warned_at = now
        if warn:
            logger.warning("rate limit store (Redis) unavailable (%s: %s); letting requests through for %.0f s",
                           type(exc).__name__, exc, RETRY_S)
