"""A failed bind deletes what it created: against the Kubernetes test server over HTTP, a pod that
the kubelet rejected, one stuck Pending past the deadline, and one whose create went through
while the bind failed all leave the namespace with no pod of the lease before the lease's GPUs
come back; a pod of the same name that is not the lease's is left alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.k8s_pod_manifest import pod_name
from allocation.engine import run_pass
from allocation.models import Lease
from allocation.selectors.invariants import ledger_check
from allocation.workloads.binding import bindings_observe, lease_bind, lease_unbind
from tests.support.kube import derived_node
from tests.support.kube_server import KubeApiServer

pytestmark = pytest.mark.django_db
NS = "gpupool-jobs"
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
       "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4", "command": ["python", "train.py"]}]}}


@pytest.fixture
def cluster(apply_yaml: Any, kube_api: KubeApiServer, make_user: Any, api: Any) -> Any:
    kube_api.load_nodes(derived_node("gke-t4"))
    config = {
        "pools": [{"name": "k8s"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 5}],
        "sources": [{"name": "prod", "kind": "kubernetes", "pool": "k8s", "host": kube_api.url,
                     "namespace": NS, "request_timeout": 2, "pending_deadline_s": 60}],
    }
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",)))


def _granted(client: Any, binding: dict[str, Any] | None = None) -> str:
    body = {"pool": "k8s", "gpus": 1, "binding": binding or {"kind": "pod", "pod": POD}}
    lease = client.post("/api/v1/leases/", body, format="json").json()
    run_pass()
    assert Lease.objects.get(pk=lease["id"]).state == "granted"
    return str(lease["id"])


def _pods_of(kube_api: KubeApiServer, lease_id: str) -> list[str]:
    with kube_api._lock:
        return [name for (_, name), pod in kube_api.pods.items()
                if (pod["metadata"].get("labels") or {}).get("gpupool.io/lease") == lease_id]


def _held(lease_id: str) -> bool:
    return Lease.objects.get(pk=lease_id).gpu_links.filter(active=True).exists()


def test_a_pod_the_kubelet_rejected_is_deleted_before_the_gpus_come_back(cluster: Any, kube_api: KubeApiServer) -> None:
    lease_id = _granted(cluster)
    assert lease_bind(lease_id) == "bound"
    kube_api.set_pod_phase(NS, pod_name(lease_id), "Failed", reason="OutOfnvidia.com/gpu",
                           message="Pod Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, "
                                   "capacity: 1")
    bindings_observe()
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "failed" and "OutOfnvidia.com/gpu" in lease.reason
    assert _pods_of(kube_api, lease_id) == [] and not _held(lease_id)
    assert ledger_check().ok


def test_a_pod_pending_past_its_deadline_is_deleted_and_held_until_it_is(cluster: Any, kube_api: KubeApiServer) -> None:
    lease_id = _granted(cluster)
    assert lease_bind(lease_id) == "bound"
    kube_api.set_pod_created(NS, pod_name(lease_id), datetime.now(UTC) - timedelta(minutes=5))
    # The API refuses the delete for a while: the pod stays, so do the GPUs (it may yet start).
    kube_api.fail_next(4, status=500, method="DELETE")
    bindings_observe()
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "failed" and "stayed Pending" in lease.reason
    assert _pods_of(kube_api, lease_id) == [pod_name(lease_id)] and _held(lease_id)
    assert lease.binding_status["state"] == "stopping" and lease.binding_status["stop"]["attempts"] == 1
    assert cluster.get(f"/api/v1/leases/{lease_id}/").json()["stopping"]["attempts"] == 1
    assert lease_unbind(lease_id) == "unbound"
    assert _pods_of(kube_api, lease_id) == [] and not _held(lease_id)


def test_a_create_that_went_through_while_the_bind_failed_is_deleted(cluster: Any, kube_api: KubeApiServer) -> None:
    lease_id = _granted(cluster)
    # The create reached the API server but every answer was lost (here: the pod is there, and
    # every create is refused from now on); the task's last attempt fails the lease.
    created = kube_api.add_pod({"metadata": {"name": pod_name(lease_id), "namespace": NS,
                                             "labels": {"gpupool.io/lease": lease_id}},
                                "spec": {"nodeName": "gke-t4", "containers": [{"name": "main", "image": "x"}]}})
    kube_api.fail_next(100, status=500, method="POST")
    assert lease_bind(lease_id, final_attempt=True) == "failed"
    lease = Lease.objects.get(pk=lease_id)
    assert lease.state == "failed" and "binding failed" in lease.reason
    assert _pods_of(kube_api, lease_id) == [] and not _held(lease_id)
    deletes = kube_api.requests_to("DELETE", f"/api/v1/namespaces/{NS}/pods/")
    assert [r.body["preconditions"]["uid"] for r in deletes] == [created["metadata"]["uid"]]  # that pod only


def test_a_pod_of_the_same_name_that_is_not_the_leases_is_left_alone(cluster: Any, kube_api: KubeApiServer) -> None:
    lease_id = _granted(cluster)
    kube_api.add_pod({"metadata": {"name": pod_name(lease_id), "namespace": NS, "labels": {"app": "theirs"}},
                      "spec": {"containers": [{"name": "main", "image": "x"}]}})
    assert lease_bind(lease_id) == "failed"
    assert "does not belong to lease" in Lease.objects.get(pk=lease_id).reason
    assert kube_api.pod(NS, pod_name(lease_id)) is not None  # not ours: not deleted
    assert kube_api.requests_to("DELETE") == [] and not _held(lease_id)


def test_a_process_lease_on_a_cluster_fails_at_once_with_nothing_to_delete(cluster: Any,
                                                                           kube_api: KubeApiServer) -> None:
    # Placement keeps process leases off clusters (a 400 at creation); one granted all the same
    # (its binding changed under it) fails its bind, and there is nothing a pod bind left behind.
    lease_id = _granted(cluster)
    Lease.objects.filter(pk=lease_id).update(binding_kind="process",
                                             binding_spec={"kind": "process", "command": ["python", "train.py"]})
    before = len(kube_api.requests)
    assert lease_bind(lease_id) == "failed"
    assert "binds pods" in Lease.objects.get(pk=lease_id).reason
    assert len(kube_api.requests) == before and not _held(lease_id)
