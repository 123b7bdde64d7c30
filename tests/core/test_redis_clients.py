"""Where Redis is (core.redis_clients): REDIS_URL as before, or a Sentinel group named by
REDIS_SENTINELS and REDIS_MASTER_NAME, in the spellings each user needs (kombu's broker URL and
transport options, redis-py's Sentinel for the cache and the event stream)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from core import embedded
from core.redis_clients import RedisConfigError, RedisTarget, parse_sentinels, target_from_env


def _env(**values: str) -> Callable[[str], str | None]:
    return lambda name: values.get(name) or None


def _never() -> str:
    raise AssertionError("the embedded Redis was started though a Redis was named")


def test_redis_url_alone_is_used_as_it_is_everywhere() -> None:
    target = target_from_env(_env(REDIS_URL="redis://cache.internal:6380/3"), _never)
    assert not target.uses_sentinel
    assert target.display() == target.broker_url() == "redis://cache.internal:6380/3"
    assert target.broker_transport_options() == {}
    # a Unix socket in kombu's spelling, as before
    socket = RedisTarget(url="unix:///var/run/redis.sock?db=2")
    assert socket.broker_url() == "redis+socket:///var/run/redis.sock?virtual_host=2"


def test_nothing_named_starts_the_embedded_redis() -> None:
    assert target_from_env(_env(), lambda: "unix:///tmp/x.sock?db=0").url == "unix:///tmp/x.sock?db=0"


def test_sentinels_name_the_group_for_the_broker_and_every_client() -> None:
    target = target_from_env(_env(REDIS_SENTINELS="10.0.0.1:26379, 10.0.0.2:26380,[::1]:26381,s4",
                                  REDIS_MASTER_NAME="pool-a", REDIS_DB="2", REDIS_PASSWORD="p@ss/word",
                                  REDIS_SENTINEL_PASSWORD="s3"), _never)
    assert target.uses_sentinel and target.master_name == "pool-a" and target.db == 2
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 26381), ("s4", 26379))
    assert target.display() == "sentinel://10.0.0.1:26379,10.0.0.2:26380,[::1]:26381,s4:26379/pool-a/2"
    assert "p@ss" not in target.display() and "s3" not in target.display()
    assert target.broker_url() == (
        "sentinel://:p%40ss%2Fword@10.0.0.1:26379/2;sentinel://:p%40ss%2Fword@10.0.0.2:26380/2;"
        "sentinel://:p%40ss%2Fword@[::1]:26381/2;sentinel://:p%40ss%2Fword@s4:26379/2")
    options = target.broker_transport_options()
    assert options["master_name"] == "pool-a"
    assert options["sentinel_kwargs"] == {"socket_connect_timeout": 1.0, "socket_timeout": 1.0, "password": "s3"}


def test_the_master_name_defaults_to_gpupool() -> None:
    target = target_from_env(_env(REDIS_SENTINELS="127.0.0.1:26379"), _never)
    assert target.master_name == "gpupool" and target.db == 0 and target.password is None


@pytest.mark.parametrize("value", ["", " , ", "host:port", "host:0", "host:70000"])
def test_a_sentinel_list_that_names_no_sentinel_is_refused(value: str) -> None:
    with pytest.raises(RedisConfigError, match="REDIS_SENTINELS"):
        parse_sentinels(value)


def test_naming_redis_both_ways_is_refused_rather_than_one_ignored() -> None:
    with pytest.raises(RedisConfigError, match="both set"):
        target_from_env(_env(REDIS_URL="redis://x/0", REDIS_SENTINELS="x:26379"), _never)
    with pytest.raises(RedisConfigError, match="REDIS_DB"):
        target_from_env(_env(REDIS_SENTINELS="x:26379", REDIS_DB="one"), _never)


def test_the_embedded_redis_is_not_started_for_a_process_told_of_sentinels(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/x")
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("REDIS_SENTINELS", "127.0.0.1:26379")
    assert embedded.main(["env", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""  # no REDIS_URL exported beside the sentinels (refused)
    assert not (tmp_path / "redis").exists()
