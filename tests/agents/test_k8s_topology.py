"""NVLink islands of Kubernetes GPUs (agents/k8s_topology.py): the GFD clique label spans
nodes, an NVSwitch product makes one island per node, a PCIe product none; a DRA attribute wins."""

from __future__ import annotations

from agents.k8s_nodes import node_to_host
from agents.k8s_topology import attribute_island, node_island


def _node(name: str, labels: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_clique_label_puts_the_gpus_of_two_nodes_in_one_island() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.clique": "c0ffee.1"}
    a = node_to_host(_node("a", labels), [])
    b = node_to_host(_node("b", labels), [])
    assert {g.nvlink_island for g in (*a.gpus, *b.gpus)} == {"clique:c0ffee.1"}


def test_sxm_product_is_one_island_per_node_and_pcie_none() -> None:
    assert node_island({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SXM5"}) == "nvl0"
    assert node_island({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}) == "nvl0"
    assert node_island({"nvidia.com/gpu.product": "Tesla-T4"}) == ""
    host = node_to_host(_node("t4", {"nvidia.com/gpu.product": "Tesla-T4"}), [])
    assert {g.nvlink_island for g in host.gpus} == {""}


def test_dra_clique_attribute() -> None:
    assert attribute_island({"cliqueID": "abc.2"}) == "clique:abc.2"
    assert attribute_island({"uuid": "GPU-1"}) == ""
