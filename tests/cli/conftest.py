"""CLI test fixtures: a live server with the demo fleet, the CLI configured for a member, and a
background "worker" that runs scheduling passes (and binds simulated workloads) while the CLI waits.

The test settings turn event-driven passes off, so without the worker nothing would be granted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Cli:
    run: Callable[..., tuple[int, str, str]]
    url: str
    token: str
    config: Path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a `gpupool` process for this server: its URL and token, this
        checkout's client first on the path (whatever the virtualenv has installed)."""
        import gpupool_cli

        client_dir = str(Path(gpupool_cli.__file__).resolve().parents[1])
        path = os.pathsep.join([client_dir, *filter(None, [os.environ.get("PYTHONPATH", "")])])
        return {**os.environ, "GPUPOOL_URL": self.url, "GPUPOOL_TOKEN": self.token, "GPUPOOL_CONFIG": str(self.config),
                "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}

    def popen(self, *argv: str, **extra: Any) -> subprocess.Popen[str]:
        """`gpupool ARGV...` as a process of its own (stdout and stderr piped, text)."""
        return subprocess.Popen([sys.executable, "-m", "gpupool_cli", *argv], env=self.env(**extra.pop("env", {})),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **extra)


@pytest.fixture
def server(transactional_db: Any, demo_fleet: Any, make_user: Any, live_server: Any,
           monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> Cli:
    """`server.run("ls", "-o", "json")` → (exit code, stdout, stderr), as alice of team vision."""
    from gpupool_cli.main import main
    from tests.support.tokens import api_key

    alice = make_user("alice", teams=("vision",))
    token = api_key(alice)
    monkeypatch.setenv("GPUPOOL_URL", live_server.url)
    monkeypatch.setenv("GPUPOOL_TOKEN", token)
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "config.json"))

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return Cli(run=run, url=live_server.url, token=token, config=tmp_path / "config.json")


@pytest.fixture
def worker() -> Iterator[threading.Event]:
    """Every 0.2 s: a scheduling pass, binding of granted leases that carry a workload (a simulated
    one that runs 1 s), and observation of bound workloads. Stops at the end of the test."""
    from django.db import connection

    from allocation.engine import run_pass
    from allocation.models import Lease
    from allocation.workloads.binding import bindings_observe, lease_bind

    stop = threading.Event()

    def loop() -> None:
        try:
            stop.wait(0.5)  # like a real worker, a moment late: the CLI shows the pending state first
            while not stop.is_set():
                run_pass()
                for lease in Lease.objects.filter(state="granted").exclude(binding_spec={}):
                    Lease.objects.filter(pk=lease.pk).update(binding_spec={**lease.binding_spec, "duration_s": 1})
                    lease_bind(lease.pk)
                bindings_observe()
                stop.wait(0.2)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="fake-worker", daemon=True)
    thread.start()
    yield stop
    stop.set()
    thread.join(timeout=10)
