"""Fault (e1): SSH hosts that hang mid-command, drop the connection mid-command, or change their
host key, on a real OpenSSH server on loopback (tests/support/sshd.py) and the real database.

Invariants: every wait is bounded by the source's timeouts (no worker hangs), the host shows the
reason in words and comes back on the next discovery once the fault is gone, a process-bound
lease never has two processes on its host (counted with `ps` over SSH), and a host that can no
longer be trusted loses its leases (requeued when they ask), its workloads' GPUs held (`stopping`,
the reason why) until an admin forgets the host's workloads: never freed under a process that may
still run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from agents.ssh_session import HostSpec, SshSession, load_private_key
from allocation.engine import run_pass
from allocation.models import Lease
from allocation.services.reaper import leases_reap
from allocation.workloads.binding import lease_bind, lease_unbind
from inventory.discovery import source_discover
from inventory.models import Host, Source
from tests.faults.agent_fixtures import Figures
from tests.support.sshd import FakeHost, SshServer, new_ed25519, sshd_or_skip, write_fleet

# Threads stand for concurrent workers: they need the rows committed, as real workers do.
pytestmark = [pytest.mark.sshd, pytest.mark.django_db(transaction=True)]

CONNECT_TIMEOUT_S, COMMAND_TIMEOUT_S = 2, 2


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with sshd_or_skip(tmp_path_factory.mktemp("fault-sshd")) as server:
        yield server


@pytest.fixture
def host_bin(tmp_path: Path) -> FakeHost:
    fleets = tmp_path / "fleets"
    write_fleet(fleets, "titanx")
    write_fleet(fleets, "h100-mig")  # no foreign processes: every slice can be leased
    host = FakeHost(tmp_path / "bin", fleets)
    host.use("titanx")
    return host


@pytest.fixture
def lab(apply_yaml: Any, sshd: SshServer, host_bin: FakeHost, tmp_path: Path, make_user: Any, api: Any) -> Any:
    config = {
        "pools": [{"name": "vms"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 1}],
        "sources": [{"name": "lab", "kind": "ssh", "pool": "vms", "user": sshd.user, "interval_s": 1,
                     "private_key": sshd.client_key, "nvidia_smi": host_bin.command,
                     "hosts": [sshd.host("gpu-a")], "connect_timeout": CONNECT_TIMEOUT_S,
                     "command_timeout": COMMAND_TIMEOUT_S, "state_dir": str(tmp_path / "state")}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",))), config


def _discover() -> tuple[Host, float]:
    """One discovery that probes the host whatever its backoff (as an admin's discover): these
    scenarios are about what each probe finds, not how often (tests/inventory/test_host_backoff.py)."""
    started = time.monotonic()
    source_discover(source=Source.objects.get(name="lab"), skip=())
    return Host.objects.get(name="gpu-a"), time.monotonic() - started


def _in_thread(work: Any) -> Any:
    """`work` as a thread body that, like a worker process, closes its database connection."""

    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()

    return run


def _connection_children(server: SshServer) -> list[int]:
    """The per-connection sshd processes (children of the listening one)."""
    assert server._process is not None
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == server._process.pid:
            children.append(int(stat.parent.name))
    return children


def test_a_host_that_hangs_or_drops_the_connection_mid_command_goes_offline_with_the_reason_and_comes_back(
        lab: Any, sshd: SshServer, host_bin: FakeHost, tmp_path: Path) -> None:
    figures = Figures("ssh_hang_and_drop")
    host, _ = _discover()
    assert host.state == "ready" and host.gpus.count() == 3

    # Hang: nvidia-smi stalls far past command_timeout. Discovery gives up at the timeout.
    (tmp_path / "fleets" / "titanx" / "sleep").write_text("30\n")
    host, took = _discover()
    figures["hang_discovery_s"] = round(took, 2)
    assert took < CONNECT_TIMEOUT_S + COMMAND_TIMEOUT_S + 2
    assert "did not finish within" in Source.objects.get(name="lab").hosts.get().error

    # Drop: the host's sshd for this connection dies mid-command (connection reset).
    (tmp_path / "fleets" / "titanx" / "sleep").write_text("5\n")
    before = set(_connection_children(sshd))
    result: dict[str, Any] = {}
    worker = threading.Thread(target=_in_thread(lambda: result.update(zip(("host", "took"), _discover(), strict=True))))
    worker.start()
    deadline = time.monotonic() + 5
    killed: list[int] = []
    while not killed and time.monotonic() < deadline:
        time.sleep(0.2)
        for pid in set(_connection_children(sshd)) - before:
            os.kill(pid, signal.SIGKILL)  # our own sshd's child, by its pid
            killed.append(pid)
    worker.join(timeout=COMMAND_TIMEOUT_S + CONNECT_TIMEOUT_S + 10)
    assert killed and not worker.is_alive()
    figures["drop_discovery_s"] = round(result["took"], 2)
    dropped = Host.objects.get(name="gpu-a")
    figures["reason_after_drop"] = dropped.error
    assert "dropped mid-command" in dropped.error and "127.0.0.1" in dropped.error
    assert dropped.gpus.count() == 3  # one failed read is not a vanished fleet

    # The fault goes away: the next discovery brings the host back (no restart of anything).
    (tmp_path / "fleets" / "titanx" / "sleep").unlink()
    recovering = time.monotonic()
    host, _ = _discover()
    figures["recovery_s"] = round(time.monotonic() - recovering, 2)
    assert host.state == "ready" and host.error == ""
    figures["faults_injected"] = {"hang_past_command_timeout": 1, "connection_killed_mid_command": len(killed)}
    figures.write()


def test_process_leases_never_run_twice_and_a_rekeyed_host_loses_its_leases(
        lab: Any, sshd: SshServer, host_bin: FakeHost, settings: Any, api: Any, make_user: Any) -> None:
    settings.GPUPOOL = {**settings.GPUPOOL, "LOST_GRACE_S": 0, "OFFLINE_AFTER_INTERVALS": 1}
    client, config = lab
    figures = Figures("ssh_process_leases")
    host_bin.use("h100-mig")
    _discover()
    ids = []
    for requeue in (False, True):
        body = {"pool": "vms", "gpus": 1, "model": "MIG", "requeue_on_loss": requeue,
                "binding": {"kind": "process", "command": ["sleep", "300"]}}
        ids.append(client.post("/api/v1/leases/", body, format="json").json()["id"])
    for lease_id in ids:  # the command names the lease, so ps can tell its processes apart
        Lease.objects.filter(pk=lease_id).update(binding_spec={
            "kind": "process", "command": ["sleep", f"300.{int(lease_id[:8], 16)}"]})
    run_pass()

    # Two workers bind the same lease at once (a retried task racing the first run).
    outcomes: list[str] = []
    threads = [threading.Thread(target=_in_thread(lambda: outcomes.append(lease_bind(ids[0])))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    figures["concurrent_bind_outcomes"] = sorted(outcomes)
    assert sorted(outcomes) in (["bound", "skipped"], ["bound", "bound"])  # never "ended-meanwhile"
    # A bind whose reply was lost (connection dropped after the host started the process): the
    # lease still reads granted, the task binds again and finds the first process.
    assert lease_bind(ids[1]) == "bound"
    first_pid = Lease.objects.get(pk=ids[1]).binding_status["handle"]["pid"]
    Lease.objects.filter(pk=ids[1]).update(state="granted", binding_status={})
    assert lease_bind(ids[1]) == "bound"
    assert Lease.objects.get(pk=ids[1]).binding_status["handle"]["pid"] == first_pid
    pids = [int(Lease.objects.get(pk=lease_id).binding_status["handle"]["pid"]) for lease_id in ids]
    counts = [_count(sshd, lease_id) for lease_id in ids]
    figures["processes_per_lease"] = counts
    assert counts == [1, 1]

    # The host is re-keyed (or someone sits in the middle): its key no longer matches the pin.
    source = Source.objects.get(name="lab")
    source.config = {**source.config, "hosts": [{**config["sources"][0]["hosts"][0], "host_key": new_ed25519()[1]}]}
    source.save()
    host, took = _discover()
    figures["rekeyed_discovery_s"] = round(took, 2)
    assert "host key mismatch" in host.error
    time.sleep(1.1)  # the source's interval: hosts age offline, not at the first failure
    _discover()
    assert Host.objects.get(name="gpu-a").state == "offline"
    reaped = leases_reap()
    assert (reaped["lost"], reaped["requeued"]) == (2, 1)
    lost, requeued = Lease.objects.get(pk=ids[0]), Lease.objects.get(pk=ids[1])
    assert lost.state == "lost" and requeued.state == "pending"
    # The requeued lease's old process and GPU pass to a stranded copy, which stops it.
    stranded = Lease.objects.get(binding_status__binding_of__lease=ids[1])
    assert stranded.state == "lost" and stranded.gpu_links.filter(active=True).count() == 1
    # The processes cannot be stopped through an untrusted host: their GPUs stay held (a
    # permanent error, retried slowly) and the reason says why, until an admin forgets them.
    for lease_id in (ids[0], stranded.pk):
        assert lease_unbind(lease_id) == "retrying"
        held = Lease.objects.get(pk=lease_id)
        assert held.gpu_links.filter(active=True).exists() and "host key mismatch" in held.reason
        assert held.binding_status["state"] == "stopping" and held.binding_status["stop"]["permanent"]
    figures["lost_reason"] = Lease.objects.get(pk=ids[0]).reason
    forgotten = client.post(f"/api/v1/hosts/{host.pk}/forget-workloads/", {"reason": "re-keyed"}, format="json")
    assert forgotten.status_code == 403  # a member may not
    admin_client = api(make_user("root", admin=True))
    forgotten = admin_client.post(f"/api/v1/hosts/{host.pk}/forget-workloads/", {"reason": "re-keyed"}, format="json")
    assert forgotten.status_code == 200, forgotten.content
    assert sorted(forgotten.json()["leases"]) == sorted([ids[0], str(stranded.pk)])
    assert not Lease.objects.get(pk=ids[0]).gpu_links.filter(active=True).exists()
    figures["forgotten_by_admin"] = forgotten.json()["gpus_freed"]
    figures["faults_injected"] = {"concurrent_binds": 2, "lost_bind_reply": 1, "host_key_changed": 1}
    figures["duplicate_processes"] = sum(max(0, n - 1) for n in counts)
    figures.write()
    for pid in pids:  # what the untrusted host kept running: ours, ended by its session id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _count(sshd: SshServer, lease_id: str) -> int:
    return _processes_of_marker(sshd, f"300.{int(lease_id[:8], 16)}")


def _processes_of_marker(sshd: SshServer, marker: str) -> int:
    host = HostSpec("gpu-a", "127.0.0.1", sshd.port, sshd.host_key)
    with SshSession(host, user=sshd.user, pkey=load_private_key(private_key=sshd.client_key),
                    connect_timeout=5) as session:
        listing = session.run("ps -eo args", timeout=10).stdout
    return sum(1 for line in listing.splitlines() if line.split() == ["sleep", marker])
