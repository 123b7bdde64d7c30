"""Binding on DRA GPUs: the pod's ResourceClaim names exactly the lease's devices, the pod refers
to it and asks for no `nvidia.com/gpu`; unbind removes both; a failed bind leaves nothing behind.
Over real HTTP against the Kubernetes test server, every object checked against the real schema."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from agents.base import BIND_FAILED, BIND_GONE, BIND_STARTING, BIND_SUCCEEDED, AgentError, BindRequest
from agents.k8s_resources import gpu_uuid
from tests.support.kube import A100, A100_MIGS, H100, H100_UUIDS, connector_for, load_dra_cluster
from tests.support.kube_server import KubeApiServer


@pytest.fixture
def kube_api(kube_api: KubeApiServer) -> KubeApiServer:
    """The registered (empty) test server, loaded with the DRA cluster."""
    load_dra_cluster(kube_api)
    return kube_api


LEASE = "5b9e2c1d-0000-4000-8000-00000000d2a0"
NAME = f"gpupool-{LEASE}"
NS = "gpupool-jobs"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
MANIFEST = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train"},
            "spec": {"containers": [{"name": "main", "image": "pytorch/pytorch:2.4",
                                     "resources": {"limits": {"cpu": "8"}}}]}}  # fmt: skip


def request(uuids: list[str], node: str = H100, manifest: dict[str, Any] | None = None) -> BindRequest:
    return BindRequest(lease_id=LEASE, host_name=node, host_address="10.0.7.21", gpu_uuids=tuple(uuids),
                       spec={"kind": "pod", "pod": manifest or MANIFEST})  # fmt: skip


def allocated_uuids(server: KubeApiServer, name: str = NAME) -> list[str]:
    """What the scheduler would give the claim: the uuid of each device it allocates."""
    devices = server.allocate_claim(NS, name)
    published = {(s["spec"]["pool"]["name"], d["name"]): d["attributes"]["uuid"]["string"]
                 for s in server.resource_slices.values() for d in s["spec"]["devices"] if "uuid" in d["attributes"]}
    return [published[d] for d in devices]  # fmt: skip


def test_the_claim_names_exactly_the_leased_gpus_and_the_pod_uses_it(kube_api: KubeApiServer) -> None:
    leased = [H100_UUIDS[2], H100_UUIDS[0]]
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"  # dropped for the claim

    status = connector_for(kube_api).bind(request(leased, manifest=manifest))

    assert status.state == BIND_STARTING
    assert status.handle["claim"] == NAME
    claim, pod = kube_api.claim(NS, NAME), kube_api.pod(NS, NAME)
    assert claim is not None and pod is not None
    assert claim["metadata"]["labels"] == {"gpupool.io/lease": LEASE}
    assert claim["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": NAME, "uid": pod["metadata"]["uid"]}]
    requests = claim["spec"]["devices"]["requests"]
    assert [r["exactly"]["deviceClassName"] for r in requests] == ["gpu.nvidia.com"] * 2
    assert [(r["exactly"]["allocationMode"], r["exactly"]["count"]) for r in requests] == [("ExactCount", 1)] * 2
    assert [r["exactly"]["selectors"] for r in requests] == [
        [{"cel": {"expression": f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'}}] for uuid in leased]
    # The scheduler can satisfy it with these devices and no others.
    assert allocated_uuids(kube_api) == leased

    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpupool-gpus", "resourceClaimName": NAME}]
    assert spec["containers"][0]["resources"] == {
        "limits": {"cpu": "8"},
        "claims": [{"name": "gpupool-gpus", "request": "gpu-0"}, {"name": "gpupool-gpus", "request": "gpu-1"}],
    }
    assert "nvidia.com/gpu" not in json.dumps(spec["containers"])  # no extended-resource GPUs at all
    # Pinned through the scheduler (which alone allocates claims), not around it.
    assert "nodeName" not in spec
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [H100]}]}]}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    for obj in (claim, pod):
        for version in ("1.34.0", "1.37.0"):
            assert kubernetes_validate.validate(obj, version, strict=True)


def test_mig_devices_are_claimed_from_the_mig_class(kube_api: KubeApiServer) -> None:
    leased = [A100_MIGS[0], A100_MIGS[2]]

    connector_for(kube_api).bind(request(leased, node=A100))

    claim = kube_api.claim(NS, NAME)
    assert claim is not None
    assert {r["exactly"]["deviceClassName"] for r in claim["spec"]["devices"]["requests"]} == {"mig.nvidia.com"}
    assert allocated_uuids(kube_api) == leased


def test_each_container_gets_its_own_share_of_the_devices(kube_api: KubeApiServer) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "spec": {
        "initContainers": [{"name": "warmup", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        "containers": [
            {"name": "trainer", "image": "pytorch/pytorch:2.4", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {"name": "evaluator", "image": "pytorch/pytorch:2.4",
             "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}, "requests": {"nvidia.com/gpu": "1"}}},
            {"name": "logger", "image": "busybox"},
        ]}}  # fmt: skip

    connector_for(kube_api).bind(request(H100_UUIDS[:3], manifest=manifest))

    pod = kube_api.pod(NS, NAME)
    assert pod is not None
    resources = {c["name"]: c.get("resources") for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]}
    ref = "gpupool-gpus"
    assert resources == {
        "warmup": {"claims": [{"name": ref, "request": "gpu-0"}]},
        "trainer": {"claims": [{"name": ref, "request": "gpu-0"}, {"name": ref, "request": "gpu-1"}]},
        "evaluator": {"limits": {"memory": "8Gi"}, "requests": {},
                      "claims": [{"name": ref, "request": "gpu-2"}]},
        "logger": None,
    }  # fmt: skip


def test_the_manifests_own_claims_and_node_terms_are_kept(kube_api: KubeApiServer) -> None:
    manifest = json.loads(json.dumps(MANIFEST))
    manifest["spec"] |= {
        "nodeName": H100,
        "resourceClaims": [{"name": "scratch", "resourceClaimTemplateName": "nvme-scratch"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}},
    }  # fmt: skip

    connector_for(kube_api).bind(request(H100_UUIDS[:1], manifest=manifest))

    spec = (kube_api.pod(NS, NAME) or {})["spec"]
    assert [c["name"] for c in spec["resourceClaims"]] == ["scratch", "gpupool-gpus"]
    assert "nodeName" not in spec
    pin = {"key": "metadata.name", "operator": "In", "values": [H100]}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [t["matchFields"] for t in terms] == [[pin], [pin]]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["a"], ["b"]]


def test_unbind_deletes_the_pod_and_its_claim(kube_api: KubeApiServer) -> None:
    connector = connector_for(kube_api)
    status = connector.bind(request(H100_UUIDS[:2]))

    connector.unbind(status.handle, grace_s=7)
    connector.unbind(status.handle, grace_s=7)  # twice is fine

    assert kube_api.pod(NS, NAME) is None and kube_api.claim(NS, NAME) is None
    assert kube_api.requests_to("DELETE", f"{CLAIMS}/{NAME}")


@pytest.mark.parametrize("ending", ["Succeeded", "Failed", "deleted"])
def test_a_workload_that_ends_on_its_own_gives_its_claim_back(kube_api: KubeApiServer, ending: str) -> None:
    connector = connector_for(kube_api)
    status = connector.bind(request(H100_UUIDS[:2]))
    assert connector.observe(status.handle).state == BIND_STARTING
    assert kube_api.claim(NS, NAME) is not None
    if ending == "deleted":
        kube_api.remove_pod(NS, NAME)
    else:
        kube_api.set_pod_phase(NS, NAME, ending, exit_code=0 if ending == "Succeeded" else 1)

    ended = connector.observe(status.handle)

    assert ended.state == {"Succeeded": BIND_SUCCEEDED, "Failed": BIND_FAILED, "deleted": BIND_GONE}[ending]
    assert kube_api.claim(NS, NAME) is None
    assert (kube_api.pod(NS, NAME) is None) == (ending == "deleted")  # a finished pod stays to be read


def test_a_second_bind_adopts_the_pod_and_the_claim(kube_api: KubeApiServer) -> None:
    connector = connector_for(kube_api)
    first = connector.bind(request(H100_UUIDS[:2]))

    second = connector.bind(request(H100_UUIDS[:2]))

    assert second.handle["uid"] == first.handle["uid"] and second.handle["claim"] == NAME
    assert len(kube_api.requests_to("POST", CLAIMS)) == 2
    assert len(kube_api.resource_claims) == 5 + 1  # the cluster's own five, and ours once


def test_a_claim_name_taken_by_someone_else_fails_the_bind_and_leaves_no_pod(kube_api: KubeApiServer) -> None:
    kube_api.add_claim({"metadata": {"name": NAME, "namespace": NS}, "spec": {"devices": {"requests": []}}})

    with pytest.raises(AgentError) as failed:
        connector_for(kube_api).bind(request(H100_UUIDS[:1]))

    assert failed.value.permanent
    assert "does not belong to lease" in failed.value.message
    assert kube_api.pod(NS, NAME) is None
    assert kube_api.claim(NS, NAME) is not None  # theirs: left alone


def test_a_claim_that_cannot_be_created_removes_the_pod_again(kube_api: KubeApiServer) -> None:
    kube_api.fail_next(100, status=503, method="POST", path_prefix=CLAIMS, message="etcdserver: timeout")
    connector = connector_for(kube_api)
    connector.retry_budget_s = 1.0

    with pytest.raises(AgentError) as failed:
        connector.bind(request(H100_UUIDS[:1]))

    assert not failed.value.permanent and "etcdserver: timeout" in failed.value.message
    assert kube_api.pod(NS, NAME) is None


def test_device_plugin_gpus_on_a_dra_cluster_still_bind_by_count(kube_api: KubeApiServer) -> None:
    node = next(n for n in kube_api.nodes if n.startswith("gke-"))
    uuids = [gpu_uuid(node, "nvidia.com/gpu", i, "test-cluster") for i in range(2)]

    status = connector_for(kube_api).bind(request(uuids, node=node))

    pod = kube_api.pod(NS, NAME) or {}
    assert pod["spec"]["nodeName"] == node
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "8", "nvidia.com/gpu": "2"}
    assert pod["metadata"]["labels"] == {"gpupool.io/lease": LEASE}
    assert "resourceClaims" not in pod["spec"] and "claim" not in status.handle
    assert kube_api.requests_to("POST", CLAIMS) == []


CLAIM_NAME_TAKEN: dict[str, Any] = json.loads(json.dumps(MANIFEST))
CLAIM_NAME_TAKEN["spec"]["resourceClaims"] = [{"name": "gpupool-gpus", "resourceClaimName": "mine"}]


@pytest.mark.parametrize(
    ("uuids", "manifest", "words"),
    [
        ([H100_UUIDS[0], gpu_uuid(H100, "nvidia.com/gpu", 0, "test-cluster")], None, "one way or the other"),
        (['GPU-1" || true || "'], None, "not an NVIDIA device uuid"),
        ([H100_UUIDS[0]], CLAIM_NAME_TAKEN, "already has a resource claim"),
    ],
    ids=["mixed", "cel-injection", "claim-name-taken-in-manifest"],
)
def test_bad_leases_and_manifests_are_refused_before_anything_is_created(
    kube_api: KubeApiServer, uuids: list[str], manifest: dict[str, Any] | None, words: str
) -> None:
    with pytest.raises(AgentError) as refused:
        connector_for(kube_api).bind(request(uuids, manifest=manifest))

    assert refused.value.permanent and words in refused.value.message
    assert kube_api.requests_to("POST") == []


def test_a_dra_binding_known_only_by_name_is_deleted_with_its_claim(kube_api: KubeApiServer) -> None:
    """What a bind that never reported left (its pod and claim) is found by name and removed."""
    connector = connector_for(kube_api)
    leased = [H100_UUIDS[0]]
    handle = connector.bind_handle(request(leased))
    assert handle is not None and handle["claim"] == NAME and not handle["uid"]
    connector.bind(request(leased))
    connector.unbind(handle, grace_s=0)
    assert kube_api.pod(NS, NAME) is None and kube_api.claim(NS, NAME) is None


def test_a_requeued_lease_gets_a_pod_and_claim_of_its_own_generation(kube_api: KubeApiServer) -> None:
    """The first binding's pod and claim may still exist (its node lost): the next generation
    names its own, so it never adopts a claim naming the old devices."""
    connector = connector_for(kube_api)
    first = connector.bind(request([H100_UUIDS[0]]))
    again = BindRequest(**{**request([H100_UUIDS[1]]).__dict__, "generation": 1})
    second = connector.bind(again)
    assert (second.handle["name"], second.handle["claim"]) == (f"{NAME}-1", f"{NAME}-1")
    pod, claim = kube_api.pod(NS, f"{NAME}-1"), kube_api.claim(NS, f"{NAME}-1")
    assert pod is not None and claim is not None
    assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == f"{NAME}-1"
    assert claim["metadata"]["labels"] == {"gpupool.io/lease": LEASE}
    assert allocated_uuids(kube_api, f"{NAME}-1") == [H100_UUIDS[1]]
    connector.unbind(first.handle, grace_s=0)  # the old binding's stop leaves the new one alone
    assert kube_api.pod(NS, NAME) is None and kube_api.claim(NS, NAME) is None
    assert kube_api.pod(NS, f"{NAME}-1") is not None and kube_api.claim(NS, f"{NAME}-1") is not None
