"""The synthetic fleet generator of bench/k8s_fleet.py makes valid, parseable Node objects."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import kubernetes_validate

from agents.k8s_nodes import node_to_host

_spec = importlib.util.spec_from_file_location(
    "k8s_fleet", Path(__file__).resolve().parents[2] / "bench" / "k8s_fleet.py"
)
assert _spec and _spec.loader
k8s_fleet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(k8s_fleet)


def test_make_nodes_is_deterministic_and_schema_valid() -> None:
    nodes = k8s_fleet.make_nodes(5, gpus_per_node=4)

    assert nodes == k8s_fleet.make_nodes(5, gpus_per_node=4)
    assert [n["metadata"]["name"] for n in nodes] == [f"gpu-node-0000{i}" for i in range(5)]
    for node in nodes:
        assert kubernetes_validate.validate(node, "1.37.0", strict=True) == "1.37"


def test_generated_fleet_parses_to_the_expected_gpus_and_foreign_use() -> None:
    nodes = k8s_fleet.make_nodes(5, gpus_per_node=4)
    pods = k8s_fleet.make_pods(nodes, every=1)

    hosts = [
        node_to_host(n, [p for p in pods if p["spec"]["nodeName"] == n["metadata"]["name"]])
        for n in nodes
    ]

    # H100, A100, L40S: 4 each; mixed MIG: 2 whole + 2 x 7 slices; time-sliced T4: 4 x 4.
    assert [len(h.gpus) for h in hosts] == [4, 4, 4, 16, 16]
    # the gpupool pod and the finished one do not count
    assert [h.foreign_gpus for h in hosts] == [2] * 5
    assert hosts[0].gpus[0].model == "NVIDIA H100 80GB HBM3"
    assert {g.mig_profile for g in hosts[3].gpus} == {"", "1g.10gb"}
    assert {g.shared_replicas for g in hosts[4].gpus} == {4}
