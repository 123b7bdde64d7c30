"""Acceptance of binding: leases go pending → granted → bound on a real SSH host and on a
Kubernetes API, and the process or pod is gone once the lease ends (release, exit, preemption)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import bindings_observe, lease_bind, lease_unbind
from tests.support.kube import derived_node

pytestmark = pytest.mark.django_db


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.fixture
def ssh_fleet(apply_yaml, ssh_server, fake_host, tmp_path: Path, make_user, api):
    fake_host.use("h100-mig")  # 8 H100 split into 56 MIG slices, no foreign processes
    config = {
        "pools": [{"name": "vms"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 2}],
        "sources": [{"name": "lab", "kind": "ssh", "pool": "vms", "user": ssh_server.user,
                     "private_key": ssh_server.client_key, "nvidia_smi": fake_host.command,
                     "hosts": [ssh_server.host("gpu-a")], "connect_timeout": 3, "command_timeout": 10,
                     "state_dir": str(tmp_path / "state")}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",))), tmp_path


@pytest.mark.sshd
def test_a_process_lease_binds_sees_its_gpus_and_release_ends_the_whole_tree(ssh_fleet) -> None:
    client, tmp = ssh_fleet
    out = tmp / "visible.txt"
    command = ["sh", "-c", f'echo "$CUDA_VISIBLE_DEVICES" > {out}; sleep 300 & wait']
    lease = client.post("/api/v1/leases/", {"pool": "vms", "gpus": 2, "model": "1g.10gb", "binding": {
        "kind": "process", "command": command, "env": {"RUN": "1"}}}, format="json").json()
    run_pass()
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    assert lease_bind(lease["id"]) == "bound"
    bound = client.get(f"/api/v1/leases/{lease['id']}/").json()
    assert bound["state"] == "bound"
    handle = bound["binding"]["status"]["handle"]
    assert _wait(out.exists)
    assert sorted(out.read_text().strip().split(",")) == sorted(bound["gpus"])
    assert lease_bind(lease["id"]) == "skipped"  # a retried bind never starts a second copy

    client.post(f"/api/v1/leases/{lease['id']}/release/")
    assert lease_unbind(lease["id"]) == "unbound"
    assert _wait(lambda: not _pid_alive(int(handle["pid"])))
    ended = client.get(f"/api/v1/leases/{lease['id']}/").json()
    assert ended["state"] == "released" and ended["binding"]["status"]["state"] == "stopped"
    assert client.get("/api/v1/gpus/?state=leased").json()["count"] == 0


@pytest.mark.sshd
def test_a_process_that_exits_releases_its_lease_with_the_exit_code(ssh_fleet) -> None:
    client, _ = ssh_fleet
    lease = client.post("/api/v1/leases/", {"pool": "vms", "gpus": 1, "model": "MIG", "binding": {
        "kind": "process", "command": ["sh", "-c", "exit 3"]}}, format="json").json()
    run_pass()
    lease_bind(lease["id"])
    assert _wait(lambda: (bindings_observe() or True) and Lease.objects.get(pk=lease["id"]).state == "released")
    ended = Lease.objects.get(pk=lease["id"])
    assert "3" in ended.reason and "exit" in ended.reason
    assert not ended.gpu_links.filter(active=True).exists()


@pytest.fixture
def k8s_fleet(apply_yaml, kube_api, make_user, api):
    kube_api.load_nodes(derived_node("gke-t4"))
    config = {
        "pools": [{"name": "k8s"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 5}],
        "sources": [{"name": "prod", "kind": "kubernetes", "pool": "k8s", "host": kube_api.url,
                     "namespace": "gpupool-jobs", "request_timeout": 3}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",)))


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
       "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4",
                                "command": ["python", "train.py"]}]}}


def test_a_pod_lease_creates_the_pod_on_its_node_and_its_success_releases_the_lease(k8s_fleet, kube_api) -> None:
    client = k8s_fleet
    lease = client.post("/api/v1/leases/", {"pool": "k8s", "gpus": 1,
                                            "binding": {"kind": "pod", "pod": POD}}, format="json").json()
    run_pass()
    assert lease_bind(lease["id"]) == "bound"
    handle = Lease.objects.get(pk=lease["id"]).binding_status["handle"]
    pod = kube_api.pod(handle["namespace"], handle["name"])
    assert pod["spec"]["nodeName"] == Lease.objects.values_list("host__name", flat=True).get(pk=lease["id"])
    assert pod["metadata"]["labels"]["gpupool.io/lease"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])

    kube_api.set_pod_phase(handle["namespace"], handle["name"], "Succeeded")
    bindings_observe()
    ended = client.get(f"/api/v1/leases/{lease['id']}/").json()
    assert ended["state"] == "released", ended
    assert client.get("/api/v1/gpus/?state=leased").json()["count"] == 0


def test_releasing_a_pod_lease_deletes_the_pod(k8s_fleet, kube_api) -> None:
    client = k8s_fleet
    lease = client.post("/api/v1/leases/", {"pool": "k8s", "gpus": 1,
                                            "binding": {"kind": "pod", "pod": POD}}, format="json").json()
    run_pass()
    lease_bind(lease["id"])
    handle = Lease.objects.get(pk=lease["id"]).binding_status["handle"]
    client.post(f"/api/v1/leases/{lease['id']}/release/")
    # Until the unbind has run, the GPU stays held: the pod may still be running.
    assert client.get("/api/v1/gpus/?state=leased").json()["count"] == 1
    assert lease_unbind(lease["id"]) == "unbound"
    assert kube_api.pod(handle["namespace"], handle["name"]) is None
    assert client.get("/api/v1/gpus/?state=leased").json()["count"] == 0


def test_a_manifest_that_asks_for_more_gpus_than_leased_fails_the_lease_with_the_reason(k8s_fleet) -> None:
    greedy = json.loads(json.dumps(POD))
    greedy["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    lease = k8s_fleet.post("/api/v1/leases/", {"pool": "k8s", "gpus": 1,
                                               "binding": {"kind": "pod", "pod": greedy}}, format="json").json()
    run_pass()
    assert lease_bind(lease["id"]) == "failed"
    failed = Lease.objects.get(pk=lease["id"])
    assert failed.state == "failed" and "4" in failed.reason
    assert not failed.gpu_links.filter(active=True).exists()


@pytest.mark.sshd
def test_a_preempted_process_gets_its_notice_and_the_requester_gets_the_gpus_after(
        ssh_fleet, apply_yaml, make_user, api) -> None:
    client, tmp = ssh_fleet
    apply_yaml("teams: [{name: urgent, members: [uma]}]\npriority_classes:\n"
               "  - {name: best-effort, value: -10, preemptible: true, grace_s: 2}\n"
               "  - {name: high, value: 100}\n", discover=False)
    marker = tmp / "got-term"
    trap = f"trap 'echo term > {marker}; exit 0' TERM; while true; do sleep 0.2; done"
    victim = client.post("/api/v1/leases/", {
        "pool": "vms", "gpus": 56, "same_host": True, "model": "MIG", "priority_class": "best-effort",
        "binding": {"kind": "process", "command": ["sh", "-c", trap]}}, format="json").json()
    run_pass()
    assert lease_bind(victim["id"]) == "bound"
    pid = int(Lease.objects.get(pk=victim["id"]).binding_status["handle"]["pid"])
    urgent = api(make_user("uma", teams=("urgent",))).post(
        "/api/v1/leases/", {"pool": "vms", "gpus": 2, "model": "MIG", "priority_class": "high"},
        format="json").json()
    run_pass()
    preempted = Lease.objects.get(pk=victim["id"])
    assert preempted.state == "preempted" and str(preempted.preempted_by_id) == urgent["id"]
    # The workload is still stopping: its GPUs are not handed out yet.
    assert Lease.objects.get(pk=urgent["id"]).state == "pending"
    assert lease_unbind(victim["id"]) == "unbound"
    assert _wait(marker.exists) and _wait(lambda: not _pid_alive(pid))
    run_pass()
    assert Lease.objects.get(pk=urgent["id"]).state == "granted"
