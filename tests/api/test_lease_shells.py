"""`leases/{id}/ssh-keys/` on real parts: a session (and a process) lease on the test sshd, the
system ssh client logging in with the key the API authorised, and the lease's end — a release,
idle reclaim, its process exiting — taking the key out and ending the shells before the GPUs go."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from allocation.models import AuditEvent, Lease, LeaseGpu
from allocation.services.idle import leases_idle_check
from allocation.workloads.binding import lease_observe, lease_unbind
from core.db import db_now
from inventory.models import GpuSample
from stacktools.ready import wait_for
from tests.support.ssh_client import UserKey, ssh_argv, ssh_run
from tests.support.workload_fleets import bound_lease, config, k8s_lab, process_binding, ssh_lab

pytestmark = [pytest.mark.django_db, pytest.mark.sshd]
SESSION = {"kind": "session"}
IDLE = {"below_util_pct": 5, "for_s": 600, "warn_s": 60}


@pytest.fixture
def lab(apply_yaml: Any, ssh_server: Any, fake_host: Any, tmp_path: Path, make_user: Any, api: Any) -> Any:
    vms = ssh_lab(ssh_server, fake_host, tmp_path / "state")
    vms["sources"][0]["authorized_keys"] = str(ssh_server.dir / "authorized_keys")
    vms["pools"][0]["idle_reclaim"] = IDLE
    apply_yaml(config(vms))
    return api(make_user("alice", teams=("vision",))), api(make_user("carol", teams=("nlp",)))


def _add_key(client: Any, lease_id: str, key: UserKey) -> Any:
    return client.post(f"/api/v1/leases/{lease_id}/ssh-keys/", {"public_key": key.public + " alice@laptop"},
                       format="json")


def _login(client: Any, lease_id: str, tmp_path: Path, name: str = "user") -> list[str]:
    key = UserKey.make(tmp_path, name)
    added = _add_key(client, lease_id, key)
    assert added.status_code == 201, added.content
    login = added.json()["login"]
    assert login["known_hosts"] == f"[{login['address']}]:{login['port']} {login['host_key']}"
    return ssh_argv(key, address=login["address"], port=login["port"], user=login["user"],
                    host_key=login["host_key"], known_hosts=tmp_path / f"known_hosts_{name}")


def _ours(ssh_server: Any, lease_id: str) -> list[str]:
    return [line for line in (ssh_server.dir / "authorized_keys").read_text().splitlines() if lease_id in line]


def test_a_session_lease_logs_in_to_its_gpus_until_it_is_released(lab: Any, ssh_server: Any, tmp_path: Path) -> None:
    alice, carol = lab
    lease_id = bound_lease(alice, "vms", SESSION)
    lease = alice.get(f"/api/v1/leases/{lease_id}/").json()
    assert (lease["state"], lease["binding"]["kind"], lease["binding"]["status"]["state"]) == ("bound", "session",
                                                                                              "running")
    argv = _login(alice, lease_id, tmp_path)
    ran = ssh_run(argv, 'echo "$CUDA_VISIBLE_DEVICES"')
    assert (ran.returncode, ran.stdout.strip()) == (0, ",".join(lease["gpus"])), ran.stderr
    keys = alice.get(f"/api/v1/leases/{lease_id}/ssh-keys/").json()
    assert [(k["user"], k["key_type"], k["removed_at"]) for k in keys] == [("alice", "ssh-ed25519", None)]
    assert carol.get(f"/api/v1/leases/{lease_id}/ssh-keys/").status_code == 404
    assert _add_key(carol, lease_id, UserKey.make(tmp_path, "carol")).status_code == 404
    assert carol.delete(f"/api/v1/leases/{lease_id}/ssh-keys/{keys[0]['id']}/").status_code == 404
    # A session has nothing to observe and no log: it runs until its lease ends.
    assert lease_observe(Lease.objects.select_related("host__source").get(pk=lease_id)) == "running"
    assert alice.get(f"/api/v1/leases/{lease_id}/logs/").json()["code"] == "no_workload"

    shell = subprocess.Popen([*argv, "sleep 300"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(list((Path(_dir(lease_id)) / "shells").glob("*"))) == 2)
        assert alice.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json").status_code == 200
        assert LeaseGpu.objects.filter(lease_id=lease_id, active=True).exists()  # held until the shells end
        assert lease_unbind(lease_id) == "unbound"
        assert shell.wait(10) != 0
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait(5)
    assert not LeaseGpu.objects.filter(lease_id=lease_id, active=True).exists()
    assert _ours(ssh_server, lease_id) == []
    assert ssh_run(argv, "true").returncode == 255
    again = _add_key(alice, lease_id, UserKey.make(tmp_path, "late"))
    assert (again.status_code, again.json()["code"]) == (409, "lease_ended")
    actions = list(AuditEvent.objects.filter(lease_id=lease_id).values_list("action", "actor"))
    assert ("lease.shell_key_added", "alice") in actions


def _dir(lease_id: str) -> str:
    return str(Lease.objects.get(pk=lease_id).binding_status["handle"]["dir"])


def test_a_key_taken_back_no_longer_logs_in(lab: Any, ssh_server: Any, tmp_path: Path) -> None:
    alice, _ = lab
    lease_id = bound_lease(alice, "vms", SESSION)
    argv = _login(alice, lease_id, tmp_path)
    key_id = alice.get(f"/api/v1/leases/{lease_id}/ssh-keys/").json()[0]["id"]
    assert alice.delete(f"/api/v1/leases/{lease_id}/ssh-keys/{key_id}/").status_code == 204
    assert alice.delete(f"/api/v1/leases/{lease_id}/ssh-keys/{key_id}/").status_code == 204  # idempotent
    assert alice.get(f"/api/v1/leases/{lease_id}/ssh-keys/").json()[0]["removed_at"] is not None
    assert ssh_run(argv, "true").returncode == 255 and _ours(ssh_server, lease_id) == []
    assert alice.delete(f"/api/v1/leases/{lease_id}/ssh-keys/999999/").status_code == 404
    assert AuditEvent.objects.filter(lease_id=lease_id, action="lease.shell_key_removed").count() == 1
    alice.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json")
    assert lease_unbind(lease_id) == "unbound"


def test_an_idle_session_is_reclaimed_like_any_lease_and_its_shells_end(lab: Any, ssh_server: Any,
                                                                        tmp_path: Path) -> None:
    alice, _ = lab
    lease_id = bound_lease(alice, "vms", SESSION)
    argv = _login(alice, lease_id, tmp_path)
    now = db_now()
    Lease.objects.filter(pk=lease_id).update(granted_at=now - timedelta(hours=1))
    gpus = LeaseGpu.objects.filter(lease_id=lease_id, active=True).values_list("gpu_id", flat=True)
    GpuSample.objects.bulk_create([GpuSample(gpu_id=gpu, at=now - timedelta(seconds=60 * m), utilization_pct=0.0)
                                   for gpu in gpus for m in range(-2, 16)])
    assert leases_idle_check(now=now)["warned"] == 1
    assert leases_idle_check(now=now + timedelta(seconds=90))["reclaimed"] == 1
    assert Lease.objects.get(pk=lease_id).state == "preempted"
    assert ssh_run(argv, "true").returncode == 0  # its GPUs are held, and its shells live, until the stop
    assert lease_unbind(lease_id) == "unbound"
    assert ssh_run(argv, "true").returncode == 255 and _ours(ssh_server, lease_id) == []


def test_a_process_that_exits_ends_the_shells_on_it_before_its_gpus_are_freed(lab: Any, ssh_server: Any,
                                                                              tmp_path: Path) -> None:
    alice, _ = lab
    gate = tmp_path / "gate"
    lease_id = bound_lease(alice, "vms", process_binding(["sh", "-c", f"while [ ! -e '{gate}' ]; do sleep 0.05; "
                                                                      "done; exit 3"]))
    argv = _login(alice, lease_id, tmp_path)
    assert ssh_run(argv, "true").returncode == 0
    gate.touch()
    lease = Lease.objects.select_related("host__source").get(pk=lease_id)
    wait_for(lambda: lease_observe(lease) == "released")
    # The observation that saw the process end stopped the shells, and only then freed the GPUs.
    ended = Lease.objects.get(pk=lease_id)
    assert (ended.exit_code, ended.binding_status["state"], ended.ending_since) == (3, "stopped", None)
    assert not LeaseGpu.objects.filter(lease_id=lease_id, active=True).exists()
    assert ssh_run(argv, "true").returncode == 255 and _ours(ssh_server, lease_id) == []


def test_what_cannot_have_a_shell_is_refused_with_a_code(apply_yaml: Any, ssh_server: Any, fake_host: Any,
                                                         kube_api: Any, tmp_path: Path, make_user: Any,
                                                         api: Any) -> None:
    apply_yaml(config(ssh_lab(ssh_server, fake_host, tmp_path / "state"), k8s_lab(kube_api)))
    alice = api(make_user("alice", teams=("vision",)))
    key = UserKey.make(tmp_path)
    lease_id = bound_lease(alice, "vms", SESSION)
    bare = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1}, format="json").json()
    answer = _add_key(alice, bare["id"], key)
    assert (answer.status_code, answer.json()["code"]) == (409, "no_shell")
    waiting = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "binding": SESSION}, format="json").json()
    answer = _add_key(alice, waiting["id"], key)
    assert (answer.status_code, answer.json()["code"]) == (409, "workload_not_started")
    for bad in ("", "ssh-ed25519", "not a key", key.public + "\n" + key.public):
        answer = alice.post(f"/api/v1/leases/{lease_id}/ssh-keys/", {"public_key": bad}, format="json")
        assert (answer.status_code, answer.json()["code"]) == (400, "invalid"), bad
        assert "public_key" in answer.json()["details"]
    with_command = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1,
                                                  "binding": {"kind": "session", "command": ["sh"]}}, format="json")
    assert (with_command.status_code, with_command.json()["code"]) == (400, "invalid")
    assert "command" in with_command.json()["details"]["binding"]
    # Only ssh sources start sessions: a Kubernetes pool cannot (a pod is reached by exec).
    refused = alice.post("/api/v1/leases/", {"pool": "k8s", "gpus": 1, "binding": SESSION}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (400, "unsatisfiable"), refused.content
    alice.post(f"/api/v1/leases/{lease_id}/release/", {}, format="json")
    assert lease_unbind(lease_id) == "unbound"
