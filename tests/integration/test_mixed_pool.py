"""One pool over SSH hosts and two Kubernetes clusters whose GPU nodes share a name: discovery
counts every GPU of all three, leases land only where their workload can start, a selector
steers a lease into one cluster, and what no host can run is refused at creation.

Real parts: the sshd tier (processes started over SSH on this machine, `nvidia-smi` printing the
captured P100 output, the host time-sliced so that it offers 20 GPUs) and two Kubernetes API test
servers over HTTP. The SSH replicas and the clusters' whole GPUs all match a request that names
no model, so a policy blind to workload kinds would put processes on Kubernetes nodes (exclusive
GPUs are preferred to replicas) and fail them."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import lease_bind, lease_unbind
from inventory.discovery import source_discover
from inventory.models import Gpu, Source
from tests.support.kube import gpu_node, running_kube_api
from tests.support.kube_server import KubeApiServer

pytestmark = [pytest.mark.django_db, pytest.mark.sshd]

REPLICAS = 10  # x 2 P100
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
       "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4", "command": ["python", "train.py"]}]}}


@pytest.fixture
def clusters() -> Iterator[tuple[KubeApiServer, KubeApiServer]]:
    with running_kube_api() as ka, running_kube_api() as kb:
        ka.load_nodes([gpu_node("gpu-node-1", 8), gpu_node("gpu-node-2", 4)])
        kb.load_nodes([gpu_node("gpu-node-1", 8)])
        yield ka, kb


@pytest.fixture
def mixed(apply_yaml: Any, ssh_server: Any, fake_host: Any, clusters: Any, tmp_path: Path, make_user: Any,
          api: Any) -> Any:
    fake_host.use("p100x2")
    ka, kb = clusters
    hosts = [ssh_server.host("vm-0", labels={"rack": "r1"}, time_slicing=REPLICAS)]
    config = {
        "pools": [{"name": "mixed"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 1}],
        "sources": [
            {"name": "lab", "kind": "ssh", "pool": "mixed", "user": ssh_server.user,
             "private_key": ssh_server.client_key, "nvidia_smi": fake_host.command, "hosts": hosts,
             "connect_timeout": 5, "command_timeout": 15, "state_dir": str(tmp_path / "state")},
            {"name": "ka", "kind": "kubernetes", "pool": "mixed", "host": ka.url, "request_timeout": 3},
            {"name": "kb", "kind": "kubernetes", "pool": "mixed", "host": kb.url, "request_timeout": 3},
        ],
    }
    apply_yaml(json.dumps(config), discover=False)
    for source in Source.objects.order_by("name"):
        source_discover(source=source)
    yield api(make_user("alice", teams=("vision",)))
    admin = api(make_user("root-admin", admin=True))
    for lease_id in Lease.objects.filter(state="bound").values_list("pk", flat=True):  # stop what we started
        admin.post(f"/api/v1/leases/{lease_id}/release/")
        lease_unbind(lease_id)
    _kill_sleepers()


def _create(client: Any, **body: Any) -> Any:
    return client.post("/api/v1/leases/", {"pool": "mixed", "gpus": 1, **body}, format="json")


def _process(tmp: Path, n: int) -> dict[str, Any]:
    return {"kind": "process", "command": ["sh", "-c", f"echo $CUDA_VISIBLE_DEVICES > {tmp}/p{n}; sleep 300"]}


def test_forty_leases_of_both_kinds_all_bind_where_they_can_run(mixed: Any, tmp_path: Path, clusters: Any) -> None:
    client = mixed
    ka, kb = clusters
    assert Gpu.objects.filter(host__source__name="lab", gone=False).count() == 2 * REPLICAS
    assert Gpu.objects.filter(host__source__name="ka", gone=False).count() == 12
    assert Gpu.objects.filter(host__source__name="kb", gone=False).count() == 8
    hosts = client.get("/api/v1/hosts/?limit=100").json()["results"]
    assert sorted((h["source"], h["name"]) for h in hosts if h["name"] == "gpu-node-1") == [
        ("ka", "gpu-node-1"), ("kb", "gpu-node-1")]

    ids = []
    for n in range(20):  # interleaved, as users submit them
        ids.append(_create(client, binding=_process(tmp_path, n)).json()["id"])
        ids.append(_create(client, binding={"kind": "pod", "pod": POD}).json()["id"])
    run_pass()
    outcomes = [lease_bind(i) for i in ids]
    leases = {str(lease.pk): lease for lease in Lease.objects.filter(pk__in=ids).select_related("host__source")}
    assert outcomes.count("bound") == 40, [(leases[i].state, leases[i].reason) for i in ids]
    kinds = set(Lease.objects.filter(pk__in=ids).values_list("binding_kind", "host__source__kind"))
    assert kinds == {("process", "ssh"), ("pod", "kubernetes")}
    assert Lease.objects.filter(state="failed").count() == 0
    pods = len(ka.pods) + len(kb.pods)
    assert pods == 20
    for server in (ka, kb):  # each pod on a node of its own cluster, asking for one GPU
        for pod in server.pods.values():
            assert pod["spec"]["nodeName"] in server.nodes
            assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)


def test_a_selector_steers_a_lease_into_one_cluster(mixed: Any, clusters: Any) -> None:
    ka, kb = clusters
    lease = _create(mixed, gpus=4, binding={"kind": "pod", "pod": POD}, selector={"source": "kb"}).json()
    run_pass()
    assert "on kb/gpu-node-1" in Lease.objects.get(pk=lease["id"]).reason  # its name is ambiguous in the pool
    assert lease_bind(lease["id"]) == "bound"
    got = mixed.get(f"/api/v1/leases/{lease['id']}/").json()
    assert got["selector"] == {"source": "kb"} and got["host"] == "gpu-node-1"
    assert Lease.objects.values_list("host__source__name", flat=True).get(pk=lease["id"]) == "kb"
    assert len(kb.pods) == 1 and not ka.pods

    by_label = _create(mixed, gpus=2, selector={"labels": {"rack": "r1"}}).json()
    run_pass()
    granted = Lease.objects.values_list("state", "host__labels").get(pk=by_label["id"])
    assert granted[0] == "granted" and granted[1]["rack"] == "r1"


def test_a_spread_pod_lease_stays_in_one_cluster(mixed: Any, clusters: Any) -> None:
    ka, _ = clusters
    lease = _create(mixed, gpus=12, same_host=False, binding={"kind": "pod", "pod": POD}).json()
    run_pass()
    got = Lease.objects.get(pk=lease["id"])
    assert got.state == "granted"
    assert set(got.gpus.values_list("host__source__name", flat=True)) == {"ka"}
    # The host holding most of it (8 of 12): its pod goes there, asking for the 8 GPUs of that node.
    assert Lease.objects.values_list("host__name", flat=True).get(pk=got.pk) == "gpu-node-1"
    assert lease_bind(lease["id"]) == "bound"
    [pod] = ka.pods.values()
    assert pod["spec"]["nodeName"] == "gpu-node-1"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in ("8", 8)
    too_big = _create(mixed, gpus=13, same_host=False, binding={"kind": "pod", "pod": POD})
    assert too_big.status_code == 400 and too_big.json()["code"] == "unsatisfiable"
    assert "within one cluster" in too_big.json()["message"]


def test_what_no_host_can_run_is_refused_at_creation(mixed: Any, tmp_path: Path) -> None:
    process_in_cluster = _create(mixed, binding=_process(tmp_path, 0), selector={"source": "ka"})
    assert process_in_cluster.status_code == 400, process_in_cluster.json()
    body = process_in_cluster.json()
    assert body["code"] == "unsatisfiable" and "can start a process" in body["message"]
    assert "source ka (kubernetes)" in body["message"]
    big_pod = _create(mixed, gpus=9, binding={"kind": "pod", "pod": POD})
    assert big_pod.status_code == 400 and "at most 8 GPUs" in big_pod.json()["message"]
    nowhere = _create(mixed, selector={"host": "no-such-host"})
    assert nowhere.status_code == 400
    assert "no host of pool mixed matching host=no-such-host" in nowhere.json()["message"]
    bad = _create(mixed, selector={"source": "ka", "zone": "a"})
    assert bad.status_code == 400 and "zone" in json.dumps(bad.json())
    assert not Lease.objects.exists()


def _kill_sleepers() -> None:  # a safety net should a release fail: the processes are ours
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if b"sleep\x00300" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
