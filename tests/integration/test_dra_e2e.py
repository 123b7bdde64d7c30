"""Acceptance of exact devices on Kubernetes: one pool over a DRA cluster and a cluster without
DRA. On the DRA cluster the GPUs carry their real uuids and a pod lease's ResourceClaim names
exactly the lease's GPUs; the other cluster still binds by count. Through the API, the binder
and two Kubernetes test servers over real HTTP."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from allocation.engine import run_pass
from allocation.models import Lease
from allocation.workloads.binding import lease_bind, lease_unbind
from inventory.models import Gpu
from tests.support.kube import DRA_SLICES, H100, H100_UUIDS, allocated_claim, derived_node, running_kube_api
from tests.support.kube_server import KubeApiServer

pytestmark = pytest.mark.django_db

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
       "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4",
                                "command": ["python", "train.py"]}]}}  # fmt: skip


@pytest.fixture
def clusters() -> Iterator[tuple[KubeApiServer, KubeApiServer]]:
    """A DRA cluster (H100 node, NVIDIA driver slices, someone's claim on GPU 2) and one without
    the resource.k8s.io group at all (a GKE T4 node, device plugin)."""
    with running_kube_api() as dra, running_kube_api() as legacy:
        dra.load_nodes([derived_node("h100-dra")])
        dra.load_slices(DRA_SLICES)
        dra.add_claim(allocated_claim("notebook", "research", [(H100, "gpu-2")]))
        legacy.load_nodes([derived_node("gke-t4")])
        legacy.serve_dra = False
        yield dra, legacy


@pytest.fixture
def client(clusters: tuple[KubeApiServer, KubeApiServer], apply_yaml: Any, make_user: Any, api: Any) -> Any:
    dra, legacy = clusters
    config = {
        "pools": [{"name": "k8s"}], "teams": [{"name": "vision", "members": ["alice"]}],
        "priority_classes": [{"name": "default", "value": 0, "grace_s": 5}],
        "sources": [
            {"name": "dra", "kind": "kubernetes", "pool": "k8s", "host": dra.url, "request_timeout": 3},
            {"name": "legacy", "kind": "kubernetes", "pool": "k8s", "host": legacy.url, "request_timeout": 3,
             "device_binding": "auto"},
        ],
    }  # fmt: skip
    apply_yaml(json.dumps(config))
    return api(make_user("alice", teams=("vision",)))


def _bound(client: Any, source: str, gpus: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod lease steered to `source`, granted and bound: (the lease as the API shows it, handle)."""
    created = client.post("/api/v1/leases/", {"pool": "k8s", "gpus": gpus, "selector": {"source": source},
                                              "binding": {"kind": "pod", "pod": POD}}, format="json")  # fmt: skip
    assert created.status_code == 201, created.json()
    run_pass()
    assert lease_bind(created.json()["id"]) == "bound"
    lease = client.get(f"/api/v1/leases/{created.json()['id']}/").json()
    return lease, Lease.objects.get(pk=lease["id"]).binding_status["handle"]


def test_the_dra_cluster_shows_real_uuids_and_the_other_synthetic_ones(client: Any) -> None:
    gpus = client.get("/api/v1/gpus/?limit=100").json()["results"]
    by_host: dict[str, list[dict[str, Any]]] = {}
    for gpu in gpus:
        by_host.setdefault(gpu["host"], []).append(gpu)
    h100 = sorted(by_host[H100], key=lambda g: g["index"])
    assert [g["uuid"] for g in h100] == H100_UUIDS
    assert [g["state"] for g in h100] == ["free", "free", "foreign", "unhealthy"]
    assert {g["model"] for g in h100} == {"NVIDIA H100 80GB HBM3"} and {g["memory_mb"] for g in h100} == {81559}
    (gke,) = [name for name in by_host if name != H100]
    assert all(g["uuid"].startswith(f"k8s-legacy:{gke}-gpu-") for g in by_host[gke])

    hosts = {h["name"]: h for h in client.get("/api/v1/hosts/?limit=100").json()["results"]}
    assert hosts[H100]["labels"]["gpupool.io/device-binding"] == "dra"
    assert hosts[gke]["labels"]["gpupool.io/device-binding"] == "device_plugin"


def test_a_pod_lease_on_the_dra_cluster_gets_a_claim_naming_exactly_its_gpus(
    client: Any, clusters: tuple[KubeApiServer, KubeApiServer]
) -> None:
    dra, _ = clusters

    lease, handle = _bound(client, "dra", 2)

    # GPU 2 is someone else's and GPU 3 is unhealthy: the lease can only be GPUs 0 and 1.
    assert sorted(lease["gpus"]) == sorted(H100_UUIDS[:2])
    claim = dra.claim(handle["namespace"], handle["claim"])
    pod = dra.pod(handle["namespace"], handle["name"])
    assert claim is not None and pod is not None
    named = [re.search(r'uuid == "([^"]+)"', r["exactly"]["selectors"][0]["cel"]["expression"])[1]  # type: ignore[index]
             for r in claim["spec"]["devices"]["requests"]]  # fmt: skip
    assert sorted(named) == sorted(lease["gpus"])
    assert pod["spec"]["resourceClaims"] == [{"name": "gpupool-gpus", "resourceClaimName": handle["claim"]}]
    assert "nvidia.com/gpu" not in json.dumps(pod["spec"]["containers"])
    assert claim["metadata"]["labels"]["gpupool.io/lease"] == str(lease["id"])

    client.post(f"/api/v1/leases/{lease['id']}/release/")
    assert lease_unbind(lease["id"]) == "unbound"
    assert dra.pod(handle["namespace"], handle["name"]) is None
    assert dra.claim(handle["namespace"], handle["claim"]) is None


def test_a_pod_lease_on_the_cluster_without_dra_still_binds_by_count(
    client: Any, clusters: tuple[KubeApiServer, KubeApiServer]
) -> None:
    _, legacy = clusters

    lease, handle = _bound(client, "legacy", 2)

    pod = legacy.pod(handle["namespace"], handle["name"])
    assert pod is not None
    assert pod["spec"]["nodeName"] == lease["host"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert "claim" not in handle and "resourceClaims" not in pod["spec"]
    assert legacy.requests_to("POST", "/apis/") == []


def test_our_own_allocated_claim_is_not_foreign_use_and_someone_elses_is(
    client: Any, clusters: tuple[KubeApiServer, KubeApiServer], apply_yaml: Any
) -> None:
    dra, _ = clusters
    lease, handle = _bound(client, "dra", 1)
    dra.allocate_claim(handle["namespace"], handle["claim"])  # as the scheduler would
    (other,) = set(H100_UUIDS[:2]) - set(lease["gpus"])
    dra.add_claim(allocated_claim("walk-in", "research", [(H100, f"gpu-{H100_UUIDS.index(other)}")]))

    apply_yaml("pools: [{name: k8s}]")  # and discover again

    foreign = dict(Gpu.objects.filter(host__name=H100).values_list("uuid", "foreign"))
    assert foreign == {lease["gpus"][0]: False, other: True, H100_UUIDS[2]: True, H100_UUIDS[3]: False}
