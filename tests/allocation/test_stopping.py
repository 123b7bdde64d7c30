"""A lost workload is stopped, always: on a real sshd that is made to hang (SIGSTOP: connections
time out, as to a host that is down) while a lease is bound, the stop fails again and again and
the GPUs stay held (`stopping`, the attempts counting up) through every periodic task; when the
host comes back the process is stopped (counted with ps over SSH) and only then are the GPUs
freed. Also: a requeued lease's old workload, an admin forgetting a host's workloads, a bind
whose worker died, and the preemption grace in seconds (the figures are printed and written to
test-artifacts/stopping/).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from agents.ssh_session import HostSpec, SshSession, load_private_key
from allocation.engine import run_pass
from allocation.models import AuditEvent, Lease
from allocation.selectors.invariants import ledger_check
from allocation.services.leases import lease_release
from allocation.services.reaper import leases_mark_lost, leases_reap
from allocation.workloads import binding
from allocation.workloads.binding import bindings_observe, lease_bind, lease_unbind
from inventory.discovery import source_connector, source_discover
from inventory.models import Gpu, Host, Source
from tests.support.sshd import FakeHost, SshServer, sshd_or_skip, write_fleet

pytestmark = [pytest.mark.sshd, pytest.mark.django_db]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "stopping"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """An sshd of this module's own: the tests stop it (SIGSTOP) and let it go on (SIGCONT)."""
    with sshd_or_skip(tmp_path_factory.mktemp("stopping-sshd")) as server:
        yield server


@contextlib.contextmanager
def host_hangs(server: SshServer) -> Iterator[None]:
    """The host stops answering: sshd frozen, new connections wait for a banner that never
    comes (connect_timeout), until the block ends."""
    assert server._process is not None
    os.kill(server._process.pid, signal.SIGSTOP)  # our own sshd, by its pid
    try:
        yield
    finally:
        os.kill(server._process.pid, signal.SIGCONT)


