"""`gpupool ssh ID` and `gpupool shell` as a user runs them: the CLI in a process of its own against
a live server, the system ssh client, the test sshd as the lease's host. The key is made here for
one login and taken back when ssh exits; the private half never leaves this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allocation.models import Lease, LeaseShellKey
from tests.support.tokens import api_key
from tests.support.workload_fleets import bound_lease, config, ssh_lab

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]


@pytest.fixture
def lab(apply_yaml: Any, ssh_server: Any, fake_host: Any, tmp_path: Path, make_user: Any, api: Any,
        live_server: Any) -> dict[str, Any]:
    vms = ssh_lab(ssh_server, fake_host, tmp_path / "state")
    vms["sources"][0]["authorized_keys"] = str(ssh_server.dir / "authorized_keys")
    apply_yaml(config(vms))
    alice, carol = make_user("alice", teams=("vision",)), make_user("carol", teams=("nlp",))
    return {"url": live_server.url, "alice": alice, "carol": carol, "client": api(alice), "tmp": tmp_path / "tmp"}


def gpupool(lab: dict[str, Any], *argv: str, user: str = "alice",
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`gpupool ARGV` as `user`, with a TMPDIR of its own (to see the key's folder go)."""
    import gpupool_cli

    lab["tmp"].mkdir(exist_ok=True)
    client_dir = str(Path(gpupool_cli.__file__).resolve().parents[1])
    env = {**os.environ, "GPUPOOL_URL": lab["url"], "GPUPOOL_TOKEN": api_key(lab[user]), "TMPDIR": str(lab["tmp"]),
           "GPUPOOL_CONFIG": str(lab["tmp"].parent / "cli.json"), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [client_dir, os.environ.get("PYTHONPATH", "")]))}
    return subprocess.run([sys.executable, "-m", "gpupool_cli", *argv], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def _ours(ssh_server: Any, lease_id: str) -> list[str]:
    return [line for line in (ssh_server.dir / "authorized_keys").read_text().splitlines() if lease_id in line]


def test_ssh_runs_a_command_on_the_lease_gpus_and_takes_its_key_back(lab: dict[str, Any], ssh_server: Any) -> None:
    lease_id = bound_lease(lab["client"], "vms", {"kind": "session"})
    gpus = lab["client"].get(f"/api/v1/leases/{lease_id}/").json()["gpus"]
    done = gpupool(lab, "ssh", lease_id[:8], "--", 'echo "$CUDA_VISIBLE_DEVICES"; exit 3')
    assert (done.returncode, done.stdout) == (3, ",".join(gpus) + "\n"), done.stderr
    key = LeaseShellKey.objects.get(lease_id=lease_id)
    assert key.removed_at is not None and key.user == lab["alice"]  # taken back as ssh exited
    assert _ours(ssh_server, lease_id) == []
    assert list(lab["tmp"].iterdir()) == []  # the key pair's folder is gone
    # Options after `--` reach ssh as well as a command does (OpenSSH reads them after the host).
    verbose = gpupool(lab, "ssh", lease_id, "--", "-v", "true")
    assert verbose.returncode == 0 and "debug1:" in verbose.stderr


def test_ssh_to_another_teams_lease_is_not_found_and_a_bare_lease_says_why(lab: dict[str, Any]) -> None:
    lease_id = bound_lease(lab["client"], "vms", {"kind": "session"})
    other = gpupool(lab, "ssh", lease_id, "--", "true", user="carol")
    assert other.returncode == 3 and "(not_found)" in other.stderr
    bare = lab["client"].post("/api/v1/leases/", {"pool": "vms", "gpus": 1}, format="json").json()
    refused = gpupool(lab, "ssh", bare["id"], "--", "true")
    assert refused.returncode == 1 and "(no_shell)" in refused.stderr and '"session"' in refused.stderr
    assert not LeaseShellKey.objects.exists()


@pytest.fixture
def binder() -> Iterator[None]:
    """What the worker does for a session lease: a pass, then the bind (every 0.2 s)."""
    from django.db import connection

    from allocation.engine import run_pass
    from allocation.workloads.binding import lease_bind

    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                run_pass()
                for lease_id in Lease.objects.filter(state="granted").values_list("pk", flat=True):
                    lease_bind(lease_id)
                stop.wait(0.2)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name="binder", daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(10)


def test_shell_requests_a_session_logs_in_and_releases_it_when_ssh_exits(lab: dict[str, Any], binder: None,
                                                                          ssh_server: Any) -> None:
    done = gpupool(lab, "shell", "--gpus", "1", "--pool", "vms", "--poll", "0.1", "--",
                   'echo "gpus=$CUDA_VISIBLE_DEVICES"; exit 4')
    assert done.returncode == 4, done.stderr
    lease = Lease.objects.get()
    assert lease.binding_kind == "session" and lease.state == "released"
    assert done.stdout == f"gpus={','.join(lease.gpus.values_list('uuid', flat=True))}\n"
    assert "released lease" in done.stderr and "ssh exited" in lease.reason
    assert _ours(ssh_server, str(lease.pk)) == []
