"""The Celery processes' liveness (core.liveness): the probe command the chart runs fails only
for a stuck process, not for a missing broker. Checked on a real prefork worker and a Redis of
the test's own, which it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import liveness
from stacktools.processes import REPO, WORKER_READY, Proc, log_says, worker_command
from stacktools.ready import wait_for
from tests.faults.servers import RedisServer
from tests.support.processes import process_env

MAX_AGE_S = 3.0


def probe(path: Path, max_age: float = MAX_AGE_S) -> subprocess.CompletedProcess[str]:
    """The chart's probe command, as the kubelet runs it (the file named by the pod's environment)."""
    return subprocess.run([sys.executable, "-m", "core.liveness", "--max-age", str(max_age)], cwd=REPO,
                          env={**os.environ, liveness.ENV: str(path)}, capture_output=True, text=True, timeout=30)


def test_the_probe_passes_a_fresh_heartbeat_and_fails_a_stale_or_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    missing = probe(path)
    assert missing.returncode == 1 and "no heartbeat yet" in missing.stdout
    path.touch()
    assert probe(path).returncode == 0
    old = time.time() - 10 * MAX_AGE_S
    os.utime(path, (old, old))
    stale = probe(path)
    assert stale.returncode == 1 and "stuck: last heartbeat 30 s ago" in stale.stdout


def test_stamping_touches_the_named_file_at_most_once_a_second(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "alive"
    monkeypatch.setattr(liveness, "_last_stamp", float("-inf"))
    monkeypatch.delenv(liveness.ENV, raising=False)
    liveness.stamp()  # unnamed: nothing to do
    monkeypatch.setenv(liveness.ENV, str(path))
    liveness.stamp()
    first = path.stat().st_mtime_ns
    os.utime(path, ns=(first - 10**9, first - 10**9))
    liveness.stamp()  # within a second of the last one: skipped
    assert path.stat().st_mtime_ns == first - 10**9


@pytest.fixture
def worker(tmp_path: Path, db: Any) -> Iterator[tuple[Proc, RedisServer, Path]]:
    """A prefork worker (as the chart runs it) with a heartbeat file, on a Redis of its own."""
    redis = RedisServer(tmp_path)
    redis.start()
    alive = tmp_path / "alive"
    argv = worker_command("alive", "gpupool.liveness-test", 1, "INFO", "-P", "prefork")
    proc = Proc("worker", argv, process_env(REDIS_URL=redis.url(), **{liveness.ENV: str(alive)}),
                tmp_path / "worker.log", log_says(WORKER_READY))
    try:
        proc.start(timeout=60)
        yield proc, redis, alive
    finally:
        if proc.proc is not None:
            os.killpg(proc.pid, signal.SIGCONT)
        proc.stop()
        redis.kill()


def _keeps_passing(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        age = liveness.heartbeat_age(path)
        assert age is not None and age <= MAX_AGE_S, f"the heartbeat went stale ({age} s)"
        time.sleep(0.2)


def test_a_worker_stays_alive_while_redis_is_down_and_goes_stale_when_stuck(worker: Any) -> None:
    proc, redis, alive = worker
    wait_for(lambda: probe(alive).returncode == 0, 30, "the worker's first heartbeat")
    _keeps_passing(alive, MAX_AGE_S + 1)  # idle, its event loop's timer stamps

    redis.kill()  # waiting for the broker is not being stuck: no restart for a Redis outage
    wait_for(lambda: "Trying again" in proc.log_since_start() or "Cannot connect" in proc.log_since_start(), 30,
             "the worker to find Redis gone")
    _keeps_passing(alive, MAX_AGE_S + 1)
    redis.start()

    os.killpg(proc.pid, signal.SIGSTOP)  # a wedged worker: the probe must fail
    stopped = time.monotonic()
    result = wait_for(lambda: (r := probe(alive)).returncode == 1 and r, MAX_AGE_S + 30, "the probe to fail")
    assert "stuck" in result.stdout and time.monotonic() - stopped >= MAX_AGE_S - 1
