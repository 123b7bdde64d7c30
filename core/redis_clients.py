"""Where Redis is and how to reach it: the one place every Redis user of gpupool asks.

Four users, none of which parses settings: the Celery broker (`pool/settings.py` takes
`RedisTarget.broker_url` and `RedisTarget.broker_transport_options`), the Django cache
(`core/cache.py`), the lease event stream's writer (`allocation/events.py`) and the watch feed's
reader (`allocation/watch/feed.py`), which take `sync_client` / `async_client`.

Redis is named one of two ways (`target_from_env`):
- `REDIS_URL`: one server (`redis://…`, `rediss://…`, `unix:///path.sock?db=N`); with neither
  variable set, the embedded server under var/ (`core.embedded`).
- `REDIS_SENTINELS` (`host:port,host:port,…`) and `REDIS_MASTER_NAME` (default `gpupool`): a
  Sentinel group. Every client asks the sentinels where the master is when it connects, and again
  whenever a connection fails, so after a failover each one follows the new master without a
  restart (redis-py's Sentinel pools; kombu's `sentinel://` transport for the broker).
  `REDIS_PASSWORD` authenticates to the master, `REDIS_SENTINEL_PASSWORD` to the sentinels,
  `REDIS_DB` picks the database (default 0). Setting `REDIS_URL` as well is refused: one of the
  two would be silently ignored.

No Django at import: pool.settings builds its target here while settings are being read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from core.embedded import broker_url as kombu_spelling

if TYPE_CHECKING:
    import redis
    import redis.asyncio

DEFAULT_MASTER_NAME = "gpupool"
SENTINEL_PORT = 26379
# A sentinel that does not answer must not hold a client up: the next one is asked.
SENTINEL_TIMEOUT_S = 1.0


class RedisConfigError(ValueError):
    """REDIS_* variables that do not name one Redis."""


@dataclass(frozen=True)
class RedisTarget:
    """One Redis: a URL, or a Sentinel group and the name of its master."""

    url: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = DEFAULT_MASTER_NAME
    db: int = 0
    password: str | None = None
    sentinel_password: str | None = None

    @property
    def uses_sentinel(self) -> bool:
        return bool(self.sentinels)

    def display(self) -> str:
        """The target in words, without passwords: the URL, or `sentinel://h:p,h:p/MASTER/DB`."""
        if not self.uses_sentinel:
            return self.url
        hosts = ",".join(_address(host, port) for host, port in self.sentinels)
        return f"sentinel://{hosts}/{self.master_name}/{self.db}"

    def broker_url(self) -> str:
        """kombu's URL: the Redis URL in its spelling, or one `sentinel://` URL per sentinel
        (`;`-separated alternates; the first carries the master's password and the database)."""
        if not self.uses_sentinel:
            return kombu_spelling(self.url)
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return ";".join(f"sentinel://{auth}{_address(host, port)}/{self.db}" for host, port in self.sentinels)

    def broker_transport_options(self) -> dict[str, object]:
        """What kombu's Sentinel transport needs beside the URL (nothing for a plain URL)."""
        if not self.uses_sentinel:
            return {}
        return {"master_name": self.master_name,
                "sentinel_kwargs": self._sentinel_kwargs(SENTINEL_TIMEOUT_S, SENTINEL_TIMEOUT_S)}

    def _sentinel_kwargs(self, connect_timeout: float | None, timeout: float | None) -> dict[str, Any]:
        """How a client talks to the sentinels themselves (their own password, short timeouts)."""
        kwargs: dict[str, Any] = {"socket_connect_timeout": min(connect_timeout or SENTINEL_TIMEOUT_S,
                                                                SENTINEL_TIMEOUT_S),
                                  "socket_timeout": min(timeout or SENTINEL_TIMEOUT_S, SENTINEL_TIMEOUT_S)}
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs

    def _master_kwargs(self, options: Mapping[str, Any]) -> dict[str, Any]:
        kwargs = {"db": self.db, **options}
        if self.password:
            kwargs["password"] = self.password
        return kwargs


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_sentinels(value: str) -> tuple[tuple[str, int], ...]:
    """`host:port,host:port` (a missing port is 26379; `[::1]:26379` for IPv6) as (host, port)
    pairs; RedisConfigError naming the entry that is not one."""
    found = []
    for entry in (item.strip() for item in value.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or "]" in port:  # no port (or only an IPv6 address's colons)
            host, port = entry, str(SENTINEL_PORT)
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RedisConfigError(f"REDIS_SENTINELS: {entry!r} is not host:port")
        found.append((host, int(port)))
    if not found:
        raise RedisConfigError("REDIS_SENTINELS names no sentinel")
    return tuple(found)


def target_from_env(env: Callable[[str], str | None], embedded_url: Callable[[], str]) -> RedisTarget:
    """The target the REDIS_* variables name (`env(name)`: a variable's value, None when unset);
    `embedded_url()` is called only when neither REDIS_URL nor REDIS_SENTINELS is set."""
    sentinels, url = env("REDIS_SENTINELS"), env("REDIS_URL")
    if sentinels and url:
        raise RedisConfigError("REDIS_URL and REDIS_SENTINELS are both set: name Redis one way (unset REDIS_URL "
                               "to use the Sentinel group)")
    if not sentinels:
        return RedisTarget(url=url or embedded_url())
    db = env("REDIS_DB") or "0"
    if not db.isdigit():
        raise RedisConfigError(f"REDIS_DB must be a database number, got {db!r}")
    return RedisTarget(sentinels=parse_sentinels(sentinels),
                       master_name=env("REDIS_MASTER_NAME") or DEFAULT_MASTER_NAME, db=int(db),
                       password=env("REDIS_PASSWORD"), sentinel_password=env("REDIS_SENTINEL_PASSWORD"))


def sync_client(target: RedisTarget, **options: Any) -> redis.Redis:
    """A client of the target's master (a thread-safe pool of connections; keep it and share it).
    `options`: redis-py's connection options (timeouts, health checks)."""
    import redis

    if not target.uses_sentinel:
        return redis.Redis.from_url(target.url, **options)
    from redis.sentinel import Sentinel

    group = Sentinel(list(target.sentinels), sentinel_kwargs=target._sentinel_kwargs(
        options.get("socket_connect_timeout"), options.get("socket_timeout")))
    return cast("redis.Redis", group.master_for(target.master_name, redis_class=redis.Redis,
                                                **target._master_kwargs(options)))


def async_client(target: RedisTarget, **options: Any) -> redis.asyncio.Redis:
    """`sync_client` for asyncio (the watch feed's event loop)."""
    import redis.asyncio as aioredis

    if not target.uses_sentinel:
        return aioredis.Redis.from_url(target.url, **options)
    from redis.asyncio.sentinel import Sentinel

    group = Sentinel(list(target.sentinels), sentinel_kwargs=target._sentinel_kwargs(
        options.get("socket_connect_timeout"), options.get("socket_timeout")))
    return cast("redis.asyncio.Redis", group.master_for(target.master_name, redis_class=aioredis.Redis,
                                                        **target._master_kwargs(options)))


def configured_target() -> RedisTarget:
    """The target of this process's settings (settings.REDIS_TARGET)."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    target = getattr(settings, "REDIS_TARGET", None)
    if not isinstance(target, RedisTarget):
        raise ImproperlyConfigured("settings.REDIS_TARGET is not set: gpupool needs Redis (REDIS_URL or "
                                   "REDIS_SENTINELS)")
    return target
