"""Node and Pod JSON → HostFact: captured fixtures, derived fixtures and edge cases."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from agents.base import HEALTH_UNHEALTHY, HOST_CORDONED, HOST_OFFLINE, HOST_READY
from agents.k8s_nodes import node_to_host
from agents.k8s_resources import (
    foreign_gpu_count,
    gpu_uuid,
    parse_count,
    pod_gpu_count,
    resource_for_uuid,
)
from tests.support.kube import (
    A16_NODELIST,
    AKS_NODELIST,
    K8S_FIXTURES,
    derived_node,
    load_json,
    make_pod,
)

# --- captured fixtures (real clusters) ---------------------------------------------------------


def test_rke2_a16_vgpu_node_reads_one_gpu_with_gfd_model_memory_and_versions() -> None:
    (node,) = load_json(A16_NODELIST)["items"]
    host = node_to_host(node, [])

    assert host.name == "nori"
    assert host.address == "0.202.61.70"
    assert host.state == HOST_READY
    assert host.driver_version == "550.90.07"
    assert host.cuda_version == "12.4"
    assert host.taints == ()
    assert host.error == ""
    assert host.foreign_gpus == 0
    assert host.labels["nvidia.com/gpu.product"] == "NVIDIA-A16-4Q"
    (gpu,) = host.gpus
    assert gpu.uuid == "k8s-nori-gpu-0"
    assert gpu.index == 0
    assert gpu.model == "NVIDIA A16 4Q"
    assert gpu.memory_mb == 4096
    assert gpu.mig_profile == ""
    assert gpu.shared_replicas == 1
    assert gpu.health == "ok"


def test_aks_nodes_without_gpus_parse_to_hosts_with_no_gpus_and_no_error() -> None:
    nodes = load_json(AKS_NODELIST)["items"]
    hosts = [node_to_host(node, []) for node in nodes]

    assert [h.name for h in hosts] == [f"aks-agentpool-30520393-vmss00000{i}" for i in range(3)]
    assert [h.address for h in hosts] == ["10.240.0.4", "10.240.0.5", "10.240.0.6"]
    assert all(h.gpus == () and h.error == "" and h.state == HOST_READY for h in hosts)
    assert hosts[0].labels["topology.kubernetes.io/zone"] == "0"


# --- derived fixtures (hand-written from real excerpts) -----------------------------------------


@pytest.mark.parametrize("path", sorted(K8S_FIXTURES.glob("derived-*.json")), ids=lambda p: p.name)
def test_every_derived_fixture_is_a_valid_node_object(path) -> None:
    assert kubernetes_validate.validate(load_json(path), "1.37.0", strict=True) == "1.37"


def test_mig_mixed_node_reports_whole_gpus_and_slices_per_profile() -> None:
    host = node_to_host(derived_node("a100-mig-mixed"), [])

    by_profile: dict[str, list] = {}
    for gpu in host.gpus:
        by_profile.setdefault(gpu.mig_profile, []).append(gpu)
    assert {k: len(v) for k, v in by_profile.items()} == {"": 2, "1g.10gb": 6, "2g.20gb": 4}
    whole, small, large = by_profile[""][0], by_profile["1g.10gb"][0], by_profile["2g.20gb"][3]
    assert (whole.uuid, whole.model, whole.memory_mb) == (
        "k8s-gpu-a100-mig-gpu-0", "NVIDIA A100 SXM4 80GB", 81920,
    )  # fmt: skip
    # The GFD per-profile memory label wins over the profile name ...
    assert (small.uuid, small.model, small.memory_mb) == (
        "k8s-gpu-a100-mig-mig-1g.10gb-0", "NVIDIA A100 SXM4 80GB MIG 1g.10gb", 9728,
    )  # fmt: skip
    # ... and without one, the name gives it (the stray mig-3g.41gb label is not used).
    assert (large.uuid, large.memory_mb) == ("k8s-gpu-a100-mig-mig-2g.20gb-3", 20480)
    # Kubernetes does not say which physical GPU holds a slice: no parent is made up.
    assert all(g.parent_uuid == "" for g in host.gpus)
    assert [g.index for g in host.gpus] == list(range(12))
    assert len({g.uuid for g in host.gpus}) == 12


def test_mig_single_strategy_cordoned_node_marks_every_unit_as_a_slice() -> None:
    host = node_to_host(derived_node("a100-mig-single-cordoned"), [])

    assert host.state == HOST_CORDONED
    assert host.taints == ("node.kubernetes.io/unschedulable:NoSchedule",)
    assert len(host.gpus) == 14
    assert {(g.model, g.mig_profile, g.memory_mb) for g in host.gpus} == {
        ("NVIDIA A100 SXM4 40GB MIG 1g.5gb", "1g.5gb", 4864)
    }


def test_time_sliced_node_shows_each_replica_as_oversubscribed() -> None:
    host = node_to_host(derived_node("t4-timeslicing"), [])

    assert len(host.gpus) == 8  # 2 physical T4 x 4 replicas, as the device plugin advertises
    assert {g.shared_replicas for g in host.gpus} == {4}
    assert {g.model for g in host.gpus} == {"Tesla T4"}  # the -SHARED suffix is not a model
    assert host.driver_version == "550.54.15"


def test_shared_product_without_replica_label_infers_replicas_from_counts() -> None:
    node = derived_node("t4-timeslicing")
    del node["metadata"]["labels"]["nvidia.com/gpu.replicas"]

    assert {g.shared_replicas for g in node_to_host(node, []).gpus} == {4}  # 8 advertised / 2


def test_gke_node_takes_model_from_accelerator_label_and_lists_its_taint() -> None:
    host = node_to_host(derived_node("gke-t4"), [])

    assert [g.uuid for g in host.gpus] == [
        "k8s-gke-prod-gpu-pool-3c1a2b7e-x1z2-gpu-0",
        "k8s-gke-prod-gpu-pool-3c1a2b7e-x1z2-gpu-1",
    ]
    assert {(g.model, g.memory_mb) for g in host.gpus} == {("NVIDIA Tesla T4", 16 * 1024)}
    assert host.taints == ("nvidia.com/gpu=present:NoSchedule",)
    assert host.driver_version == ""  # GKE labels carry no driver version


def test_not_ready_node_is_offline_and_withdrawn_device_is_unhealthy() -> None:
    host = node_to_host(derived_node("h100-notready"), [])

    assert host.state == HOST_OFFLINE
    assert len(host.gpus) == 8
    assert [g.health for g in host.gpus].count(HEALTH_UNHEALTHY) == 1
    assert host.gpus[7].health == HEALTH_UNHEALTHY
    assert "allocatable" in host.gpus[7].health_reason
    assert host.gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert host.gpus[0].memory_mb == 81559


def test_legacy_alpha_resource_and_name_label() -> None:
    host = node_to_host(derived_node("legacy-alpha-k80"), [])

    assert [g.uuid for g in host.gpus] == [f"k8s-old-k80-gpu-{i}" for i in range(4)]
    assert {g.model for g in host.gpus} == {"Tesla K80"}
    assert resource_for_uuid("old-k80", host.gpus[0].uuid) == "nvidia.com/gpu"


def test_unschedulable_and_not_ready_node_is_offline_not_cordoned() -> None:
    node = derived_node("h100-notready")
    node["spec"]["unschedulable"] = True

    assert node_to_host(node, []).state == HOST_OFFLINE


def test_gpu_labelled_node_without_advertised_gpus_reports_an_error() -> None:
    node = derived_node("h100-notready")
    node["status"]["capacity"].pop("nvidia.com/gpu")
    node["status"]["allocatable"].pop("nvidia.com/gpu")

    host = node_to_host(node, [])
    assert host.gpus == ()
    assert host.error == "node has GPU labels but its device plugin advertises no GPUs"


def test_driver_version_is_rebuilt_from_parts_when_full_label_is_missing() -> None:
    node = derived_node("a100-mig-mixed")
    labels = node["metadata"]["labels"]
    del labels["nvidia.com/cuda.driver-version.full"]
    del labels["nvidia.com/cuda.runtime-version.full"]

    host = node_to_host(node, [])
    assert (host.driver_version, host.cuda_version) == ("535.129.03", "12.2")


# --- foreign GPUs -------------------------------------------------------------------------------


def test_foreign_gpus_count_active_pods_without_the_lease_label() -> None:
    node = derived_node("h100-notready")
    pods = [
        make_pod("training", "gpu-h100-down", 2),
        make_pod("inference", "gpu-h100-down", 1, use_requests=True),  # request only
        make_pod("ours", "gpu-h100-down", 4, lease="L-1"),  # gpupool's own: not foreign
        make_pod("finished", "gpu-h100-down", 3, phase="Succeeded"),
        make_pod("crashed", "gpu-h100-down", 3, phase="Failed"),
        make_pod("waiting", "gpu-h100-down", 1, phase="Pending"),  # holds its GPU already
        make_pod("cpu-only", "gpu-h100-down", 0),
    ]
    assert node_to_host(node, pods).foreign_gpus == 4


def test_foreign_gpus_never_exceed_the_gpus_of_the_node() -> None:
    host = node_to_host(derived_node("gke-t4"), [make_pod("big", "gke", 5)])
    assert host.foreign_gpus == 2


def test_pod_gpu_count_takes_max_of_app_sum_and_largest_init_container() -> None:
    pod = make_pod("p", "n", 1)
    pod["spec"]["containers"].append({"name": "b", "resources": {"limits": {"nvidia.com/gpu": 2}}})
    pod["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "sidecar", "restartPolicy": "Always",
         "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}},
    ]  # fmt: skip
    assert pod_gpu_count(pod) == 4  # init 4 > app 1 + 2 + sidecar 1
    pod["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    assert pod_gpu_count(pod) == 4  # app 3 + sidecar 1


def test_foreign_count_includes_mig_slices() -> None:
    assert foreign_gpu_count([make_pod("m", "n", 3, resource="nvidia.com/mig-1g.10gb")]) == 3


# --- helpers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("8", 8), (2, 2), ("0", 0), ("2.0", 2), ("1k", 1000), ("-1", 0), ("junk", 0), (None, 0)],
)
def test_parse_count_reads_whole_numbers_and_never_crashes(value, expected) -> None:
    assert parse_count(value) == expected


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.24gb+me",
    ],
)
def test_synthetic_uuid_maps_back_to_its_resource(resource: str) -> None:
    uuid = gpu_uuid("node-with-mig-in-name", resource, 3)
    assert resource_for_uuid("node-with-mig-in-name", uuid) == resource


def test_foreign_uuid_maps_to_plain_gpu_resource() -> None:
    assert resource_for_uuid("n1", "GPU-6f2a6a9e-0000") == "nvidia.com/gpu"
    assert resource_for_uuid("n1", gpu_uuid("n2", "nvidia.com/mig-1g.10gb", 0)) == "nvidia.com/gpu"


def test_node_to_host_does_not_modify_its_input() -> None:
    node = derived_node("a100-mig-mixed")
    before = copy.deepcopy(node)
    node_to_host(node, [make_pod("p", "gpu-a100-mig", 1)])
    assert node == before
