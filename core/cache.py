"""The Redis cache backend, without rebuilding a client on every call.

Django's RedisCacheClient makes a new `redis.Redis` object for each cache operation (building its
table of response callbacks costs ~50 µs, more than the round trip to a local Redis). A Redis
object over a connection pool is safe to share between threads, so one per pool is kept. The
lease-create throttle and the capacity-profile cache make three such calls per lease request."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.cache.backends import redis as django_redis

if TYPE_CHECKING:
    import redis


class RedisCacheClient(django_redis.RedisCacheClient):
    # Django's own client defines these; they are private, so the stubs leave them out.
    _client: type[redis.Redis]
    _get_connection_pool: Callable[[bool], redis.ConnectionPool]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
