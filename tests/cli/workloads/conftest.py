"""Fixtures of the CLI's workload tests (`run`, `logs`): the real workload fleets of
tests/support/workload_fleets.py (a process over the test sshd, a pod the Kubernetes test server
runs), `gpupool` as a process of its own, and a "worker" thread that grants and binds, as the
scheduler and the binding task would, and starts each bound pod, as its node would."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import web_server
from tests.support.tokens import api_key
from tests.support.workload_fleets import config, k8s_lab, ssh_lab


@dataclass
class Output:
    """A stream of a `gpupool` process, read line by line by a thread, each line with the time it
    arrived (time.monotonic())."""

    stream: Any
    lines: list[tuple[float, str]] = field(default_factory=list)
    _new: queue.Queue[str] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.stream:
            self.lines.append((time.monotonic(), line))
            self._new.put(line)
        self._new.put("")  # the end

    def wait_for(self, text: str, timeout: float = 60) -> float:
        """When a line holding `text` arrived (waits for it)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for at, line in self.lines[seen:]:
                if text in line:
                    return at
            seen = len(self.lines)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} within {timeout} s in:\n{self.text}")
            with contextlib.suppress(queue.Empty):
                self._new.get(timeout=min(left, 0.5))

    @property
    def text(self) -> str:
        return "".join(line for _, line in self.lines)


@dataclass
class Gpupool:
    """`gpupool ARGV...` as a process of its own, as alice of team vision, against `url`."""

    url: str
    token: str
    config: Path

    def env(self, **extra: str) -> dict[str, str]:
        import gpupool_cli

        client_dir = str(Path(gpupool_cli.__file__).resolve().parents[1])
        path = os.pathsep.join([client_dir, *filter(None, [os.environ.get("PYTHONPATH", "")])])
        return {**os.environ, "GPUPOOL_URL": self.url, "GPUPOOL_TOKEN": self.token, "GPUPOOL_CONFIG": str(self.config),
                "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}

    def start(self, *argv: str, **env: str) -> tuple[subprocess.Popen[str], Output, Output]:
        """Started, its stdout and stderr read as they come."""
        proc = subprocess.Popen([sys.executable, "-m", "gpupool_cli", *argv], env=self.env(**env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return proc, Output(proc.stdout), Output(proc.stderr)

    def run(self, *argv: str, timeout: float = 120, **env: str) -> tuple[int, str, str]:
        done = subprocess.run([sys.executable, "-m", "gpupool_cli", *argv], env=self.env(**env), text=True,
                              capture_output=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="package")
def web(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[str]:
    """The production web server (gunicorn + uvicorn on pool.asgi: its long polls wake on a
    change, its log streams are chunked), on the test database."""
    with django_db_blocker.unblock(), web_server(tmp_path_factory.mktemp("web") / "web.log",
                                                 GPUPOOL_AUTOSCHEDULE="0") as url:
        yield url


@pytest.fixture(autouse=True)
def _no_workload_outlives_its_test(tmp_path: Path) -> Iterator[None]:
    """The lab's processes run detached (setsid: each wrapper leads its own session and process
    group, its pid in `<state>/leases/*/started`): a test that ends before its workload (a lost
    lease's `sleep 300`, a preempted one's loop) would leave it running on the machine."""
    yield
    for started in (tmp_path / "state").glob("leases/*/started"):
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(started.read_text().split()[0]), signal.SIGKILL)


@pytest.fixture
def lab(web: str, transactional_db: Any, apply_yaml: Any, ssh_server: Any, fake_host: Any, kube_api: Any,
        tmp_path: Path, make_user: Any) -> Gpupool:
    """Pools `vms` (one SSH host, the test sshd) and `k8s` (one node of the Kubernetes test server);
    the CLI as alice, against the production web server."""
    apply_yaml(config(ssh_lab(ssh_server, fake_host, tmp_path / "state"), k8s_lab(kube_api)))
    alice = make_user("alice", teams=("vision",))
    return Gpupool(url=web, token=api_key(alice), config=tmp_path / "config.json")


@dataclass
class Binder:
    """What the worker did: when each lease was bound (time.monotonic())."""

    bound_at: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def binder(kube_api: Any) -> Iterator[Binder]:
    """Every 0.1 s: a scheduling pass, the binding of granted leases that carry a workload (and
    the start of a bound pod, as its node would), the observation of bound workloads."""
    from django.db import connection

    from allocation.engine import run_pass
    from allocation.models import Lease
    from allocation.workloads.binding import bindings_observe, lease_bind

    done = Binder()

    def bind(lease: Any) -> None:
        if lease_bind(lease.pk) != "bound":
            return
        done.bound_at[str(lease.pk)] = time.monotonic()
        if lease.binding_spec.get("kind") == "pod":
            handle = Lease.objects.get(pk=lease.pk).binding_status["handle"]
            kube_api.run_pod(handle["namespace"], handle["name"])

    def loop() -> None:
        try:
            while not done.stop.is_set():
                run_pass()
                for lease in Lease.objects.filter(state="granted").exclude(binding_spec={}):
                    bind(lease)
                bindings_observe()
                done.stop.wait(0.1)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="binder", daemon=True)
    thread.start()
    yield done
    done.stop.set()
    thread.join(timeout=30)
