"""Synthetic Kubernetes GPU fleets for benchmarks, and a benchmark of discovering one.

`make_nodes(n, gpus_per_node)` returns N Node objects shaped like the API's JSON (GFD labels,
capacity/allocatable, Ready condition), cycling through a few realistic kinds of GPU node;
`make_pods(nodes)` adds foreign and gpupool pods on them. Both are pure and deterministic.

    python bench/k8s_fleet.py [--nodes 1000] [--gpus-per-node 8] [--http]

Without `--http` it times the pure parser (`node_to_host`) alone; with it, the whole
`KubernetesConnector.discover()` against the test API server over real HTTP on 127.0.0.1
(paged lists, JSON decoding, grouping pods by node). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.k8s_nodes import node_to_host
from agents.k8s_resources import LEASE_LABEL

# (product label, memory MiB, driver, CUDA, extra labels, extra resources per node)
_KINDS: list[tuple[str, int, str, str, dict[str, str], dict[str, int]]] = [
    ("NVIDIA-H100-80GB-HBM3", 81559, "550.90.07", "12.4", {}, {}),
    ("NVIDIA-A100-SXM4-80GB", 81920, "535.129.03", "12.2", {}, {}),
    ("NVIDIA-L40S", 46068, "550.54.15", "12.4", {}, {}),
    # mixed MIG: half the GPUs whole, the rest as 1g.10gb slices (7 per GPU)
    ("NVIDIA-A100-SXM4-80GB", 81920, "535.129.03", "12.2",
     {"nvidia.com/mig.strategy": "mixed"}, {"mig-1g.10gb": 7}),
    # time-slicing with 4 replicas per GPU
    ("Tesla-T4-SHARED", 15360, "550.54.15", "12.4",
     {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}, {}),
]  # fmt: skip


def make_nodes(n: int, gpus_per_node: int = 8) -> list[dict[str, Any]]:
    """N synthetic GPU Nodes named `gpu-node-00000`…, Ready, untainted, cycling through H100,
    A100, L40S, A100 with mixed MIG and time-sliced T4 nodes. Every 50th node is cordoned."""
    nodes = []
    for i in range(n):
        product, memory, driver, cuda, extra_labels, per_gpu = _KINDS[i % len(_KINDS)]
        name = f"gpu-node-{i:05d}"
        resources: dict[str, str] = {}
        if "mig-1g.10gb" in per_gpu:
            whole = gpus_per_node // 2
            resources["nvidia.com/gpu"] = str(whole)
            resources["nvidia.com/mig-1g.10gb"] = str((gpus_per_node - whole) * 7)
        else:
            replicas = int(extra_labels.get("nvidia.com/gpu.replicas", "1"))
            resources["nvidia.com/gpu"] = str(gpus_per_node * replicas)
        base = {"cpu": "128", "memory": "1056561152Ki", "pods": "110", **resources}
        labels = {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus_per_node),
            "nvidia.com/gpu.memory": str(memory),
            "nvidia.com/cuda.driver-version.full": driver,
            "nvidia.com/cuda.runtime-version.full": cuda,
            **extra_labels,
        }
        spec: dict[str, Any] = {"unschedulable": True} if i % 50 == 49 else {}
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "uid": f"00000000-0000-4000-8000-{i:012d}",
                             "labels": labels},
                "spec": spec,
                "status": {
                    "capacity": dict(base),
                    "allocatable": dict(base),
                    "addresses": [{"type": "InternalIP",
                                   "address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"}],
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )  # fmt: skip
    return nodes


def make_pods(nodes: list[dict[str, Any]], every: int = 3) -> list[dict[str, Any]]:
    """On every `every`-th node: one foreign pod holding 2 GPUs, one gpupool pod holding 1
    and one finished foreign pod (which must not count)."""
    pods = []
    for i, node in enumerate(nodes):
        if i % every:
            continue
        name = node["metadata"]["name"]
        for suffix, gpus, phase, labels in (
            ("train", 2, "Running", {}),
            ("lease", 1, "Running", {LEASE_LABEL: f"lease-{i}"}),
            ("done", 4, "Succeeded", {}),
        ):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"{name}-{suffix}", "namespace": "bench",
                                 "labels": labels},
                    "spec": {"nodeName": name, "containers": [{"name": "c", "image": "x",
                             "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
                    "status": {"phase": phase},
                }
            )  # fmt: skip
    return pods


def _bench_parse(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    started = time.perf_counter()
    hosts = [node_to_host(n, by_node.get(n["metadata"]["name"], [])) for n in nodes]
    return {"hosts": hosts, "wall_s": time.perf_counter() - started}


def _bench_http(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    from agents.kubernetes import KubernetesConnector
    from tests.support.kube_server import KubeApiServer

    server = KubeApiServer().start()
    try:
        server.load_nodes(nodes)
        for pod in pods:
            server.add_pod(pod)
        connector = KubernetesConnector("bench", {"host": server.url})
        connector.discover()  # warm-up: the client's first call builds its models
        started = time.perf_counter()
        discovery = connector.discover()
        wall = time.perf_counter() - started
        connector.close()
    finally:
        server.stop()
    if discovery.error:
        raise SystemExit(discovery.error)
    return {"hosts": list(discovery.hosts), "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--http", action="store_true", help="time discover() over HTTP")
    args = parser.parse_args(argv)

    nodes = make_nodes(args.nodes, args.gpus_per_node)
    pods = make_pods(nodes)
    result = (_bench_http if args.http else _bench_parse)(nodes, pods)
    hosts = result["hosts"]
    print(json.dumps({
        "mode": "http" if args.http else "parse",
        "nodes": len(nodes),
        "pods": len(pods),
        "hosts": len(hosts),
        "gpus": sum(len(h.gpus) for h in hosts),
        "foreign_gpus": sum(h.foreign_gpus for h in hosts),
        "wall_s": round(result["wall_s"], 4),
        "nodes_per_s": round(len(nodes) / result["wall_s"]) if result["wall_s"] else None,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
