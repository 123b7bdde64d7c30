"""`GET leases/{id}/logs/` through Django (a WSGI-only server streams it from a request thread), on
real workloads: a process over the test sshd, a pod the Kubernetes test server runs, and the
simulated fleet's made-up ones. The ASGI front, which production runs, has its own acceptance test
over the real web server (tests/integration/test_lease_logs_e2e.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from allocation.models import Lease
from tests.support.workload_fleets import (
    HI_THERE,
    bound_lease,
    config,
    gated,
    k8s_lab,
    pod_binding,
    process_binding,
    ssh_lab,
    start_pod,
)

pytestmark = pytest.mark.django_db


def _read(response: Any) -> bytes:
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content)


@pytest.fixture
def ssh_users(apply_yaml: Any, ssh_server: Any, fake_host: Any, tmp_path: Path, make_user: Any, api: Any) -> Any:
    apply_yaml(config(ssh_lab(ssh_server, fake_host, tmp_path / "state")))
    return api(make_user("alice", teams=("vision",))), api(make_user("carol", teams=("nlp",)))


@pytest.mark.sshd
def test_a_process_log_streams_as_written_and_its_end_shows_the_exit_code(ssh_users: Any) -> None:
    alice, _ = ssh_users
    lease_id = bound_lease(alice, "vms", process_binding(HI_THERE))
    response = alice.get(f"/api/v1/leases/{lease_id}/logs/?follow=true")
    assert response.status_code == 200 and response["Content-Type"] == "text/plain; charset=utf-8"
    assert b"".join(response.streaming_content) == b"hi\nthere\n"
    # The end of the log is the end of the workload: the lease shows it at once, without the sweep.
    lease = alice.get(f"/api/v1/leases/{lease_id}/").json()
    assert (lease["state"], lease["exit_code"]) == ("released", 3)
    assert lease["binding"]["status"]["exit_code"] == 3 and "code 3" in lease["reason"]
    assert _read(alice.get(f"/api/v1/leases/{lease_id}/logs/?tail=1")) == b"there\n"
    assert _read(alice.get(f"/api/v1/leases/{lease_id}/logs/")) == b"hi\nthere\n"
    assert _read(alice.get(f"/api/v1/leases/{lease_id}/logs/?tail=0&follow=true")) == b""


@pytest.mark.sshd
def test_a_followed_log_passes_each_line_on_as_it_is_written(ssh_users: Any, tmp_path: Path) -> None:
    alice, _ = ssh_users
    gate = tmp_path / "gate"
    lease_id = bound_lease(alice, "vms", process_binding(gated(gate)))
    chunks = iter(alice.get(f"/api/v1/leases/{lease_id}/logs/?follow=true").streaming_content)
    assert next(chunks) == b"hi\n"  # while the workload waits for the gate
    gate.touch()
    assert b"".join(chunks) == b"there\n"


@pytest.mark.sshd
def test_logs_are_team_scoped_and_bad_parameters_are_refused_with_json_errors(ssh_users: Any) -> None:
    alice, carol = ssh_users
    lease_id = bound_lease(alice, "vms", process_binding(["sh", "-c", "echo one"]))
    url = f"/api/v1/leases/{lease_id}/logs/"
    other = carol.get(url)
    assert (other.status_code, other.json()["code"]) == (404, "not_found")
    for query, field in (("tail=-1", "tail"), ("tail=x", "tail"), ("tail=100001", "tail"), ("follow=maybe", "follow")):
        bad = alice.get(f"{url}?{query}")
        assert (bad.status_code, bad.json()["code"]) == (400, "invalid"), query
        assert field in bad.json()["details"], bad.json()
    unknown = alice.get(f"{url}?lines=3")
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_parameter")
    plain = alice.get(f"{url}?tail=x", HTTP_ACCEPT="text/plain")  # a text client is answered, not refused
    assert plain.status_code == 400 and plain.json()["code"] == "invalid"
    assert alice.get(f"/api/v1/leases/{'0' * 8}-0000-4000-8000-{'0' * 12}/logs/").status_code == 404


@pytest.mark.sshd
def test_a_lease_without_a_started_workload_has_no_log_yet(ssh_users: Any) -> None:
    alice, _ = ssh_users
    bare = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1}, format="json").json()
    answer = alice.get(f"/api/v1/leases/{bare['id']}/logs/")
    assert (answer.status_code, answer.json()["code"]) == (409, "no_workload")
    waiting = alice.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "binding": process_binding(["true"])},
                         format="json").json()
    answer = alice.get(f"/api/v1/leases/{waiting['id']}/logs/")
    assert (answer.status_code, answer.json()["code"]) == (409, "workload_not_started")
    assert "pending" in answer.json()["message"]


@pytest.mark.sshd
def test_a_log_removed_from_the_host_is_gone(ssh_users: Any, tmp_path: Path) -> None:
    alice, _ = ssh_users
    lease_id = bound_lease(alice, "vms", process_binding(["sh", "-c", "echo one"]))
    (Path(Lease.objects.get(pk=lease_id).binding_status["handle"]["dir"]) / "output.log").unlink()
    answer = alice.get(f"/api/v1/leases/{lease_id}/logs/")
    assert (answer.status_code, answer.json()["code"]) == (410, "logs_gone")


def test_a_pod_log_streams_from_the_api_server_and_its_end_shows_the_exit_code(
        apply_yaml: Any, kube_api: Any, make_user: Any, api: Any) -> None:
    apply_yaml(config(k8s_lab(kube_api)))
    alice, carol = api(make_user("alice", teams=("vision",))), api(make_user("carol", teams=("nlp",)))
    lease_id = bound_lease(alice, "k8s", pod_binding(HI_THERE))
    start_pod(kube_api, lease_id)
    assert _read(alice.get(f"/api/v1/leases/{lease_id}/logs/?follow=true")) == b"hi\nthere\n"
    lease = alice.get(f"/api/v1/leases/{lease_id}/").json()
    assert (lease["state"], lease["exit_code"]) == ("released", 3)
    assert _read(alice.get(f"/api/v1/leases/{lease_id}/logs/?tail=1")) == b"there\n"
    assert carol.get(f"/api/v1/leases/{lease_id}/logs/").status_code == 404
    asked = kube_api.requests_to("GET", f"/api/v1/namespaces/gpupool-jobs/pods/gpupool-{lease_id}/log")[-1]
    assert (asked.query["container"], asked.query["tailLines"]) == ("main", "1")


def test_a_simulated_workload_writes_a_made_up_log_and_ends_with_its_exit_code(
        demo_fleet: Any, make_user: Any, api: Any) -> None:
    alice = api(make_user("alice", teams=("vision",)))
    binding = {"kind": "process", "command": ["python", "train.py"], "duration_s": 2, "exit_code": 3}
    lease_id = bound_lease(alice, "training", binding)
    body = _read(alice.get(f"/api/v1/leases/{lease_id}/logs/?follow=true"))
    lines = body.decode().splitlines()
    assert lines[0].startswith("[simulated] process of lease") and lines[0].endswith("python train.py")
    assert lines[1:] == ["[simulated] step 1 of 2", "[simulated] exited with code 3"]
    lease = alice.get(f"/api/v1/leases/{lease_id}/").json()
    assert (lease["state"], lease["exit_code"]) == ("released", 3)
