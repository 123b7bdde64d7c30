"""A Redis outage: the cache (throttle, capacity profile, pass debounce) fails open, so the API
keeps answering from PostgreSQL; once Redis is back the cache works again. Against a private
redis-server of the test's own, killed and restarted (never the machine's shared one)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.cache import cache
from django.test import override_settings

from stacktools.ready import free_port

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                redis.Redis.from_url(self.url, socket_timeout=0.5).ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        with override_settings(CACHES={"default": {
                "BACKEND": "core.cache.RedisCache", "LOCATION": server.url, "KEY_PREFIX": "outage",
                "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}}}):
            yield server
    finally:
        server.kill()


def test_the_cache_serves_as_empty_while_redis_is_down_and_recovers(private_redis: PrivateRedis) -> None:
    cache.set("k", 1)
    assert cache.get("k") == 1
    private_redis.kill()
    started = time.monotonic()
    assert cache.get("k") is None and cache.get("k", "fallback") == "fallback"
    assert cache.add("lock", 1) is True  # a debounce lets the work through rather than drop it
    cache.set("k", 2)
    cache.delete("k")
    assert cache.get_many(["k", "j"]) == {}
    assert time.monotonic() - started < 5  # refused connections fail fast
    private_redis.start()  # same port, empty
    cache.set("k", 3)
    assert cache.get("k") == 3


@pytest.mark.django_db
def test_the_api_accepts_leases_while_redis_is_down(private_redis: PrivateRedis, apply_yaml: Any,
                                                    make_user: Any, api: Any) -> None:
    apply_yaml("pools: [{name: gpus}]\nteams: [{name: a}]\n"
               "sources: [{name: sim, kind: simulated, pool: gpus, hosts: 1, gpus_per_host: 8}]\n")
    client = api(make_user("ann", teams=("a",)))
    private_redis.kill()
    r = client.post("/api/v1/leases/", {"pool": "gpus", "gpus": 2}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["state"] == "pending"
    assert client.get("/api/v1/pools/").status_code == 200


def test_every_cache_backend_of_a_process_shares_one_redis_client() -> None:
    """Django builds a cache backend per context, and the ASGI front runs each request in a
    context of its own: they must not each open a connection to Redis (core/cache.py)."""
    from django.conf import settings
    from django.core.cache.backends.base import BaseCache

    from core.cache import RedisCache

    def backend() -> BaseCache:
        config = settings.CACHES["default"]
        return RedisCache(config["LOCATION"], {k: v for k, v in config.items() if k != "BACKEND"})

    one, two = backend(), backend()
    assert one is not two
    assert one._cache.get_client() is two._cache.get_client()  # type: ignore[attr-defined]
    two.set("gpupool-shared-client-check", 1, timeout=5)
    assert one.get("gpupool-shared-client-check") == 1
