"""Discovery on a cluster with Dynamic Resource Allocation: GPUs read from the NVIDIA driver's
ResourceSlices (real uuids, models, memory, MIG), foreign use per device from other people's
ResourceClaims, and `device_binding` auto / dra / device_plugin; over real HTTP."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from agents.base import HEALTH_OK, HEALTH_UNHEALTHY, HOST_READY, HostFact
from agents.k8s_dra import DEVICE_BINDING_LABEL
from agents.kubernetes import KubernetesConnector
from tests.support.kube import (
    A100,
    A100_GPU0,
    A100_GPU1,
    A100_MIGS,
    DRA_SLICES,
    H100,
    H100_UUIDS,
    connector_for,
    derived_node,
    load_dra_cluster,
    load_json,
)
from tests.support.kube_server import KubeApiServer


def hosts_by_name(connector: KubernetesConnector) -> dict[str, HostFact]:
    discovery = connector.discover()
    assert discovery.error == ""
    return {h.name: h for h in discovery.hosts}


def test_the_slice_fixture_is_valid_for_the_first_and_the_newest_dra_schema() -> None:
    for version in ("1.34.0", "1.37.0"):
        assert kubernetes_validate.validate(load_json(DRA_SLICES), version, strict=True)


@pytest.mark.parametrize("honour_selectors", [True, False], ids=["selectors", "no-selectors"])
def test_gpus_come_from_the_slices_with_their_real_uuids(kube_api: KubeApiServer, honour_selectors: bool) -> None:
    kube_api.honour_field_selectors = honour_selectors
    load_dra_cluster(kube_api)

    hosts = hosts_by_name(connector_for(kube_api))

    h100 = hosts[H100]
    assert h100.error == "" and h100.state == HOST_READY  # no device plugin there, and that is fine
    assert [g.uuid for g in h100.gpus] == H100_UUIDS  # the stale generation's GPU-…99 is not there
    assert [g.index for g in h100.gpus] == [0, 1, 2, 3]
    assert {g.model for g in h100.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.memory_mb for g in h100.gpus} == {81559}
    assert [g.health for g in h100.gpus] == [HEALTH_OK] * 3 + [HEALTH_UNHEALTHY]
    assert h100.gpus[3].health_reason == "device taint gpu.nvidia.com/unhealthy=xid-79:NoSchedule"
    assert (h100.driver_version, h100.cuda_version) == ("580.95.05", "13.0")  # node labels first
    assert h100.labels[DEVICE_BINDING_LABEL] == "dra"


def test_mig_devices_hang_under_their_parent_gpu(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)

    a100 = hosts_by_name(connector_for(kube_api))[A100]

    assert [g.uuid for g in a100.gpus] == [A100_GPU0, *A100_MIGS, A100_GPU1]
    parent, migs, whole = a100.gpus[0], a100.gpus[1:4], a100.gpus[4]
    assert (parent.parent_uuid, parent.model, parent.index) == ("", "NVIDIA A100 80GB PCIe", 0)
    assert {m.parent_uuid for m in migs} == {A100_GPU0}
    assert [m.mig_profile for m in migs] == ["3g.40gb", "1g.10gb", "1g.10gb"]
    assert [m.model for m in migs] == ["NVIDIA A100 80GB PCIe MIG 3g.40gb"] + ["NVIDIA A100 80GB PCIe MIG 1g.10gb"] * 2
    assert [m.memory_mb for m in migs] == [40192, 9728, 9728]
    assert [m.index for m in migs] == [0, 1, 2]
    assert (whole.index, whole.memory_mb, whole.parent_uuid) == (1, 81920, "")
    # No driver labels on this node: the versions the slices carry.
    assert (a100.driver_version, a100.cuda_version) == ("580.95.5", "13.0")


def test_foreign_use_is_per_device_from_other_peoples_claims(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)

    hosts = hosts_by_name(connector_for(kube_api))

    def holders(host: HostFact) -> dict[str, list[str]]:
        return {g.uuid: [p.name for p in g.processes] for g in host.gpus if g.processes}

    # gpu-2 by someone's claim; gpu-0 is gpupool's own (labelled); gpu-1 only has admin access.
    assert holders(hosts[H100]) == {H100_UUIDS[2]: ["claim vision/train-7f9c-gpus-x2kq"]}
    assert holders(hosts[A100]) == {A100_MIGS[1]: ["claim research/notebook-gpu"]}
    # The device-plugin count of a DRA node is not used: neither its GPUs nor its pods' count.
    assert hosts[A100].foreign_gpus == 0 and len(hosts[A100].gpus) == 5


def test_a_node_without_slices_keeps_the_device_plugin_in_the_same_cluster(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)

    gke = next(h for h in hosts_by_name(connector_for(kube_api)).values() if h.name.startswith("gke-"))

    assert [g.uuid for g in gke.gpus] == [f"k8s-test-cluster:{gke.name}-gpu-{i}" for i in range(2)]
    assert gke.labels[DEVICE_BINDING_LABEL] == "device_plugin"


def test_auto_on_a_cluster_without_dra_binds_by_count(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)
    kube_api.serve_dra = False  # the API server answers 404 for resource.k8s.io/v1

    hosts = hosts_by_name(connector_for(kube_api))

    a100 = hosts[A100]
    assert [g.uuid for g in a100.gpus] == [f"k8s-test-cluster:{A100}-gpu-{i}" for i in range(2)]
    assert a100.foreign_gpus == 2
    assert {h.labels[DEVICE_BINDING_LABEL] for h in hosts.values()} == {"device_plugin"}
    assert "no GPUs" in hosts[H100].error  # GPU labels, no device plugin, no DRA: shown, not hidden
    (probe,) = kube_api.requests_to("GET", "/apis/")
    assert probe.path == "/apis/resource.k8s.io/v1/resourceslices"


def test_auto_not_allowed_to_read_slices_binds_by_count(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)
    kube_api.fail_next(10, status=403, path_prefix="/apis/", message="resourceslices is forbidden")

    hosts = hosts_by_name(connector_for(kube_api))

    assert hosts[A100].labels[DEVICE_BINDING_LABEL] == "device_plugin"
    assert len(kube_api.requests_to("GET", "/apis/")) == 1  # forbidden is not retried


def test_slices_that_cannot_be_read_for_now_fail_the_discovery_instead_of_swapping_uuids(
    kube_api: KubeApiServer,
) -> None:
    load_dra_cluster(kube_api)
    kube_api.fail_next(100, status=503, path_prefix="/apis/", message="etcdserver: leader changed")

    discovery = connector_for(kube_api).discover()

    assert discovery.hosts == ()
    assert "ResourceSlices" in discovery.error and "leader changed" in discovery.error


def test_dra_on_a_cluster_without_the_group_is_a_source_error(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)
    kube_api.serve_dra = False

    discovery = connector_for(kube_api, device_binding="dra").discover()

    assert discovery.hosts == ()
    assert "device_binding is 'dra'" in discovery.error
    assert "does not serve resource.k8s.io/v1" in discovery.error


def test_dra_on_a_cluster_without_the_nvidia_driver_is_a_source_error(kube_api: KubeApiServer) -> None:
    kube_api.load_nodes([derived_node("gke-t4")])

    discovery = connector_for(kube_api, device_binding="dra").discover()

    assert "no ResourceSlice of driver gpu.nvidia.com" in discovery.error


def test_dra_shows_a_gpu_node_without_slices_as_an_error_not_bound_by_count(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)

    hosts = hosts_by_name(connector_for(kube_api, device_binding="dra"))

    gke = next(h for h in hosts.values() if h.name.startswith("gke-"))
    assert gke.gpus == () and "no ResourceSlice of driver gpu.nvidia.com" in gke.error
    assert [g.uuid for g in hosts[H100].gpus] == H100_UUIDS


def test_device_plugin_never_reads_slices(kube_api: KubeApiServer) -> None:
    load_dra_cluster(kube_api)

    hosts = hosts_by_name(connector_for(kube_api, device_binding="device_plugin"))

    assert kube_api.requests_to("GET", "/apis/") == []
    assert [g.uuid for g in hosts[A100].gpus] == [f"k8s-test-cluster:{A100}-gpu-{i}" for i in range(2)]
    assert hosts[A100].labels[DEVICE_BINDING_LABEL] == "device_plugin"


@pytest.mark.parametrize("value", ["DRA", "yes", 1, None, ""])
def test_device_binding_must_be_one_of_three_words(value: Any) -> None:
    errors = KubernetesConnector.validate_config({"kubeconfig": "/k", "device_binding": value})
    assert any("'device_binding' must be one of auto, dra, device_plugin" in e for e in errors)


@pytest.mark.parametrize("value", ["auto", "dra", "device_plugin"])
def test_device_binding_values(value: str) -> None:
    assert KubernetesConnector.validate_config({"kubeconfig": "/k", "device_binding": value}) == []
