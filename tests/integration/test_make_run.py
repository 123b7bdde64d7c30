"""`make run` on a bare environment, as the README's tour uses it: scripts/run.sh with no
DATABASE_URL / REDIS_URL starts the embedded PostgreSQL and Redis, the web server, the workers and
beat; a token from `manage.py apitoken` in "another terminal" works; a lease is granted by the
worker; Ctrl-C stops every process, the embedded engines included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core import embedded
from tests.support.processes import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _call(url: str, token: str, body: dict[str, object] | None = None) -> dict[str, object]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.load(answer))


def _wait_for(predicate: object, what: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError(f"{what} within {timeout:.0f} s; run.sh said:\n{log.read_text()[-3000:]}")


def test_make_run_on_a_bare_machine_serves_the_tour_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    var, log, port = tmp_path / "var", tmp_path / "run.log", free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "GPUPOOL_AUTOSCHEDULE"}}
    env.update(GPUPOOL_VAR_DIR=str(var), PORT=str(port))
    with log.open("wb") as out:
        run = subprocess.Popen(["bash", "scripts/run.sh"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        _wait_for(lambda: "gpupool is running." in log.read_text(), "the banner", 240, log)
        banner = log.read_text()  # it names the engines it runs on, and binds loopback by default
        assert "PostgreSQL embedded" in banner and "Redis embedded" in banner
        assert f"127.0.0.1:{port}, this machine only" in banner
        health = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10))
        assert health["database"] == "postgresql"
        token = subprocess.run([sys.executable, "manage.py", "apitoken", "alice"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
        api = f"http://127.0.0.1:{port}/api/v1"
        lease = _call(f"{api}/leases/", token, {"pool": "training", "gpus": 2, "model": "H100", "ttl_seconds": 600})
        _wait_for(lambda: _call(f"{api}/leases/{lease['id']}/", token)["state"] in {"granted", "bound"},
                  "the lease granted by the worker", 90, log)
    finally:
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in the terminal reaches the whole group
        run.wait(timeout=120)
    assert "stopping gpupool" in log.read_text()
    assert embedded._running_postmaster((var / "postgres").resolve()) is None, "the embedded PostgreSQL still runs"
    assert not embedded._redis_answers(embedded._redis_paths(var)[1]), "the embedded Redis still runs"