@pytest.fixture
def lab(apply_yaml: Any, sshd: SshServer, tmp_path: Path, make_user: Any, api: Any, settings: Any) -> Any:
    settings.GPUPOOL = {**settings.GPUPOOL, "LOST_GRACE_S": 0, "OFFLINE_AFTER_INTERVALS": 1}
    fleets = tmp_path / "fleets"
    write_fleet(fleets, "h100-mig")  # 56 MIG slices, no foreign processes
    host_bin = FakeHost(tmp_path / "bin", fleets)
    host_bin.use("h100-mig")
    config = {
        "pools": [{"name": "vms"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 1},
                             {"name": "best-effort", "value": -10, "preemptible": True, "grace_s": 10},
                             {"name": "high", "value": 100}],
        "sources": [{"name": "lab", "kind": "ssh", "pool": "vms", "user": sshd.user, "interval_s": 1,
                     "private_key": sshd.client_key, "nvidia_smi": host_bin.command,
                     "hosts": [sshd.host("gpu-a")], "connect_timeout": 1, "command_timeout": 5,
                     "state_dir": str(tmp_path / "state")}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",)))


def _marker(lease_id: str) -> str:
    return f"300.{int(lease_id[:8], 16)}"


def _bound_lease(client: Any, **fields: Any) -> str:
    body = {"pool": "vms", "gpus": 1, "model": "MIG", **fields}
    lease_id = client.post("/api/v1/leases/", {**body, "binding": {"kind": "process", "command": ["true"]}},
                           format="json").json()["id"]
    # The command names the lease, so ps can tell its processes apart.
    Lease.objects.filter(pk=lease_id).update(binding_spec={"kind": "process", "command": ["sleep", _marker(lease_id)]})
    run_pass()
    assert lease_bind(lease_id) == "bound"
    return lease_id


def _processes(sshd: SshServer, lease_id: str) -> int:
    host = HostSpec("gpu-a", "127.0.0.1", sshd.port, sshd.host_key)
    with SshSession(host, user=sshd.user, pkey=load_private_key(private_key=sshd.client_key),
                    connect_timeout=5) as session:
        listing = session.run("ps -eo stat=,args=", timeout=10).stdout
    return sum(1 for line in listing.splitlines()
               if line.split()[1:] == ["sleep", _marker(lease_id)] and not line.startswith("Z"))


def _lose_host() -> None:
    """Discovery fails (the host hangs) until the host is offline, then the reaper loses its leases."""
    source = Source.objects.get(name="lab")
    source_discover(source=source)
    time.sleep(1.1)  # the source's interval: a host goes offline after one interval unheard
    source_discover(source=source)
    assert Host.objects.get(name="gpu-a").state == "offline"
    leases_reap()


def _held(lease_id: Any) -> list[str]:
    return list(Gpu.objects.filter(lease_links__lease_id=lease_id, lease_links__active=True, leased=True)
                .values_list("uuid", flat=True))


def test_a_lost_workload_keeps_its_gpus_until_the_stop_succeeds_when_the_host_is_back(
        lab: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any) -> None:
    asked: list[str] = []
    monkeypatch.setattr(binding, "request_unbind", lambda lease_id, countdown=None: asked.append(str(lease_id)))
    lease_id = _bound_lease(lab)
    gpus = _held(lease_id)
    assert len(gpus) == 1 and _processes(sshd, lease_id) == 1
    with host_hangs(sshd):
        _lose_host()
        assert Lease.objects.get(pk=lease_id).state == "lost"
        delays = []
        for attempt in (1, 2, 3):
            with django_capture_on_commit_callbacks() as planned:
                assert lease_unbind(lease_id) == "retrying"
            delays += [call.keywords["countdown"] for call in planned]  # the task asks for its next run
            lease = lab.get(f"/api/v1/leases/{lease_id}/").json()
            assert lease["binding"]["status"]["state"] == "stopping"
            stopping = lease["stopping"]
            assert stopping["attempts"] == attempt and not stopping["permanent"]
            assert "SSH handshake with 127.0.0.1" in stopping["last_error"], stopping
            assert stopping["next_attempt_at"] > stopping["last_attempt_at"]
            assert "could not be stopped yet" in lease["reason"] and "GPUs stay held" in lease["reason"]
        # Backoff: 5 s, 10 s, 20 s, each jittered over its upper half.
        assert [2.5 <= delays[0] <= 5, 5 <= delays[1] <= 10, 10 <= delays[2] <= 20] == [True] * 3, delays
        # Nothing else frees them meanwhile: not the reaper, the observer's sweep, a pass, a release.
        leases_reap()
        bindings_observe()
        run_pass()
        lease_release(lease=lease_id, actor="alice")
        assert _held(lease_id) == gpus and ledger_check().ok
    assert asked == []  # the host was not back: the planned retries are the tasks' own

    # The host answers again: the next discovery sees it, the sweep asks for a stop at once. (It
    # probes the host now, as an admin's discover does: after two failures it is backing off.)
    source_discover(source=Source.objects.get(name="lab"), skip=())
    assert Host.objects.get(name="gpu-a").state == "ready"
    assert _held(lease_id) == gpus  # back, but the old process still runs: not free
    assert Gpu.objects.get(uuid=gpus[0]).state == "leased"
    bindings_observe()
    assert asked == [lease_id]
    assert lease_unbind(lease_id) == "unbound"
    assert _processes(sshd, lease_id) == 0
    assert _held(lease_id) == [] and Gpu.objects.get(uuid=gpus[0]).state == "free"
    lease = lab.get(f"/api/v1/leases/{lease_id}/").json()
    assert lease["stopping"] is None and lease["binding"]["status"]["state"] == "stopped"
    assert lease["binding"]["status"]["stop"]["attempts"] == 3
    assert lease["reason"] == "host offline: gpu-a"
    events = list(AuditEvent.objects.filter(lease_id=lease_id).order_by("at", "id").values_list("action", "message"))
    actions = [action for action, _ in events]
    after = actions[actions.index("lease.lost") + 1:]
    # One stop_failed for the first failure (another only if the error changed), one stopped.
    assert after[-1] == "lease.stopped" and set(after[:-1]) == {"lease.stop_failed"}, events
    assert ledger_check().ok


def test_a_requeued_lease_leaves_its_old_workload_and_gpu_to_a_stranded_copy_until_it_is_stopped(
        lab: Any, sshd: SshServer) -> None:
    lease_id = _bound_lease(lab, requeue_on_loss=True)
    old_gpu, old_pid = _held(lease_id), Lease.objects.get(pk=lease_id).binding_status["handle"]["pid"]
    with host_hangs(sshd):
        _lose_host()
        requeued = Lease.objects.get(pk=lease_id)
        assert requeued.state == "pending" and requeued.binding_status == {"generation": 1}
        stranded = Lease.objects.get(binding_status__binding_of__lease=lease_id)
        assert stranded.state == "lost" and _held(stranded.pk) == old_gpu and _held(lease_id) == []
        assert f"stopped as lease {stranded.pk}" in requeued.reason
        assert lease_unbind(stranded.pk) == "retrying"
        assert lab.get(f"/api/v1/leases/{stranded.pk}/").json()["stopping"]["attempts"] == 1
        assert ledger_check().ok
    source_discover(source=Source.objects.get(name="lab"), skip=())  # probed now, backing off or not
    run_pass()  # the lease is placed again, never on the GPU its old process may still use
    assert Lease.objects.get(pk=lease_id).state == "granted" and _held(lease_id) != old_gpu
    assert lease_bind(lease_id) == "bound"
    handle = Lease.objects.get(pk=lease_id).binding_status["handle"]
    assert handle["dir"].endswith(f"/leases/{lease_id}-1") and handle["pid"] != old_pid
    assert _processes(sshd, lease_id) == 2  # the old one, and the lease's new one
    assert lease_unbind(stranded.pk) == "unbound"
    assert _processes(sshd, lease_id) == 1 and _held(stranded.pk) == []
    assert Lease.objects.get(pk=lease_id).state == "bound" and ledger_check().ok
    lease_release(lease=lease_id, actor="alice")
    assert lease_unbind(lease_id) == "unbound" and _processes(sshd, lease_id) == 0


def test_an_admin_forgets_the_workloads_of_a_host_gone_for_good(lab: Any, sshd: SshServer, api: Any,
                                                                make_user: Any) -> None:
    admin = api(make_user("root", admin=True))
    lease_id = _bound_lease(lab)
    host = Host.objects.get(name="gpu-a")
    url = f"/api/v1/hosts/{host.pk}/forget-workloads/"
    refused = admin.post(url, {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "host_not_offline"
    assert admin.post(url, {"forget": True}, format="json").json()["code"] == "unknown_field"
    pid = Lease.objects.get(pk=lease_id).binding_status["handle"]["pid"]
    try:
        with host_hangs(sshd):
            _lose_host()
            assert lease_unbind(lease_id) == "retrying"
            assert lab.post(url, {}, format="json").status_code == 403
            answer = admin.post(url, {"reason": "decommissioned"}, format="json")
            assert answer.status_code == 200, answer.content
            assert answer.json()["leases"] == [lease_id] and answer.json()["gpus_freed"] == 1
            assert answer.json()["host"]["state"] == "offline"
        lease = Lease.objects.get(pk=lease_id)
        assert _held(lease_id) == [] and lease.binding_status["state"] == "forgotten"
        assert "forgotten by root (decommissioned)" in lease.reason
        assert lease_unbind(lease_id) == "skipped"  # nothing left to do: a later task is a no-op
        event = AuditEvent.objects.get(action="host.forget_workloads")
        assert event.actor == "root" and event.data["leases"] == [lease_id]
        assert ledger_check().ok
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # what the "gone" host kept running: ours, by session id


def test_a_bind_whose_worker_died_is_stopped_by_name_and_never_starts_later(lab: Any, sshd: SshServer) -> None:
    lease_id = lab.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "model": "MIG", "binding": {
        "kind": "process", "command": ["sleep", "300"]}}, format="json").json()["id"]
    run_pass()
    # The bind task marked the lease and asked the host, then its worker died.
    started = timezone.now() - timedelta(seconds=30)
    lease = Lease.objects.get(pk=lease_id)
    lease.binding_status = {"bind": {"started_at": started.isoformat(), "in_flight": True}}
    lease.save()
    lease_release(lease=lease_id, actor="alice")
    assert _held(lease_id) != []  # it may have started: held
    assert lease_unbind(lease_id) == "waiting"  # a bind still in flight reports for itself
    lease = Lease.objects.get(pk=lease_id)
    assert lease.binding_status["stop"]["error"] == "waiting for the bind in flight to report"
    # Past the time a bind may take, the bind is abandoned: what it may have left is stopped by name.
    lease.binding_status = {**lease.binding_status,
                            "bind": {"started_at": (started - timedelta(minutes=10)).isoformat(), "in_flight": True}}
    lease.save()
    assert lease_unbind(lease_id) == "unbound" and _held(lease_id) == []
    connector = source_connector(Source.objects.get(name="lab"))
    late = binding.bind_request(lease)
    assert late is not None
    with pytest.raises(binding.AgentError, match="stopped before it started"):
        connector.bind(late)  # the dead worker's bind, arriving late, starts nothing


@pytest.mark.django_db(transaction=True)  # a thread stands for the bind worker: it needs commits
def test_a_lease_requeued_while_its_bind_is_in_flight_leaves_that_bind_to_its_stranded_copy(
        lab: Any, sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from allocation.services import leases as lease_services
    from allocation.services import reaper

    for module in (binding, lease_services, reaper):  # no broker messages: the test runs what they would
        monkeypatch.setattr(module, "request_unbind", lambda lease_id, countdown=None: None)
    lease_id = lab.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "model": "MIG", "requeue_on_loss": True,
                                            "binding": {"kind": "process", "command": ["sleep", "300"]}},
                        format="json").json()["id"]
    run_pass()
    gpu = _held(lease_id)
    outcome: list[str] = []

    def bind() -> None:
        try:
            outcome.append(lease_bind(lease_id, final_attempt=True))
        finally:
            connections.close_all()

    with host_hangs(sshd):
        worker = threading.Thread(target=bind)
        worker.start()  # marks the lease, then waits for the frozen host's banner (1 s)
        assert _wait(lambda: "bind" in Lease.objects.get(pk=lease_id).binding_status)
        leases_mark_lost([lease_id], reason_prefix="host offline")  # requeued meanwhile
        worker.join(15)
        assert outcome == ["ended-meanwhile"]
        requeued = Lease.objects.get(pk=lease_id)
        assert requeued.state == "pending" and requeued.binding_status == {"generation": 1}
        stranded = Lease.objects.get(binding_status__binding_of__lease=lease_id)
        assert _held(stranded.pk) == gpu and stranded.binding_status["bind"]["in_flight"] is False
        assert stranded.binding_status["stop"]["attempts"] == 1  # its stop by name failed too: held
    assert lease_unbind(stranded.pk) == "unbound" and _held(stranded.pk) == []
    late = binding.bind_request(Lease.objects.get(pk=stranded.pk))
    assert late is not None and late.lease_id == lease_id and late.generation == 0
    with pytest.raises(binding.AgentError, match="stopped before it started"):
        source_connector(Source.objects.get(name="lab")).bind(late)


def _wait(predicate: Any, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("grace_s", [10, pytest.param(30, marks=pytest.mark.slow)])
def test_a_preemption_grace_frees_the_gpus_within_the_grace_and_one_observation_interval(
        lab: Any, sshd: SshServer, api: Any, make_user: Any, apply_yaml: Any, settings: Any, grace_s: int) -> None:
    """Grace in seconds on the host's clock: a process that ignores TERM is killed when the grace
    runs out, and its GPUs are freed at once (the issue: 42 s for a grace of 10, 49 s for 30)."""
    from allocation.models import PriorityClass

    PriorityClass.objects.filter(name="best-effort").update(grace_s=grace_s)
    victim = lab.post("/api/v1/leases/", {"pool": "vms", "gpus": 56, "model": "MIG", "priority_class": "best-effort",
                                          "binding": {"kind": "process", "command": ["sh", "-c", (
                                              "trap '' TERM; sleep 600 & wait; sleep 600")]}},
                      format="json").json()["id"]
    run_pass()
    assert lease_bind(victim) == "bound"
    pid = Lease.objects.get(pk=victim).binding_status["handle"]["pid"]
    apply_yaml("teams: [{name: urgent, members: [uma]}]\n", discover=False)
    urgent = api(make_user("uma", teams=("urgent",))).post(
        "/api/v1/leases/", {"pool": "vms", "gpus": 2, "model": "MIG", "priority_class": "high"}, format="json").json()
    run_pass()
    preempted_at = time.monotonic()
    assert Lease.objects.get(pk=victim).state == "preempted" and len(_held(victim)) == 56
    assert lease_unbind(victim) == "unbound"  # the unbind task the preemption asked for
    freed_s = time.monotonic() - preempted_at
    assert _held(victim) == [] and _ended(pid)
    run_pass()
    assert Lease.objects.get(pk=urgent["id"]).state == "granted"
    observe_s = settings.GPUPOOL["OBSERVE_INTERVAL_S"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    figures = {"grace_s": grace_s, "preemption_to_gpus_free_s": round(freed_s, 2), "observe_interval_s": observe_s}
    (ARTIFACTS / f"grace_{grace_s}.json").write_text(json.dumps(figures) + "\n")
    print(f"\n[stopping figures] {figures}")
    assert grace_s <= freed_s <= grace_s + observe_s, figures
    assert freed_s <= grace_s + 2, figures  # in practice: the SSH round trip and one KILL round


def _ended(pid: int) -> bool:
    """Gone, or a zombie (PID 1 of a test container does not always reap orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
