"""The per-user rate of lease requests (`GPUPOOL_LEASE_RATE`, default `600/min`), one limit for
every web process: a token bucket per user in Redis (core.ratelimit), failing open while Redis
is down. Over it: 429 `throttled` with Retry-After, DRF's body and header as before."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from allocation.events import redis_client
from core.ratelimit import TokenBucket, parse_rate

BUCKETS = TokenBucket(redis_client)
KEY_PREFIX = "gpupool:rate"


class LeaseCreateThrottle(BaseThrottle):
    """Lease requests per user (`GPUPOOL_LEASE_RATE`: N/s, N/min, N/hour or N/day; a burst of N,
    then N a period). The rate is read at request time, so an override of REST_FRAMEWORK in
    tests or settings takes effect; a new rate starts new buckets."""

    scope = "lease_create"

    def __init__(self) -> None:
        self._wait_s: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        taken, self._wait_s = self.take(request, 1)
        return taken == 1

    def take(self, request: Request, wanted: int) -> tuple[int, float]:
        """Take up to `wanted` tokens of the user's bucket: (how many were taken, seconds until the
        next token when fewer). A batch of N lease requests takes N (allocation/api/lease_batch.py)."""
        user = request.user
        who = f"user:{user.pk}" if user is not None and user.is_authenticated else f"ip:{self.get_ident(request)}"
        return _take(who, wanted)

    def wait(self) -> float | None:
        """Seconds until the next request would be let through (DRF rounds it up for Retry-After)."""
        return self._wait_s


def _take(who: str, wanted: int) -> tuple[int, float]:
    """Up to `wanted` tokens of `who`'s bucket at the rate read now: (taken, seconds to wait)."""
    rate = api_settings.DEFAULT_THROTTLE_RATES.get(LeaseCreateThrottle.scope)
    if rate is None:
        return wanted, 0.0
    capacity, period_s = parse_rate(str(rate))
    return BUCKETS.take_many(f"{KEY_PREFIX}:{LeaseCreateThrottle.scope}:{capacity}/{period_s}:{who}", wanted,
                             capacity=capacity, period_s=period_s)


def lease_rate_take(user: Any) -> tuple[bool, float | None]:
    """One lease request of an authenticated `user` from the same bucket as LeaseCreateThrottle
    (the fast lease path, allocation/api/fast/app.py): (allowed, seconds to wait when not)."""
    taken, wait_s = _take(f"user:{user.pk}", 1)
    return (True, None) if taken else (False, wait_s)
