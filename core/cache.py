"""The Redis cache backend, without rebuilding a client on every call.

Django's RedisCacheClient makes a new `redis.Redis` object for each cache operation (building its
table of response callbacks costs ~50 µs, more than the round trip to a local Redis). A Redis
object over a connection pool is safe to share between threads, so one is kept, made by
core.redis_clients like every other Redis client of gpupool (a URL, or a Sentinel group's master).
The capacity-profile cache is read on every lease request (the per-user lease rate is not a
cache: core.ratelimit, a token bucket of its own in Redis).

The client is kept per process, not per backend instance: Django keeps its cache backends in a
context-local store, and the ASGI front runs each request in a copy of the event loop's context
(a2wsgi), so every request built a backend of its own, and with it a new client, a new pool and
a new TCP connection to Redis (with redis-py's CLIENT SETINFO on it): ~11% of a lease create's
web time in the flame graphs of bench/bench_lease_path.py.

The cache is an optimisation and a debounce, never the record: when Redis cannot be reached every
operation behaves as on an empty cache (a get misses, an add succeeds, a write is dropped), with a
warning at most once a minute per process. So while Redis is down the API keeps answering from
PostgreSQL instead of failing (and the lease rate lets requests through: core.ratelimit)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.cache.backends import redis as django_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from core.redis_clients import RedisTarget, sync_client

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)


class RedisCacheClient(django_redis.RedisCacheClient):
    """One client for every operation, from core.redis_clients: of the target in OPTIONS
    (`target`: a Sentinel group's master, followed across failovers), else of LOCATION's URL."""

    _pool_options: dict[str, Any]  # Django's own; private, so the stubs leave it out

    def __init__(self, servers: list[str], *args: Any, target: RedisTarget | None = None, **kwargs: Any) -> None:
        super().__init__(servers, *args, **kwargs)
        self._target = target if target is not None else RedisTarget(url=servers[0])
        self._shared: redis.Redis | None = None

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        if self._shared is None:
            self._shared = _client(self._target, self._pool_options)
        return self._shared


_clients: dict[tuple[RedisTarget, tuple[tuple[str, Any], ...]], redis.Redis] = {}
_clients_lock = threading.Lock()


def _client(target: RedisTarget, options: dict[str, Any]) -> redis.Redis:
    """The process's client of `target` with these connection options (made on first use)."""
    key = (target, tuple(sorted((name, repr(value)) for name, value in options.items())))
    client = _clients.get(key)
    if client is None:
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = sync_client(target, **options)
    return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient


_FAIL_OPEN: dict[str, Any] = {
    "get": lambda args, kwargs: kwargs.get("default", args[1] if len(args) > 1 else None),
    "get_many": lambda args, kwargs: {},
    "add": lambda args, kwargs: True,
    "has_key": lambda args, kwargs: False,
    "set_many": lambda args, kwargs: [],
}
_warned_at = 0.0


def _unreachable(name: str, exc: Exception) -> None:
    global _warned_at
    now = time.monotonic()
    if now - _warned_at >= 60.0:
        _warned_at = now
        logger.warning("Redis cache unreachable (%s: %s); serving as an empty cache", name, exc)


def _fail_open(name: str) -> Callable[..., Any]:
    base = getattr(django_redis.RedisCache, name)

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return base(self, *args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            _unreachable(name, exc)
            fallback = _FAIL_OPEN.get(name)
            return fallback(args, kwargs) if fallback is not None else None

    method.__name__ = name
    return method


for _name in ("get", "get_many", "add", "has_key", "set", "set_many", "touch", "delete",
              "delete_many", "clear"):
    setattr(RedisCache, _name, _fail_open(_name))
